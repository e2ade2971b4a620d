"""What a validator notes about a window before checking it survives a restart (validators/pending.py)."""

from __future__ import annotations

from validators.inventory import Inventory
from validators.pending import PendingWindow, PendingWindows


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
