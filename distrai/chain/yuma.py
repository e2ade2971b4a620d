"""Yuma Consensus: one subnet epoch, as subtensor's `epoch` (`epoch/run_epoch.rs`) computes it.

Pure numpy in float64 with plain units: weights, bonds, kappa and the like are fractions in
[0, 1], not u16 or I32F32 fixed point, and stake is in alpha. Steps, in subtensor's order:

1. Stake below `stake_threshold` counts as zero, except the subnet owner's; stake is
   normalized. New validator permits go to the `max_validators` largest non-zero stakes
   (returned, used from the next epoch); the owner's uid holds a permit, now and next, whatever
   its stake, so it can always vote its burn.
2. Active stake: the stake of uids that are active and hold a permit now, normalized.
3. Weights: rows of uids without a permit are dropped; self-weights (the diagonal) are
   dropped, except the subnet owner's; weight i→j is dropped when i last set weights at or
   before j's registration ("outdated"), and under commit-reveal when i's earliest pending
   commit was made before j's registration; rows are normalized.
4. Consensus: per miner, the active-stake-weighted median of the weights at `kappa`.
   Weights are clipped to consensus; validator trust is each row's clipped sum.
5. Rank = clipped weights times active stake; trust = rank after / before clipping;
   incentive = normalized rank (subtensor stores this normalized rank as Rank).
6. Bonds, with `bonds_penalty` interpolating the weights they follow from raw (0) to clipped
   (1), after dropping bond columns of uids registered within the last `tempo` blocks:
   - Yuma3: B = EMA(B, W) entrywise with rate 1 - bonds_moving_avg (or per-bond liquid
     alpha); dividends_i = active_stake_i * sum_j colnorm(B)_ij * incentive_j, normalized.
     B stays unnormalized in [0, 1].
   - Classic: ΔB = colnorm(W * active_stake); B = colnorm(EMA(colnorm(B), ΔB));
     dividends = B @ incentive, normalized; B is stored column max-upscaled.
   Bond rows of uids without a new permit are cleared.

Where fixed point differs: subtensor rounds every quantity to 2^-32 and truncates division,
and it stores weights, bonds and all outputs as u16 (steps of 1/65535) between epochs; these
results are unrounded, so a chain that stores u16 differs from them by up to that step. Kappa's default u16
value is 32767/65535, just under 0.5. The median's stake sums are rounded in fixed point, so
a median point that falls exactly on a stake boundary may resolve to the neighbouring weight
there. Liquid alpha's fixed-point `exp` overflows past about 21.5 and then yields `alpha_high`;
here the sigmoid is exact.
"""

from __future__ import annotations

from dataclasses import dataclass, fields

import numpy as np
import numpy.typing as npt

from distrai.chain.yuma_emission import EmissionSplit, split_emission
from distrai.chain.yuma_math import (
    Matrix,
    Vector,
    col_max_upscale,
    col_normalize,
    is_topk_nonzero,
    liquid_alphas,
    normalize,
    row_normalize,
    weighted_median_col,
)

__all__ = [
    "NO_PENDING_COMMIT",
    "EmissionSplit",
    "EpochInputs",
    "EpochParams",
    "EpochResult",
    "run_epoch",
    "split_emission",
]

NO_PENDING_COMMIT = np.iinfo(np.int64).max
"""`EpochInputs.pending_commit_block` for a uid without a pending commit (subtensor's u64::MAX)."""


def _frozen(array: npt.NDArray) -> npt.NDArray:
    array.flags.writeable = False
    return array


def _fraction(name: str, value: float) -> None:
    if not 0.0 <= value <= 1.0:
        raise ValueError(f"{name} must be in [0, 1], got {value}")


@dataclass(frozen=True)
class EpochParams:
    """The subnet hyperparameters the epoch reads, in plain units (subtensor defaults noted)."""

    kappa: float = 0.5
    bonds_moving_avg: float = 0.9
    """Weight of the old bonds in the EMA; subtensor stores it times 1e6 (default 900_000)."""
    bonds_penalty: float = 1.0
    """0: bonds follow raw weights; 1: bonds follow weights clipped to consensus."""
    yuma3: bool = True
    liquid_alpha: bool = False
    """Per-bond EMA rates (Yuma3 only, as in subtensor); off by default there too."""
    alpha_low: float = 0.7
    alpha_high: float = 0.9
    alpha_sigmoid_steepness: float = 10.0
    """Plain units: subtensor's i16 hyperparameter divided by 100 (default 1000 → 10)."""
    tempo: int = 360
    max_validators: int = 64
    stake_threshold: float = 0.0
    """Stake (alpha) below this counts as zero: no permit, no vote, no dividends."""

    def __post_init__(self) -> None:
        for name in ("kappa", "bonds_moving_avg", "bonds_penalty", "alpha_low", "alpha_high"):
            _fraction(name, getattr(self, name))
        if self.alpha_low > self.alpha_high:
            raise ValueError(f"alpha_low ({self.alpha_low}) must not exceed alpha_high ({self.alpha_high})")
        if not np.isfinite(self.alpha_sigmoid_steepness):
            raise ValueError(f"alpha_sigmoid_steepness must be finite, got {self.alpha_sigmoid_steepness}")
        if self.tempo < 0 or self.max_validators < 0:
            raise ValueError(
                f"tempo and max_validators must be >= 0, got {self.tempo}, {self.max_validators}"
            )
        if not (np.isfinite(self.stake_threshold) and self.stake_threshold >= 0):
            raise ValueError(f"stake_threshold must be finite and >= 0, got {self.stake_threshold}")


