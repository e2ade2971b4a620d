"""Vector and matrix helpers for Yuma Consensus, in float64.

Each mirrors a function of subtensor's `pallets/subtensor/src/epoch/math.rs`, on dense arrays.
Subtensor works in I32F32 fixed point (32 fractional bits, truncating division, saturating
arithmetic); these work in float64, so results agree to about 1e-9, not bit for bit.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

Vector = npt.NDArray[np.float64]
Matrix = npt.NDArray[np.float64]


def _normalized(x: npt.NDArray[np.float64], axis: int) -> npt.NDArray[np.float64]:
    """Scale `x` so it sums to 1 along `axis`; slices that sum to zero stay zero.

    A slice whose sum overflows float64 is first divided by its maximum, which changes nothing
    in exact arithmetic and keeps huge (finite) inputs from turning into zeros.
    """
    with np.errstate(over="ignore"):
        sums = x.sum(axis=axis, keepdims=True)
    overflow = ~np.isfinite(sums)
    if overflow.any():
        x = x / np.where(overflow, x.max(axis=axis, keepdims=True), 1.0)
        sums = x.sum(axis=axis, keepdims=True)
    return np.divide(x, sums, out=np.zeros_like(x), where=sums > 0)


def normalize(x: Vector) -> Vector:
    """`inplace_normalize`: sum to 1, or stay all zero."""
    return _normalized(x, axis=0)


def row_normalize(m: Matrix) -> Matrix:
    """`inplace_row_normalize`: each row sums to 1, or stays all zero."""
    return _normalized(m, axis=1)


def col_normalize(m: Matrix) -> Matrix:
    """`inplace_col_normalize`: each column sums to 1, or stays all zero."""
    return _normalized(m, axis=0)


def col_max_upscale(m: Matrix) -> Matrix:
    """`inplace_col_max_upscale`: divide each column by its maximum (zero columns stay zero)."""
    maxima = m.max(axis=0, keepdims=True) if m.size else np.zeros((1, m.shape[1]))
    return np.divide(m, maxima, out=np.zeros_like(m), where=maxima > 0)


def is_topk_nonzero(x: Vector, k: int) -> npt.NDArray[np.bool_]:
    """`is_topk_nonzero`: true for non-zero entries among the `k` largest.

    Ties are broken as subtensor does: a stable ascending sort drops the lowest uids first.
    """
    result = x != 0
    n = x.size
    if n < k:
        return result
    result[np.argsort(x, kind="stable")[: n - k]] = False
    return result


def weighted_median_col(stake: Vector, score: Matrix, majority: float) -> Vector:
    """`weighted_median_col`: per column, the stake-weighted median of the rows' scores.

    Only rows with positive stake vote; their stake is renormalized to sum to 1. Sorting a
    column's scores ascending lays the voters' stake end to end on [0, 1]; the result is the
    score whose stretch covers the point `1 - majority`, the upper one when the point falls
    on a boundary (subtensor's `lo <= minority < hi` test), and the largest score when the
    point lies past the end. In exact arithmetic this equals subtensor's mid-pivot search.
    In fixed point the stake stretches are rounded, so a point that falls exactly on a
    boundary can land on the other side there.

    Ties in score are sorted by stake, which makes the result independent of uid order even
    in floating point.
    """
    columns = score.shape[1]
    voters = stake > 0
    if not voters.any() or columns == 0:
        return np.zeros(columns)
    use_stake = normalize(stake[voters])
    use_score = score[voters]
    stakes = np.broadcast_to(use_stake[:, None], use_score.shape)
    order = np.lexsort((stakes, use_score), axis=0)
    sorted_score = np.take_along_axis(use_score, order, axis=0)
    cumulative = np.cumsum(use_stake[order], axis=0)
    minority = cumulative[-1] - majority
    past = cumulative > minority[None, :]
    index = np.where(past.any(axis=0), past.argmax(axis=0), use_score.shape[0] - 1)
    return sorted_score[index, np.arange(columns)]


def liquid_alphas(
    weights: Matrix, bonds: Matrix, consensus: Vector, low: float, high: float, steepness: float
) -> Matrix:
    """`alpha_sigmoid` for every (validator, miner) pair: the per-bond EMA rate of liquid alpha.

    A validator buying into a miner above consensus (weight over bond) or selling out of one
    (bond over weight) gets a rate between `low` and `high`, growing with the gap.
    `steepness` is in plain units: subtensor stores it as an i16 a hundred times larger.
    """
    buy = np.clip(weights - consensus[None, :], 0.0, 1.0)
    sell = np.clip(bonds - weights, 0.0, 1.0)
    gap = np.where(weights >= bonds, buy, sell)
    sigmoid = 1.0 / (1.0 + np.exp(np.clip(-steepness * (gap - 0.5), -700.0, 700.0)))
    return np.clip(low + sigmoid * (high - low), low, high)
