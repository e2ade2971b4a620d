"""The run's rule from a validator's window scores to the updates its aggregate takes and their
weights. The aggregating validator applies it to its verdicts; every follower applies it to the
aggregator's signed report and refuses an aggregate that does not match, so the weights of the
global model's step are never the aggregator's free choice.

The rule: every miner whose checks all passed with a score above zero is a candidate; each
candidate's weight is its score capped at the median of the candidates' scores; the aggregate takes
the `top_n` largest capped scores, each weighted by its capped score over the sum of the chosen
ones (summed in that order, so every machine computes the same floats). Ties go by sha256 of the
window's challenge seed and the hotkey: an order nobody knows before the commit deadline, so no
miner can grind a hotkey that sorts first.

Why the cap. A score is the tokens a manifest claims, and most claims are never replayed in the
window they are made (a catch comes later, and forfeits the pay: `validators.pay`). Uncapped, a
claim of ten times one's work would weigh ten times in the model, and take a place among the top
n, every window it went unchallenged. Capped at the median claim, a claim above the median buys
neither more weight nor a better place than the median's, and the ones below it weigh by what they
trained; so no claim that nothing has checked steers the model more than a typical miner's work.
"""

from __future__ import annotations

import hashlib
import statistics
from collections.abc import Mapping
from dataclasses import dataclass


@dataclass(frozen=True)
class Scored:
    """What the rule reads of one miner: did every check pass, and its window score."""

    passed: bool
    score: float


def capped_scores(scored: Mapping[str, Scored]) -> dict[str, float]:
    """The candidates (every check passed, a score above 0) and their scores capped at the median of
    the candidates' scores."""
    candidates = {hotkey: s.score for hotkey, s in scored.items() if s.passed and s.score > 0}
    if not candidates:
        return {}
    cap = statistics.median(sorted(candidates.values()))
    return {hotkey: min(score, cap) for hotkey, score in candidates.items()}


def accepted_by_rule(scored: Mapping[str, Scored], top_n: int, seed: bytes) -> list[tuple[str, float]]:
    """(hotkey, weight) of the updates an aggregate takes, in the order it lists them; `seed` is the
    window's challenge seed (`windows.reveal_seed`), which breaks ties."""
    if top_n < 1:
        raise ValueError(f"top_n must be at least 1, got {top_n}")
    ranked = sorted(
        capped_scores(scored).items(),
        key=lambda item: (-item[1], hashlib.sha256(seed + item[0].encode()).digest()),
    )[:top_n]
    total = 0.0
    for _, score in ranked:
        total += score
    return [(hotkey, score / total) for hotkey, score in ranked]
