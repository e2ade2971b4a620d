"""From a miner's per-window verdicts to its score, the moving average, and weights on chain.

Pure functions: the validator's loop gathers the numbers, these turn them into scores.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

from distrai.run import ScoreWeights

COMPONENTS = ("present", "checks", "replay", "usefulness", "distill")


def usefulness_score(loss_drop_assigned: float, loss_drop_unassigned: float, scale: float) -> float:
    """Map the update's loss drops (applied alone to the global model) to [0, 1].

    The score grows with the drop on the miner's assigned data, full at `scale`. Honest training
    helps the miner's own data at least as much as data it was not given, so an update that helps
    unassigned data more (trained on other data) is scaled down by the ratio of the two drops; an
    update that does not lower the loss on its assigned data scores 0.
    """
    if not (math.isfinite(loss_drop_assigned) and math.isfinite(loss_drop_unassigned)) or scale <= 0:
        return 0.0
    if loss_drop_assigned <= 0:
        return 0.0
    score = min(1.0, loss_drop_assigned / scale)
    if loss_drop_unassigned > loss_drop_assigned:
        score *= loss_drop_assigned / loss_drop_unassigned
    return score


def window_score(components: Mapping[str, float], weights: ScoreWeights, *, passed: bool) -> float:
    """The weighted mean, in [0, 1], of the components that were measured; zero unless every gate passed.

    A component left out (for example `replay` for a miner nobody challenged) neither helps nor
    hurts: the weights of the measured components are renormalized among themselves.
    """
    unknown = set(components) - set(COMPONENTS)
    if unknown:
        raise ValueError(f"unknown score components: {sorted(unknown)}")
    for name, value in components.items():
        if not (math.isfinite(value) and 0.0 <= value <= 1.0):
            raise ValueError(f"score component {name} = {value} must lie in [0, 1]")
    share = weights.normalized()
    measured = sum(share[name] for name in components)
    if not passed or measured == 0:
        return 0.0
    return sum(share[name] * value for name, value in components.items()) / measured


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
        weights = [payable * k / total for k in kept]
    if owner_uid is not None and 0 <= owner_uid < len(weights):
        weights[owner_uid] += burn_share if total > 0 else 1.0
    return weights
