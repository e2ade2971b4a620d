"""Subtensor's rules as pure functions: weight checks, u16 normalization, pruning, permits.

Error names are subtensor's, so a miner's operator sees the same words on either chain.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from distrai.chain.base import ChainError, Hyperparameters

U16_MAX = 65535


def weights_to_u16(uids: Sequence[int], weights: Sequence[float]) -> tuple[list[int], list[int]]:
    """Max-upscale float weights to u16 (the largest becomes 65535), dropping zeros, as the SDK does."""
    if len(uids) != len(weights):
        raise ChainError("WeightVecNotEqualSize", f"{len(uids)} uids but {len(weights)} weights")
    for w in weights:
        if not (w >= 0.0) or w == float("inf"):
            raise ChainError("InvalidWeights", f"weights must be finite and non-negative, got {w}")
    top = max(weights, default=0.0)
    if top == 0.0:
        return [], []
    pairs = [(int(u), round(w / top * U16_MAX)) for u, w in zip(uids, weights, strict=True)]
    kept = [(u, v) for u, v in pairs if v > 0]
    return [u for u, _ in kept], [v for _, v in kept]


def normalized(values: Sequence[int]) -> list[float]:
    total = sum(values)
    return [v / total for v in values] if total else [0.0 for _ in values]


@dataclass(frozen=True)
class WeightsCall:
    """Everything `check_set_weights` needs, read from the chain by the caller."""

    setter_uid: int | None
    """The signer's uid; None when its hotkey is not registered on the subnet."""
    n: int
    has_permit: bool
    block: int
    last_set_block: int | None
    uids: Sequence[int]
    values: Sequence[int]
    stake: float = 0.0
    """The signer's stake in alpha."""
    is_owner: bool = False
    """Whether the signer is the subnet owner's hotkey (`SubnetOwnerHotkey`)."""


def is_self_weight(setter_uid: int, uids: Sequence[int]) -> bool:
    """Subtensor's `is_self_weight`: exactly one weight, on the setter's own uid."""
    return len(uids) == 1 and uids[0] == setter_uid


def check_set_weights(call: WeightsCall, hp: Hyperparameters) -> None:
    """Subtensor's `internal_set_weights` checks, in its order; raises ChainError on the first failure.

    The owner's hotkey needs neither stake nor a permit, so a subnet owner can always route its
    share of emission. With commit-reveal on, the rate limit belongs to the commit, not to the
    reveal that reaches this check.
    """
    if len(call.uids) != len(call.values):
        raise ChainError("WeightVecNotEqualSize", f"{len(call.uids)} uids but {len(call.values)} values")
    if any(not 0 <= v <= U16_MAX for v in call.values):
        raise ChainError("InvalidWeights", "weight values must be u16")
    if len(call.uids) > call.n:
        raise ChainError("UidsLengthExceedUidsInSubNet", f"{len(call.uids)} uids on a subnet of {call.n}")
    if call.setter_uid is None:
        raise ChainError("HotKeyNotRegisteredInSubNet", "the signer holds no uid on this subnet")
    if not call.is_owner and call.stake < hp.stake_threshold:
        raise ChainError(
            "NotEnoughStakeToSetWeights",
            f"stake {call.stake:g} is below the threshold {hp.stake_threshold:g}",
        )
    # The anchor is the block of the last set or of registration; 0 means never, as in subtensor.
    if (
        not hp.commit_reveal_weights
        and call.last_set_block
        and call.block - call.last_set_block < hp.weights_rate_limit
    ):
        raise ChainError(
            "SettingWeightsTooFast",
            f"last set at block {call.last_set_block}; wait until block {call.last_set_block + hp.weights_rate_limit}",
        )
    self_only = is_self_weight(call.setter_uid, call.uids)
    if not (call.has_permit or self_only or call.is_owner):
        raise ChainError("NeuronNoValidatorPermit", f"uid {call.setter_uid} has no validator permit")
    if len(set(call.uids)) != len(call.uids):
        raise ChainError("DuplicateUids", "a uid appears twice in the weights")
    if any(not 0 <= u < call.n for u in call.uids):
        raise ChainError("UidVecContainInvalidOne", f"uids must lie in [0, {call.n})")
    if not self_only and len(call.uids) < min(hp.min_allowed_weights, call.n):
        raise ChainError(
            "WeightVecLengthIsLow",
            f"{len(call.uids)} weights set, at least {min(hp.min_allowed_weights, call.n)} required",
        )
    if not self_only and hp.max_weight_limit < 1.0:
        limit = round(hp.max_weight_limit * U16_MAX)
        for v in normalized(call.values):
            if round(v * U16_MAX) > limit:
                raise ChainError(
                    "MaxWeightExceeded", f"a weight of {v:.4f} exceeds {hp.max_weight_limit:.4f}"
                )


@dataclass(frozen=True)
class PruneCandidate:
    uid: int
    registered_at: int
    score: float


def neuron_to_prune(candidates: Sequence[PruneCandidate], block: int, immunity_period: int) -> int:
    """The uid a new registration replaces when the subnet is full.

    The lowest pruning score (last emission) among neurons past their immunity period, the
    earliest registered then the lowest uid on ties; when every neuron is immune, the same rule
    over all of them, as subtensor falls back to.
    """
    if not candidates:
        raise ChainError("NoNeuronIdAvailable", "no neuron to prune")
    mortal = [c for c in candidates if block - c.registered_at >= immunity_period]
    pool = mortal or list(candidates)
    return min(pool, key=lambda c: (c.score, c.registered_at, c.uid)).uid


def is_epoch_block(block: int, netuid: int, tempo: int) -> bool:
    """Subtensor runs a subnet's epoch when (block + netuid + 1) is a multiple of (tempo + 1)."""
    return tempo > 0 and (block + netuid + 1) % (tempo + 1) == 0


def epoch_index(block: int, netuid: int, tempo: int) -> int:
    """How many epochs have fired in blocks 1..`block`, this block's included.

    Subtensor's `current_epoch_with_lookahead`: a commit or reveal in an epoch block belongs to
    the epoch that block fires. (Block 0 is genesis, where no epoch runs.)
    """
    if tempo <= 0 or block <= 0:
        return 0
    period = tempo + 1
    return (block + netuid + 1) // period - (netuid + 1) // period
