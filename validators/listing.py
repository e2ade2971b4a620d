"""What a window's miners had revealed at its reveal deadline, listed once: their stores listed as
that block saw them (`validators.inventory`), the stores the reveal phase's probes found silent held
up as such (`validators.reveal_probe`), and the listing kept in the window's notes
(`validators.pending`), so a validator restarted before its aggregate is due resumes with it."""

from __future__ import annotations

import logging
from collections.abc import Callable

from distrai.protocol.announce import Announcement
from distrai.protocol.runtime import Runtime
from distrai.protocol.sync import StoreCache
from distrai.store.breaker import PassBreaker
from validators.inventory import Inventory, take_inventory
from validators.pending import PendingWindow, PendingWindows
from validators.reveal_probe import held_up

log = logging.getLogger("distrai.validator")


def listing(
    runtime: Runtime,
    notes: PendingWindows,
    pending: PendingWindow,
    in_time: dict[str, Announcement],
    stores: StoreCache,
    breaker: PassBreaker,
    block: Callable[[], int],
) -> tuple[Inventory, bool]:
    """The window's listing, and whether it was taken now (False: as taken before a restart)."""
    inventory = pending.inventory()
    if inventory is not None:
        return inventory, False
    w = pending.window
    with breaker.one_pass():
        inventory = take_inventory(
            stores, runtime.run_id, w, in_time, runtime.config.limits.max_manifest_bytes, block
        )
    inventory = held_up(inventory, pending.probe_failed)
    notes.save(pending.with_inventory(inventory))
    for url in sorted(inventory.unreachable):
        log.warning("window %d: the store %s could not be listed at the reveal deadline", w, url)
    return inventory, True
