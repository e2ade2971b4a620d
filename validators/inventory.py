"""What the miners had revealed at the reveal deadline, as this validator observed it.

At the reveal deadline the validator lists, in every store a miner announced, the window's keys
(manifests, boundary states, codec residuals) and checks which committed update blobs exist. From
then on it reads the miners' stores only through `AtDeadline`, which refuses any key absent from
that listing: an upload that lands later, even before the validator gets to it, never counts, and
the refusal says so. A store that could not be listed at the deadline (or stopped answering while
it was listed: its committed manifest or update could not be read) is listed again until the read
patience (`windows.read_patience`): an outage under way at the deadline also held up the miner's
uploads, which try again through it (`miners.uploader`), so a key absent from a listing taken after
the deadline is not yet an answer; what is still absent at the read patience is withheld
(`validators.withheld`). Content cannot change after the deadline either way: every object is checked
against a hash committed before the commit deadline.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Protocol

from distrai.protocol.announce import Announcement
from distrai.protocol.layout import manifest_key, window_prefix
from distrai.protocol.sync import StoreCache
from distrai.store import Store, StoreError
from distrai.store.base import IntegrityError, NotFound, TooLarge, blob_key
from distrai.wire import sha256_hex


class Reader(Protocol):
    """What the checks read a miner's revealed objects through: a `Store`, or `AtDeadline`."""

    def get(self, key: str, max_bytes: int) -> bytes: ...

    def get_blob(self, digest: str, max_bytes: int) -> bytes: ...


@dataclass(frozen=True)
class Inventory:
    block: int
    """the block at which the listing finished"""
    present: Mapping[str, frozenset[str]]
    """store URL → every key it held"""
    unreachable: frozenset[str] = frozenset()
    """store URLs that could not be listed: asked again until the read patience runs out"""
    late: Mapping[str, int] = field(default_factory=dict)
    """store URL → the block at which it was listed, for stores that did not answer at the deadline"""

    def listed_at(self, url: str) -> int:
        return self.late.get(url, self.block)

    def merged(self, again: Inventory) -> Inventory:
        """This listing with the stores it could not list replaced by `again`'s listing of them."""
        answered = {url: keys for url, keys in again.present.items() if url not in again.unreachable}
        return Inventory(
            self.block,
            {**self.present, **answered},
            frozenset(url for url in self.unreachable if url not in answered),
            {**self.late, **{url: again.block for url in answered}},
        )


def take_inventory(
    stores: StoreCache,
    run_id: str,
    window: int,
    miners: Mapping[str, Announcement],
    max_manifest_bytes: int,
    block_now,
) -> Inventory:
    """List what each announced store holds for `window`; `block_now()` dates the listing."""
    present: dict[str, set[str]] = {}
    unreachable = set()
    for url in sorted({a.store_url for a in miners.values()}):
        try:
            present[url] = set(stores.get(url).list(window_prefix(run_id, window) + "/"))
        except (StoreError, ValueError, OSError):
            present[url] = set()
            unreachable.add(url)
    for hotkey, announcement in sorted(miners.items()):
        url = announcement.store_url
        if url in unreachable:
            continue
        try:
            digest = _committed_update(
                stores, run_id, window, hotkey, announcement, present, max_manifest_bytes
            )
            if digest is not None and _exists(stores, url, blob_key(digest)):
                present[url].add(blob_key(digest))
        except StoreError:  # it stopped answering after its listing: the listing is not finished
            present[url] = set()
            unreachable.add(url)
    return Inventory(
        block_now(), {url: frozenset(keys) for url, keys in present.items()}, frozenset(unreachable)
    )


def _committed_update(
    stores: StoreCache,
    run_id: str,
    window: int,
    hotkey: str,
    announcement: Announcement,
    present: Mapping[str, set[str]],
    max_bytes: int,
) -> str | None:
    """The update hash the miner's committed manifest names, read leniently: anything malformed is
    left for the full checks to name. A store that does not answer raises its `StoreError`."""
    key = manifest_key(run_id, window, hotkey)
    if key not in present[announcement.store_url]:
        return None
    try:
        data = stores.get(announcement.store_url).get(key, max_bytes)
        if sha256_hex(data) != announcement.manifest_sha256:
            return None
        digest = json.loads(data)["body"]["update"]["sha256"]
    except (NotFound, TooLarge, IntegrityError, ValueError, KeyError, TypeError):
        return None
    try:
        blob_key(digest)
    except StoreError:
        return None
    return digest


def _exists(stores: StoreCache, url: str, key: str) -> bool:
    """Whether the store holds `key`; a store that does not answer raises its `StoreError`."""
    try:
        return stores.get(url).exists(key)
    except ValueError:
        return False


class AtDeadline:
    """A miner's store as it stood at the reveal deadline: reads of keys that were not there fail
    with `NotFound`, naming the deadline and whether the object arrived since; of a store that did not
    answer at the deadline, as it stood when last listed, and a key absent then is not yet an answer
    (a `StoreError`, tried again)."""

    def __init__(self, store: Store, url: str, inventory: Inventory, deadline: int):
        self.store = store
        self.keys = inventory.present.get(url, frozenset())
        self.observed = inventory.listed_at(url)
        self.after_outage = url in inventory.late
        self.deadline = deadline

    def _require(self, key: str) -> None:
        if key in self.keys:
            return
        if self.after_outage:
            raise StoreError(
                f"{key} was not in the store when it answered after an outage over the reveal deadline "
                f"(block {self.deadline}; listed at block {self.observed}): an upload the outage held up may "
                "still land"
            )
        late = ""
        try:
            if self.store.exists(key):
                late = "; it arrived later, which does not count"
        except StoreError:
            pass
        raise NotFound(
            f"{key} was not in the store at the reveal deadline (block {self.deadline}; "
            f"listed at block {self.observed}){late}"
        )

    def get(self, key: str, max_bytes: int) -> bytes:
        self._require(key)
        return self.store.get(key, max_bytes)

    def get_blob(self, digest: str, max_bytes: int) -> bytes:
        self._require(blob_key(digest))
        return self.store.get_blob(digest, max_bytes)
