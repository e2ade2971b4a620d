"""The run's rule from a validator's window scores to the updates its aggregate takes and their
weights. The aggregating validator applies it to its verdicts; every follower applies it to the
aggregator's signed report and refuses an aggregate that does not match, so the weights of the
global model's step are never the aggregator's free choice.

The rule: every miner whose checks all passed with a score above zero and whose update, applied
alone to the window's base, lowered the loss of the window's reserve (its measured gain, the
report's `drop_unseen`) is a candidate; the aggregate takes the `top_n` largest gains, each weighted
by its gain over the sum of the chosen ones (summed in that order, so every machine computes the
same floats). Ties go by sha256 of the window's challenge seed and the hotkey: an order nobody knows
before the commit deadline, so no miner can grind a hotkey that sorts first.

Why the gain and not the score. A score is the tokens a manifest claims, and most claims are never
replayed in the window they are made (a catch comes later, and forfeits the pay: `validators.pay`).
Weighted by its score, a claim of ten times one's work would weigh ten times in the model, and take
one of the top n places, every window it went unchallenged. The gain is measured on sequences no
miner was assigned, drawn after the commit deadline (`validators.usefulness`): it does not grow with
what a manifest claims, an inflater weighs by the work it did, and a copy of stale updates by what
it still teaches the model. What the choice costs in held-out loss, with an inflater and a copier
among the miners, is docs/incentives.md's row e.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from dataclasses import dataclass


@dataclass(frozen=True)
class Scored:
    """What the rule reads of one miner: did every check pass, its window score, and its update's
    measured gain on the window's reserve."""

    passed: bool
    score: float
    gain: float


def accepted_by_rule(scored: Mapping[str, Scored], top_n: int, seed: bytes) -> list[tuple[str, float]]:
    """(hotkey, weight) of the updates an aggregate takes, in the order it lists them; `seed` is the
    window's challenge seed (`windows.reveal_seed`), which breaks ties."""
    if top_n < 1:
        raise ValueError(f"top_n must be at least 1, got {top_n}")
    ranked = sorted(
        ((hotkey, s.gain) for hotkey, s in scored.items() if s.passed and s.score > 0 and s.gain > 0),
        key=lambda item: (-item[1], hashlib.sha256(seed + item[0].encode()).digest()),
    )[:top_n]
    total = 0.0
    for _, gain in ranked:
        total += gain
    return [(hotkey, gain / total) for hotkey, gain in ranked]
