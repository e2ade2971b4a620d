"""One log line when something a node retries stops answering, one when it answers again.

A node that retries a store or a peer every second through an outage would otherwise say the same
thing every second. `OutageLog` keeps, for each thing it is told about, when it first failed and how
many tries failed since, and logs a warning at the first failure and another when the outage ends
(it answered, or the node stopped trying), with the outage's duration. Its clock is a parameter, so
it is tested without waiting.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass


@dataclass(frozen=True)
class Outage:
    since: float
    """when the first failed try ended (the log's clock)"""
    tries: int
    """failed tries so far"""


class OutageLog:
    def __init__(self, logger: logging.Logger, clock: Callable[[], float] = time.monotonic):
        self.logger = logger
        self.clock = clock
        self.open: dict[str, Outage] = {}
        self._lock = threading.Lock()
        """threads that share a log (a store's, `distrai.store.retry`) note their tries one at a time"""

    def failed(self, what: str, error: object) -> bool:
        """Note a failed try of `what`; logs and returns True only when it starts an outage."""
        with self._lock:
            outage = self.open.get(what)
            if outage is not None:
                self.open[what] = Outage(outage.since, outage.tries + 1)
                return False
            self.open[what] = Outage(self.clock(), 1)
        self.logger.warning("%s is out of reach: %s; trying again, quietly until it answers", what, error)
        return True

    def answered(self, what: str) -> float | None:
        """Note that `what` answered; logs the end of its outage and returns its seconds, or None
        when there was none."""
        return self._end(what, "answered again after")

    def gave_up(self, what: str, why: str) -> float | None:
        """Note that the node stopped trying `what` before it answered (`why`: what it does instead)."""
        return self._end(what, f"not tried any more ({why}) after")

    def _end(self, what: str, how: str) -> float | None:
        with self._lock:
            outage = self.open.pop(what, None)
        if outage is None:
            return None
        seconds = self.clock() - outage.since
        self.logger.warning(
            "%s %s %.1f s out of reach (%d failed %s)",
            what,
            how,
            seconds,
            outage.tries,
            "try" if outage.tries == 1 else "tries",
        )
        return seconds
