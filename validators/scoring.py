"""From a miner's per-window verdicts to its score, the moving average, and weights on chain.

A window score is the usefulness of the update, in proportion to the window's reference drop;
every check is a gate in front of it (a miner that fails one scores 0), never a share of it, so
presence and well-formedness alone earn nothing. Pure functions: the validator's loop gathers
the numbers, these turn them into scores.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence


def usefulness_score(loss_drop_assigned: float, loss_drop_unassigned: float, scale: float) -> float:
    """Map the update's loss drops (applied alone to the global model) to [0, 1].

    The score grows with the drop on the miner's assigned data, full at `scale` (the window's
    reference drop, `reference_drop`). Honest training helps the miner's own data at least as
    much as data it was not given, so an update that helps unassigned data more (trained on other
    data) is scaled down by the ratio of the two drops; an update that does not lower the loss on
    its assigned data scores 0.
    """
    if not (math.isfinite(loss_drop_assigned) and math.isfinite(loss_drop_unassigned)) or not scale > 0:
        return 0.0
    if loss_drop_assigned <= 0:
        return 0.0
    score = min(1.0, loss_drop_assigned / scale)
    if loss_drop_unassigned > loss_drop_assigned:
        score *= loss_drop_assigned / loss_drop_unassigned
    return score


def reference_drop(drops: Sequence[float]) -> float:
    """What an honest update brings this window: the median of the positive loss drops of the
    miners that passed every check (0 when none helped).

    A miner's usefulness is measured against it, so an update that does a thousandth of the work
    earns about a thousandth of the score, whatever the stage of training; the median is not moved
    by one outlier, and an update far better than the median is capped at a full score rather
    than allowed to set everyone else's."""
    helped = [d for d in drops if math.isfinite(d) and d > 0]
    return statistics.median(helped) if helped else 0.0


def ema_update(previous: Sequence[float], scores: Sequence[float], alpha: float) -> list[float]:
    """new = alpha · score + (1 − alpha) · old, uid by uid."""
    if len(previous) != len(scores):
        raise ValueError(f"{len(previous)} averages but {len(scores)} scores")
    return [alpha * s + (1.0 - alpha) * p for p, s in zip(previous, scores, strict=True)]


def weights_from_averages(
    averages: Sequence[float], *, burn_share: float, owner_uid: int | None, exclude: Sequence[int] = ()
) -> list[float]:
    """Normalized weights: the averages (minus excluded uids) scaled to 1 − burn_share, the rest to the owner.

    With nothing to pay, everything goes to the owner's uid (burned), or, without one, nothing
    is set (all zeros) and the caller skips setting weights.
    """
    excluded = set(exclude)
    kept = [0.0 if uid in excluded else max(0.0, a) for uid, a in enumerate(averages)]
    total = sum(kept)
    weights = [0.0] * len(averages)
    if total > 0:
        payable = 1.0 - (burn_share if owner_uid is not None else 0.0)
        weights = [payable * (k / total) for k in kept]  # the share first: payable * k underflows for tiny k
    if owner_uid is not None and 0 <= owner_uid < len(weights):
        weights[owner_uid] += burn_share if total > 0 else 1.0
    return weights
