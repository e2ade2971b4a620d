"""What a miner and a validator share: who they are, where they publish, their copy of the global
model, and waiting for blocks in a way a stop signal can interrupt."""

from __future__ import annotations

import logging
import threading
import time

from distrai.node.seat import Seat
from distrai.protocol.announce import Announcement, parse_announcement
from distrai.protocol.globalmodel import GlobalModel
from distrai.protocol.sync import StoreCache, Syncer
from distrai.protocol.windows import base_index, roster_block

log = logging.getLogger("distrai.node")

SLOW_CHAIN_SECONDS = 2.0


class Participant:
    def __init__(self, seat: Seat):
        self.rt = seat.runtime
        self.chain = seat.chain
        self.wallet = seat.wallet
        self.hotkey = seat.wallet.hotkey.ss58_address
        self.store = seat.store
        self.store_url = seat.store_url
        self.metrics = seat.metrics
        self.stores = seat.stores or StoreCache()
        self.syncer = Syncer(self.rt, self.chain, self.stores, me=self.hotkey)
        self.windows = self.rt.config.windows
        self.model: GlobalModel | None = None

    def announce(self) -> None:
        """Say on chain where this node publishes (miners later anchor their window's manifest,
        validators their aggregate). A commitment already naming this store is left alone: replacing
        it on a restart would withdraw an anchor that may still count for a window."""
        current = self.chain.commitment(self.hotkey)
        standing = None if current is None else parse_announcement(current.data)
        if standing is not None and standing.store_url == self.store_url:
            return
        self.chain.commit(self.wallet, Announcement(store_url=self.store_url).encode())

    def base_index(self, window: int) -> int:
        """Which global model `window` trains from (`distrai.protocol.windows.base_index`)."""
        return base_index(self.windows, window, self.syncer.first_window())

    def window_miners(self, window: int) -> list[str]:
        """`window`'s miner list, sorted: every hotkey registered at `distrai.protocol.windows.roster_block`.
        Data assignment and challenges are dealt over it, so every node reads the same list, whenever
        in the window it reads it."""
        return sorted(self.chain.registrations(roster_block(self.windows, window)))

    def block_now(self) -> int:
        """The chain's current block; a chain that takes seconds to answer is said so in the log."""
        asked = time.monotonic()
        block = self.chain.block()
        waited = time.monotonic() - asked
        if waited > SLOW_CHAIN_SECONDS:
            log.warning(
                "the chain took %.1f s to answer (block %d): it is stalled or overloaded", waited, block
            )
        return block

    def sleep_until(self, block: int, stop: threading.Event) -> None:
        while not stop.is_set() and self.block_now() < block:
            stop.wait(min(0.5, self.chain.block_time() / 4))
