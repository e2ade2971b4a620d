"""What a validator notes about a window before checking it survives a restart (validators/pending.py)."""

from __future__ import annotations

from distrai.protocol.announce import Announcement
from distrai.protocol.layout import manifest_key
from distrai.protocol.sync import StoreCache
from distrai.store import FileStore
from validators.inventory import Inventory, take_inventory
from validators.pending import PendingWindow, PendingWindows

RUN = "ab" * 32


def test_noted_miners_and_the_deadline_listing_round_trip_through_disk(tmp_path):
    pending = PendingWindows(tmp_path / "pending")
    noted = PendingWindow(window=7, miners=["5a", "5b"], noted_block=210)
    pending.save(noted)
    assert pending.load(7) == noted and pending.load(7).inventory() is None

    listing = Inventory(block=256, present={"file:///s": frozenset({"runs/r/w7/manifests/5a.json"})})
    pending.save(noted.with_inventory(listing))
    restored = pending.load(7)
    assert restored.miners == ["5a", "5b"]
    assert restored.inventory() == listing
    assert not list((tmp_path / "pending").glob("*.tmp"))


def test_unreadable_notes_read_as_none_and_clearing_keeps_later_windows(tmp_path):
    pending = PendingWindows(tmp_path / "pending")
    for w in (5, 6, 7):
        pending.save(PendingWindow(window=w, miners=[], noted_block=w * 30))
    pending.path(7).write_text("{not json")
    assert pending.load(7) is None
    assert pending.load(8) is None
    pending.clear_through(6)
    assert pending.load(5) is None and pending.load(6) is None
    assert pending.path(7).exists()


def test_a_store_that_cannot_be_listed_at_the_deadline_is_named_unreachable_and_kept(tmp_path):
    loop = tmp_path / "outage"
    loop.symlink_to(loop)
    reachable = FileStore(tmp_path / "store")
    miners = {
        "5a": Announcement(store_url=loop.as_uri(), window=7, manifest_sha256="ab" * 32, segments=1),
        "5b": Announcement(store_url=reachable.url, window=7, manifest_sha256="cd" * 32, segments=1),
    }
    listing = take_inventory(StoreCache(), "r" * 16, 7, miners, 1 << 20, lambda: 250)
    assert listing.unreachable == frozenset({loop.as_uri()})

    pending = PendingWindows(tmp_path / "pending")
    pending.save(PendingWindow(window=7, miners=["5a", "5b"], noted_block=210).with_inventory(listing))
    assert pending.load(7).inventory() == listing


def test_a_store_listed_again_after_the_deadline_keeps_the_block_it_answered_at(tmp_path):
    """A store that did not answer at the deadline and does later is listed then: its keys count,
    dated by that listing, and the dates survive a restart."""
    up = FileStore(tmp_path / "up")
    late = tmp_path / "late"
    late_url = late.as_uri()
    miners = {"5a": Announcement(store_url=up.url), "5b": Announcement(store_url=late_url)}
    up.put(manifest_key(RUN, 7, "5a"), b"{}")
    first = take_inventory(StoreCache(), RUN, 7, miners, 1 << 20, lambda: 256)
    assert first.unreachable == frozenset({late_url})  # its folder does not exist: not listed as empty
    FileStore(late).put(manifest_key(RUN, 7, "5b"), b"{}")
    again = take_inventory(StoreCache(), RUN, 7, {"5b": miners["5b"]}, 1 << 20, lambda: 259)
    merged = first.merged(again)
    assert (
        merged.unreachable == frozenset()
        and merged.listed_at(late_url) == 259
        and merged.listed_at(up.url) == 256
    )
    assert merged.present[late_url] == frozenset({manifest_key(RUN, 7, "5b")})
    pending = PendingWindows(tmp_path / "pending")
    pending.save(PendingWindow(window=7, miners=["5a", "5b"], noted_block=210).with_inventory(merged))
    assert pending.load(7).inventory() == merged
