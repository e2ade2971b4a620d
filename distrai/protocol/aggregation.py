"""The run's rule from a validator's window scores to the updates its aggregate takes and their
weights. The aggregating validator applies it to its verdicts; every follower applies it to the
aggregator's signed report and refuses an aggregate that does not match, so the weights of the
global model's step are never the aggregator's free choice.

The rule: every miner whose checks all passed with a score above zero, best score first, at most
`top_n` of them, each weighted by its score over the sum of the chosen scores (summed in that
order, so every machine computes the same floats). Ties go by sha256 of the window's challenge seed
and the hotkey: an order nobody knows before the commit deadline, so no miner can grind a hotkey
that sorts first.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from dataclasses import dataclass


@dataclass(frozen=True)
class Scored:
    """What the rule reads of one miner: did every check pass, and its window score."""

    passed: bool
    score: float


def accepted_by_rule(scored: Mapping[str, Scored], top_n: int, seed: bytes) -> list[tuple[str, float]]:
    """(hotkey, weight) of the updates an aggregate takes, in the order it lists them; `seed` is the
    window's challenge seed (`windows.reveal_seed`), which breaks ties."""
    if top_n < 1:
        raise ValueError(f"top_n must be at least 1, got {top_n}")
    ranked = sorted(
        ((hotkey, s.score) for hotkey, s in scored.items() if s.passed and s.score > 0),
        key=lambda item: (-item[1], hashlib.sha256(seed + item[0].encode()).digest()),
    )[:top_n]
    total = 0.0
    for _, score in ranked:
        total += score
    return [(hotkey, score / total) for hotkey, score in ranked]
