"""From a miner's per-window verdicts to its score, the moving average, and weights on chain.

Pay follows verified work: a window score is the tokens the miner's manifest commits to having
trained (steps × batch × sequence length: what a challenge can check by replay) times a quality
factor in [0, 1] from the mark its update leaves on its own data (`usefulness.py`). There is no
cap at the window's median: a miner twice as fast earns twice as much, and the same compute earns
the same under one hotkey or many. Every check is a gate in front of the score (a miner that fails
one scores 0), never a share of it, so presence and well-formedness alone earn nothing. Pure
functions: the validator's loop gathers the numbers, these turn them into scores.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass

MARK_Z = 2.0
"""A window's marks are judged only once its upper quartile of miners shows a mark at least this
many standard errors above zero: early in a run an update's generic gain swamps what it memorised,
and no honest miner should lose its pay to that noise."""


@dataclass(frozen=True)
class MarkReference:
    """The window's typical mark: the median mark of the miners whose mark is measurable."""

    value: float
    judged: bool
    """False when the window's marks are not measurable: every passing update then has quality 1"""


def mark_reference(marks: Sequence[tuple[float, float]]) -> MarkReference:
    """The reference from every passing miner's (mark, mark_z). Miners that show no mark (copies,
    updates of other data) do not lower it, so copies cannot drag the bar down."""
    finite = [(m, z) for m, z in marks if math.isfinite(m) and math.isfinite(z)]
    if not finite:
        return MarkReference(0.0, False)
    zs = sorted(z for _, z in finite)
    upper_quartile = zs[(3 * (len(zs) - 1)) // 4]
    showing = [m for m, z in finite if z >= MARK_Z and m > 0]
    if upper_quartile < MARK_Z or not showing:
        return MarkReference(0.0, False)
    return MarkReference(statistics.median(showing), True)


def quality(mark: float, mark_z: float, reference: MarkReference, share: float) -> float:
    """The quality factor of an update whose mark is `mark`, `mark_z` standard errors above zero:
    in a window whose marks are judged, 0 unless the mark is measured (z at least `MARK_Z`: a copy of
    another's work shows a mark of 0 give or take noise), then full from `share` of the window's
    typical mark upwards and in proportion below it. A miner that trained a part of what it claims
    shows a part of the mark; the cap at 1 leaves nothing to gain from fitting the measurement
    beyond honest work."""
    if not reference.judged:
        return 1.0
    if not (math.isfinite(mark) and math.isfinite(mark_z)) or mark <= 0 or mark_z < MARK_Z:
        return 0.0
    return min(1.0, mark / (share * reference.value))


def tokens_trained(steps: int, batch_size: int, seq_len: int) -> int:
    """The tokens a manifest of `steps` inner steps commits to having trained."""
    return steps * batch_size * seq_len


def ema_update(previous: Sequence[float], scores: Sequence[float | None], alpha: float) -> list[float]:
    """new = alpha · score + (1 − alpha) · old, uid by uid; a uid whose score is None (its update
    passed but nobody measured it in time) keeps its average."""
    if len(previous) != len(scores):
        raise ValueError(f"{len(previous)} averages but {len(scores)} scores")
    return [p if s is None else alpha * s + (1.0 - alpha) * p for p, s in zip(previous, scores, strict=True)]


def weights_from_averages(
    averages: Sequence[float],
    *,
    burn_share: float,
    owner_uid: int | None,
    exclude: Sequence[int] = (),
    workers: Sequence[int] = (),
    worker_share: float = 0.0,
) -> list[float]:
    """Normalized weights: `worker_share` split evenly over the `workers` (validators that did their
    share of the window's measurements), `burn_share` to the owner's uid, the rest to the averages
    (minus excluded uids).

    With nothing to pay the miners, their part goes to the owner's uid (burned), or, without one, it
    is not set; with nothing at all to pay, every weight is 0 and the caller skips setting weights.
    """
    excluded = set(exclude)
    kept = [0.0 if uid in excluded else max(0.0, a) for uid, a in enumerate(averages)]
    total = sum(kept)
    weights = [0.0] * len(averages)
    paid_workers = sorted({u for u in workers if 0 <= u < len(weights)}) if worker_share > 0 else []
    to_workers = worker_share if paid_workers else 0.0
    burn = burn_share if owner_uid is not None else 0.0
    if total > 0:
        payable = 1.0 - burn - to_workers
        weights = [payable * (k / total) for k in kept]  # the share first: payable * k underflows for tiny k
    for uid in paid_workers:
        weights[uid] += to_workers / len(paid_workers)
    if owner_uid is not None and 0 <= owner_uid < len(weights):
        weights[owner_uid] += burn if total > 0 else 1.0 - to_workers
    return weights


def break_even_margin(challenged: float, alpha: float, ban_windows: int) -> float:
    """The profit margin (emission less compute cost, over emission) below which faking part of
    one's segments pays: a miner challenged with probability `challenged` a window, caught on the
    faked share f of its segments, barred `ban_windows` windows and rebuilding its moving average
    (rate `alpha`, about 1/alpha windows of emission) earns (f + μ − fμ − q·f/α) / (1 + q·f·B) of an
    honest miner's emission per window against μ for honest work: less exactly when
    μ > (1 − q/α) / (1 + q·B), whatever f (docs/protocol.md, "Why cheating does not pay")."""
    return max(0.0, (1.0 - challenged / alpha) / (1.0 + challenged * ban_windows))
