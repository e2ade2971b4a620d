"""How a validator publishes to its own store: its findings, measurements, receipts, report, the
accepted updates and its aggregate, tried again through an outage while what it publishes still
counts."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

from distrai.chain.base import Chain
from distrai.protocol.windows import WindowConfig, aggregate_deadline
from distrai.store import Store, StoreError
from distrai.store.base import BLOB_PREFIX
from distrai.store.outage import OutageLog

log = logging.getLogger("distrai.validator")

RETRY_PAUSE_S = 0.5
"""The most a validator waits between tries of its own store when it does not answer (a quarter
block at most)."""

Publish = Callable[[str, bytes], bool]
"""Puts one object in the validator's own store; False when it did not land (`OwnStore.put`)."""


def publish_until(windows: WindowConfig, w: int, inclusion_blocks: int) -> int:
    """The block until which a validator tries to publish window w's findings, report, accepted
    updates and aggregate through an outage of its own store: the last at which the aggregate's
    anchor, submitted once they are in the store, still lands before the aggregate deadline (an
    aggregate anchored later does not count, and the other validators read findings only beside a
    counted aggregate)."""
    return aggregate_deadline(windows, w) - inclusion_blocks


class OwnStore:
    """The validator's store as it writes to it; its outages go to `outages`, the validator's log of them."""

    def __init__(self, store: Store, chain: Chain, outages: OutageLog):
        self.store = store
        self.chain = chain
        self.outages = outages

    def until_aggregate(self, windows: WindowConfig, w: int, stop: threading.Event) -> Publish:
        """How window w's findings, report, accepted updates and aggregate are published: through an
        outage of this store, tried again until the last block at which the aggregate's anchor still
        lands before the aggregate deadline (`publish_until`); after it, an aggregate no longer
        counts, and what is left is tried once."""
        until = publish_until(windows, w, self.chain.inclusion_blocks)
        return lambda key, data: self.put(key, data, until=until, stop=stop)

    def put(
        self, key: str, data: bytes, *, until: int | None = None, stop: threading.Event | None = None
    ) -> bool:
        """Put `key` in the store. A store that does not answer is tried again every quarter block
        (half a second at most) while the chain is before block `until` (None: one try) and `stop` is
        not set; the outage is logged once when it starts and once when it ends. False, and said,
        when the object did not land."""
        what = f"the store {self.store.url} (this validator's reports and aggregates)"
        while True:
            try:
                if key.startswith(BLOB_PREFIX):
                    self.store.put_blob(data)
                else:
                    self.store.put(key, data)
            except StoreError as exc:
                block = self.chain.block()
                if until is not None and block < until and not (stop is not None and stop.is_set()):
                    self.outages.failed(what, exc)
                    pause = min(RETRY_PAUSE_S, self.chain.block_time() / 4)
                    if stop is None:
                        time.sleep(pause)
                    else:
                        stop.wait(pause)
                    continue
                if until is not None:
                    self.outages.gave_up(
                        what, f"block {block}: an aggregate anchored now would land too late"
                    )
                log.error("could not publish %s: %s", key, exc)
                return False
            self.outages.answered(what)
            return True
