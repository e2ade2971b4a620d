"""How long a miner trains in a window: whole segments while the next one still fits.

A window trains at most H steps, in segments of k. A miner trains segment after segment until the
next one would end after the time it must stop at: the commit deadline, less the time its encoding
and commit take. So a fast GPU fills its window up to H, a slow one commits fewer segments instead
of missing the deadline, and neither waits (docs/protocol.md, "How long a miner trains").
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field


def stop_time(now: float, block: int, deadline: int, block_time: float, finish_seconds: float) -> float:
    """When training must end (on the clock `now` is read from) so that `finish_seconds` of
    encoding and committing still land before block `deadline`: the current block `block` may be
    about to end, so only the whole blocks after it count."""
    return now + (deadline - block - 1) * block_time - finish_seconds


def blocks_needed(segment_seconds: float, finish_seconds: float, block_time: float) -> int:
    """Blocks a window needs at least: one segment, the encoding and commit, and the current block."""
    return math.ceil((segment_seconds + finish_seconds) / block_time) + 1


@dataclass
class Pacer:
    """Answers `inner_loop`'s `go_on` for one window, timing each segment as it ends."""

    started: float
    """when the window's first segment began, on `clock`"""
    until: float
    """when training must end, on `clock` (`stop_time`)"""
    clock: Callable[[], float] = time.monotonic
    segment_seconds: list[float] = field(default_factory=list)

    def go_on(self, segment: int) -> bool:
        """Whether segment `segment` (≥ 1) fits: the slowest segment so far, from now, ends by `until`."""
        now = self.clock()
        self.segment_seconds.append(now - self.started - sum(self.segment_seconds))
        return now + max(self.segment_seconds) <= self.until

    @property
    def slowest(self) -> float | None:
        """The slowest segment timed so far (None before any ended)."""
        return max(self.segment_seconds, default=None)
