"""Which of a window's boundary states a miner keeps on disk while it trains, and how a dropped one
is had again.

Before the challenge is drawn (at the commit deadline, after training) any segment may be challenged,
so a miner that kept every boundary state would hold the whole window's on disk: 46 × 3.09 GB = 142 GB
a window at 150m on one H100, 1.2 TB for an 8-GPU miner's 400 segments. Instead it keeps at most
`max_kept` of them, whatever the window's length: boundary 0 (the window's base, which challenged
states are coded against), the latest, and every s-th between, s the smallest power of two that fits.
When more boundaries come, s doubles and every other kept state goes; a state dropped at one spacing
is never needed at a larger one, so thinning never undoes itself.

A challenged run that starts on a dropped boundary is rebuilt after the draw by replaying the segments
from the kept state before it (`miners.rebuild`): training is deterministic, and the rebuilt state
must hash to the one the manifest committed to. That costs at most s − 1 segments of training, once,
and only when challenged.
"""

from __future__ import annotations

from pathlib import Path

DEFAULT_MAX_KEPT = 16
"""At 150m on one H100 (46 segments a window, measured pace): spacing 4, 13 states = 40.2 GB on disk
(3.09 GB each), and a rebuild of at most 3 segments = 77 s of training (25.7 s a segment) inside the
828-s reveal phase; on 8 H100s (about 368 segments): spacing 32, 13 states, at most 31 segments on one
GPU = 797 s, too long for the reveal phase, so such a miner keeps more (`--miner.kept-states 64`:
spacing 8, 47 states = 145 GB; at most 7 segments = 180 s). Computed from the measured pace
(docs/boundaries.md)."""


def check_kept_states(setting: int) -> int:
    """A miner's `--miner.kept-states`: 0 (keep every state) or at least 2 (boundary 0 and the latest)."""
    if setting < 0 or setting == 1:
        raise ValueError(
            f"--miner.kept-states must be 0 (keep every state) or at least 2 (boundary 0 and the latest), not {setting}"
        )
    return setting


def spacing(latest: int, max_kept: int) -> int:
    """The smallest power of two s for which the multiples of s from 0 to segment `latest`, and
    `latest` itself, are at most `max_kept` boundaries."""
    if max_kept < 2:
        raise ValueError(f"at least boundary 0 and the latest are kept, so max_kept >= 2, not {max_kept}")
    s = 1
    while latest // s + 1 + (latest % s != 0) > max_kept:
        s *= 2
    return s


def kept(latest: int, max_kept: int) -> set[int]:
    """The boundaries (segment numbers) kept once segment `latest` has ended."""
    s = spacing(latest, max_kept)
    return {*range(0, latest + 1, s), latest}


def state_file(states: Path, step: int) -> Path:
    return states / f"{step:06d}.safetensors"


def steps_on_disk(states: Path) -> list[int]:
    """The steps of the boundary states in `states`, in order."""
    return sorted(int(p.stem) for p in states.glob("*.safetensors") if p.stem.isdigit())


def thin(states: Path, latest_step: int, segment_steps: int, max_kept: int | None) -> None:
    """Delete the boundary states in `states` that `kept` no longer keeps once the boundary at
    `latest_step` is on disk (`max_kept` None: keep every one)."""
    if max_kept is None:
        return
    keep = {b * segment_steps for b in kept(latest_step // segment_steps, max_kept)}
    for step in steps_on_disk(states):
        if step not in keep:
            state_file(states, step).unlink(missing_ok=True)
