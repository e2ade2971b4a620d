"""How long a miner trains in a window: whole segments while the next one still fits.

A window trains at most H steps, in segments of k. A miner trains segment after segment until the
next one would end after the time it must stop at: the start of the last block its commitment can
land in before the commit deadline (from the chain's block timestamps), less the time its encoding
and commit take. So a fast GPU fills its window up to H, a slow one commits fewer segments instead
of missing the deadline, and neither waits (docs/protocol.md, "How long a miner trains").
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field


def stop_time(now: float, seconds_to_deadline: float, finish_seconds: float) -> float:
    """When training must end, on the clock `now` is read from, so that `finish_seconds` of
    encoding and committing end `seconds_to_deadline` from now: when the last block a commitment
    can land in for the window begins (`commit_by`)."""
    return now + seconds_to_deadline - finish_seconds


def commit_by(deadline: int, inclusion_blocks: int) -> int:
    """The block at whose start a commitment must be submitted to land before block `deadline`: a
    call lands `inclusion_blocks` after the head it is submitted at."""
    return deadline - inclusion_blocks


def blocks_needed(
    segment_seconds: float, finish_seconds: float, block_time: float, inclusion_blocks: int
) -> int:
    """Blocks a window needs at least: one segment, the encoding and commit, the current block and
    the blocks a commitment takes to land."""
    return math.ceil((segment_seconds + finish_seconds) / block_time) + 1 + inclusion_blocks


@dataclass
class Pacer:
    """Answers `inner_loop`'s `go_on` for one window, timing each segment as it ends."""

    started: float
    """when the window's first segment began, on `clock`"""
    until: float
    """when training must end, on `clock` (`stop_time`)"""
    clock: Callable[[], float] = time.monotonic
    stalled: Callable[[], float] = lambda: 0.0
    """seconds waited so far for data out of reach (`TrainingData.waited_s`), on any clock that counts
    seconds: a segment's time leaves them out, so an outage does not make the next window look too
    short for a segment"""
    segment_seconds: list[float] = field(default_factory=list)

    def __post_init__(self) -> None:
        self._stalled_before = self.stalled()

    def go_on(self, segment: int) -> bool:
        """Whether segment `segment` (≥ 1) fits: the slowest segment so far, from now, ends by `until`."""
        now = self.clock()
        trained = now - self.started - (self.stalled() - self._stalled_before)
        self.segment_seconds.append(trained - sum(self.segment_seconds))
        return now + max(self.segment_seconds) <= self.until

    def time_up(self) -> bool:
        """Whether training must end now, in the middle of a segment if it must (`until` has passed)."""
        return self.clock() >= self.until

    @property
    def slowest(self) -> float | None:
        """The slowest segment timed so far (None before any ended)."""
        return max(self.segment_seconds, default=None)