@dataclass(frozen=True)
class EpochInputs:
    """The chain state one epoch reads; uid i is index i of every array.

    `weights[i, j]` is what uid i set for uid j as stored on chain (u16 / 65535; rows need not
    sum to 1). `bonds` are the previous epoch's `EpochResult.bonds`. `active[i]` is whether
    i set weights within the activity cutoff (subtensor: last_update + activity_cutoff >=
    current_block). `current_block` dates bonds to recently registered uids (see module doc).
    The arrays are copied and made read-only.
    """

    weights: Matrix
    stake: Vector
    validator_permit: npt.NDArray[np.bool_]
    active: npt.NDArray[np.bool_]
    registered_at: npt.NDArray[np.int64]
    last_update: npt.NDArray[np.int64]
    bonds: Matrix
    current_block: int
    owner_uid: int | None = None
    """The uid of the subnet owner's hotkey (`SubnetOwnerHotkey`): its permit and stake survive the
    stake threshold, and its self-weight is kept (subtensor's burn route)."""
    pending_commit_block: npt.NDArray[np.int64] | None = None
    """Under commit-reveal, per uid, the block of its earliest unexpired weights commit, or
    `NO_PENDING_COMMIT`; None when the subnet does not run commit-reveal."""

    def __post_init__(self) -> None:
        n = np.shape(self.stake)[0] if np.ndim(self.stake) == 1 else -1
        if n < 0:
            raise ValueError(f"stake must be a vector, got shape {np.shape(self.stake)}")
        for name in ("weights", "stake", "bonds"):
            value = np.array(getattr(self, name), dtype=np.float64)
            expected = (n,) if name == "stake" else (n, n)
            if value.shape != expected:
                raise ValueError(f"{name} must have shape {expected}, got {value.shape}")
            if not np.all(np.isfinite(value)) or np.any(value < 0):
                raise ValueError(f"{name} must be finite and non-negative")
            if name == "bonds" and np.any(value > 1):
                raise ValueError("bonds must be in [0, 1]")
            object.__setattr__(self, name, _frozen(value))
        for name in ("validator_permit", "active"):
            value = np.array(getattr(self, name))
            if value.shape != (n,) or (value.size and value.dtype != np.bool_):
                raise ValueError(
                    f"{name} must be a bool vector of length {n}, got {value.dtype} {value.shape}"
                )
            object.__setattr__(self, name, _frozen(value.astype(np.bool_)))
        blocks = ["registered_at", "last_update"]
        if self.pending_commit_block is not None:
            blocks.append("pending_commit_block")
        for name in blocks:
            value = np.array(getattr(self, name))
            if value.shape != (n,) or (value.size and value.dtype.kind not in "iu") or np.any(value < 0):
                raise ValueError(f"{name} must be a vector of {n} non-negative block numbers")
            object.__setattr__(self, name, _frozen(value.astype(np.int64)))
        if self.current_block < 0:
            raise ValueError(f"current_block must be >= 0, got {self.current_block}")
        if self.owner_uid is not None and not 0 <= self.owner_uid < n:
            raise ValueError(f"owner_uid {self.owner_uid} is not a uid of this {n}-uid subnet")

    @property
    def n(self) -> int:
        return int(self.stake.shape[0])


@dataclass(frozen=True)
class EpochResult:
    """What one epoch computes, per uid; fractions sum to 1 or are all zero where noted."""

    stake: Vector
    """Stake after the threshold, normalized (subtensor's StakeWeight)."""
    active_stake: Vector
    """Stake of active permitted validators, normalized: the votes of this epoch."""
    validator_permit: npt.NDArray[np.bool_]
    """New permits: the `max_validators` largest non-zero stakes, and the owner's uid."""
    consensus: Vector
    validator_trust: Vector
    rank: Vector
    """Normalized rank, equal to incentive (as subtensor stores Rank)."""
    trust: Vector
    incentive: Vector
    """Sums to 1 or is all zero."""
    dividends: Vector
    """Sums to 1 or is all zero."""
    bonds: Matrix
    """The bonds to store and pass to the next epoch, in [0, 1]."""

    def __post_init__(self) -> None:
        for f in fields(self):
            _frozen(getattr(self, f.name))


