"""Probing the miners' stores through the reveal phase, so that an outage that ends just before the
reveal deadline is not taken for withholding.

A miner's reveal retries through an outage of its store (`miners.uploader`) and lands once the store
answers again, a moment after it does. A store that answered the validator's listing at the deadline
was listed as final (`validators.inventory`): an outage that ended a block before the deadline held
the uploads up past it, and a challenged miner would be barred for objects "that arrived later". So
while it waits for the reveal deadline, a validator asks each store its window's miners announced
whether it answers, once a block from the commit deadline on (one request per store, a HEAD of a
committed manifest's key), and notes the last block at which it did not (`PendingWindow.probe_failed`).
A store that failed a probe in the reveal phase is listed at the deadline as one that answered only
after an outage (`held_up`): what it lacks then is not yet an answer, and it is listed again until
the read patience, the same as a store that was out at the deadline itself.

What a withholder gains: nothing it could not have before. A miner can always keep its own store
from answering at the deadline and so be listed again until the read patience; a probe that failed
earlier in the phase gives it that same patience, no more. What it still lacks at the read patience
is withheld (`validators.withheld`), and every object must hash to what it committed before the
commit deadline, so the extra blocks buy no change of the work, only the time to upload it.

At 256 miners on stores of their own, a probe is 256 HEAD requests a block for the reveal phase
(16 blocks at the GPU config): 4,096 requests a window, about 21 a second at 12-s blocks.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping

from distrai.protocol.announce import Announcement
from distrai.protocol.layout import manifest_key
from distrai.protocol.sync import StoreCache
from distrai.store import StoreError
from validators.inventory import Inventory
from validators.pending import PendingWindow

log = logging.getLogger("distrai.validator")


def probe_keys(run_id: str, window: int, in_time: Mapping[str, Announcement]) -> dict[str, str]:
    """Store URL → the key a probe asks it for: the manifest of the first miner (by hotkey) that
    announced it for the window."""
    keys: dict[str, str] = {}
    for hotkey, announcement in sorted(in_time.items()):
        keys.setdefault(announcement.store_url, manifest_key(run_id, window, hotkey))
    return keys


def silent_stores(stores: StoreCache, keys: Mapping[str, str]) -> list[str]:
    """The stores (of `keys`, URL → key) that did not answer a HEAD of their key now. Whether the
    key is there does not matter: an answer is an answer."""
    silent = []
    for url, key in sorted(keys.items()):
        try:
            stores.get(url).exists(key)
        except (StoreError, OSError, ValueError):
            silent.append(url)
    return silent


def held_up(inventory: Inventory, probe_failed: Mapping[str, int]) -> Inventory:
    """The listing taken at the reveal deadline, with every store that failed a probe in the reveal
    phase yet answered the listing marked as listed after an outage (`Inventory.late`, at the
    listing's block): a key it lacked then is asked for again until the read patience."""
    held = {
        url: inventory.block
        for url in probe_failed
        if url in inventory.present and url not in inventory.unreachable
    }
    return Inventory(inventory.block, inventory.present, inventory.unreachable, {**held, **inventory.late})


class RevealProbes:
    """One validator's probes: what each store of the window under probe is asked for (read from the
    chain once a window), and the probe itself."""

    def __init__(self, run_id: str, stores: StoreCache):
        self.run_id = run_id
        self.stores = stores
        self._keys: tuple[int, dict[str, str]] | None = None

    def probe(
        self, pending: PendingWindow, in_time: Callable[[], Mapping[str, Announcement]], block: int
    ) -> PendingWindow | None:
        """`pending` with the stores that did not answer at `block` noted in `probe_failed` (each
        said once a window), or None when every store answered; `in_time()` gives the window's
        miners whose manifests the chain anchored in time."""
        w = pending.window
        if self._keys is None or self._keys[0] != w:
            self._keys = (w, probe_keys(self.run_id, w, in_time()))
        silent = silent_stores(self.stores, self._keys[1])
        if not silent:
            return None
        for url in silent:
            if url not in pending.probe_failed:
                log.warning(
                    "window %d: the store %s did not answer at block %d of the reveal phase: what it lacks "
                    "at the reveal deadline is asked for again until the read patience",
                    w,
                    url,
                    block,
                )
        return pending.model_copy(
            update={"probe_failed": {**pending.probe_failed, **dict.fromkeys(silent, block)}}
        )