def _owner_forced(flags: npt.NDArray[np.bool_], owner_uid: int | None) -> npt.NDArray[np.bool_]:
    """`flags` with the owner's uid set: the owner always holds a validator permit."""
    if owner_uid is None:
        return flags
    forced = flags.copy()
    forced[owner_uid] = True
    return forced


def _masked_weights(inputs: EpochInputs, permits: npt.NDArray[np.bool_]) -> Matrix:
    """Step 3: drop weights from non-permitted uids, self-weights and outdated weights."""
    w = np.where(permits[:, None], inputs.weights, 0.0)
    diagonal = np.eye(inputs.n, dtype=bool)
    if inputs.owner_uid is not None:
        diagonal[inputs.owner_uid, inputs.owner_uid] = False
    outdated = inputs.last_update[:, None] <= inputs.registered_at[None, :]
    if inputs.pending_commit_block is not None:
        outdated |= inputs.pending_commit_block[:, None] < inputs.registered_at[None, :]
    return row_normalize(np.where(diagonal | outdated, 0.0, w))


def _yuma3_bonds(
    weights: Matrix, bonds: Matrix, consensus: Vector, incentive: Vector, active_stake: Vector, p: EpochParams
) -> tuple[Matrix, Vector]:
    """Yuma3 (`compute_bonds`): bonds are an EMA of weights per (validator, miner)."""
    alpha: Matrix | float
    if p.liquid_alpha and np.any(consensus != 0):
        alpha = liquid_alphas(weights, bonds, consensus, p.alpha_low, p.alpha_high, p.alpha_sigmoid_steepness)
        ema = np.minimum((1.0 - alpha) * bonds + alpha * weights, 1.0)
        # Subtensor's sparse EMA only keeps bonds to miners the validator still weights.
        ema = np.where(weights > 0, ema, 0.0)
    else:
        alpha = 1.0 - p.bonds_moving_avg
        ema = np.minimum(alpha * weights + (1.0 - alpha) * bonds, 1.0)
    per_validator = (col_normalize(ema) * incentive[None, :]).sum(axis=1)
    return ema, normalize(per_validator * active_stake)


def _classic_bonds(
    weights: Matrix, bonds: Matrix, incentive: Vector, active_stake: Vector, p: EpochParams
) -> tuple[Matrix, Vector]:
    """Original Yuma: bonds are an EMA of stake-weighted weights, column-normalized."""
    delta = col_normalize(weights * active_stake[:, None])
    alpha = 1.0 - p.bonds_moving_avg
    ema = col_normalize(alpha * delta + (1.0 - alpha) * col_normalize(bonds))
    return col_max_upscale(ema), normalize(ema @ incentive)


def run_epoch(inputs: EpochInputs, params: EpochParams) -> EpochResult:
    """Run one Yuma Consensus epoch (see the module docstring for the steps)."""
    below = inputs.stake < params.stake_threshold
    if inputs.owner_uid is not None:
        below[inputs.owner_uid] = False
    stake = normalize(np.where(below, 0.0, inputs.stake))
    permits = _owner_forced(inputs.validator_permit, inputs.owner_uid)
    new_permit = _owner_forced(is_topk_nonzero(stake, params.max_validators), inputs.owner_uid)
    active_stake = normalize(np.where(inputs.active & permits, stake, 0.0))

    weights = _masked_weights(inputs, permits)
    preranks = active_stake @ weights
    consensus = weighted_median_col(active_stake, weights, params.kappa)
    clipped = np.minimum(weights, consensus[None, :])
    validator_trust = clipped.sum(axis=1)
    ranks = active_stake @ clipped
    trust = np.divide(ranks, preranks, out=np.zeros_like(ranks), where=preranks != 0)
    incentive = normalize(ranks)

    if params.bonds_penalty == 0.0:
        weights_for_bonds = weights
    elif params.bonds_penalty == 1.0:
        weights_for_bonds = clipped
    else:
        weights_for_bonds = weights + params.bonds_penalty * (clipped - weights)
    recently_registered = max(inputs.current_block - params.tempo, 0) <= inputs.registered_at
    old_bonds = np.where(recently_registered[None, :], 0.0, inputs.bonds)
    if params.yuma3:
        bonds, dividends = _yuma3_bonds(
            weights_for_bonds, old_bonds, consensus, incentive, active_stake, params
        )
    else:
        bonds, dividends = _classic_bonds(weights_for_bonds, old_bonds, incentive, active_stake, params)
    bonds = np.where(new_permit[:, None], bonds, 0.0)

    return EpochResult(
        stake=stake,
        active_stake=active_stake,
        validator_permit=new_permit,
        consensus=consensus,
        validator_trust=validator_trust,
        rank=incentive.copy(),
        trust=trust,
        incentive=incentive,
        dividends=dividends,
        bonds=bonds,
    )
