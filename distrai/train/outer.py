"""The outer step: DiLoCo's Nesterov SGD over the weighted mean of accepted pseudo-gradients.

Every participant computes G_{w+1} from G_w and the leader's list of accepted updates, so the
result must be the same bytes everywhere. How:
- float32 tensors on the CPU, contributions taken in sorted `key` order (the caller's list
  order does not matter), one intra-op thread;
- only elementwise multiply, add and subtract of two float32 tensors, each exactly rounded by
  IEEE 754 whatever the vector width, never fused (no `alpha=`, no `addcmul`, no torch.optim);
- per-update scalars (weight share × clip factor) computed in Python float64, then rounded once
  to float32.
The one reduction is each update's L2 norm (float64), used for robust clipping: every update is
scaled to at most the weighted median norm of the accepted updates, each norm weighing what its
update weighs in the mean (`weighted_median`). On the network the weights follow each update's
measured gain, so updates that weigh little (a tiny update teaches little) cannot pull the clip
down: with a plain median, a group holding more than half the accepted updates, each scaled to 1e-4
of its work, would clip every honest update to about 1e-4 of its size (exactly half, to about half). Its last bits could in principle
differ between CPUs of different vector width, but it enters only through a clip factor
rounded to float32, so bytes differ only if that float64 value sits within ~1e-16 of a float32
rounding boundary.

Nesterov momentum follows torch.optim.SGD's convention: buf ← μ·buf + g (buf ← g at the first
step), update = g + μ·buf, θ ← θ − lr·update.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import torch

from distrai.train.determinism import pinned_threads
from distrai.train.hashing import hash_sections
from distrai.train.tensorfile import decode_tensors, encode_tensors
from distrai.wire.blob_records import OuterStateRecord

OUTER_TAG = "outer_state"


@dataclass(frozen=True)
class OuterConfig:
    """Outer optimizer settings (part of the run config)."""

    lr: float = 0.7
    momentum: float = 0.9
    nesterov: bool = True
    clip_to_median_norm: bool = True

    def __post_init__(self) -> None:
        if not self.lr > 0:
            raise ValueError(f"outer lr must be positive, got {self.lr}")
        if not 0 <= self.momentum < 1:
            raise ValueError(f"outer momentum must be in [0, 1), got {self.momentum}")


@dataclass(frozen=True)
class Contribution:
    """One accepted pseudo-gradient, its aggregation weight, and the key that orders it."""

    key: str
    pseudo_gradient: Mapping[str, torch.Tensor]
    weight: float


@dataclass(frozen=True)
class OuterState:
    """Momentum buffer (empty before the first step) and the number of outer steps taken."""

    momentum: dict[str, torch.Tensor]
    step: int = 0


@dataclass(frozen=True)
class Aggregate:
    """The weighted mean update, with each contribution's norm and clip factor by key."""

    update: dict[str, torch.Tensor]
    norms: dict[str, float]
    clip_factors: dict[str, float]


@dataclass(frozen=True)
class OuterResult:
    params: dict[str, torch.Tensor]
    state: OuterState
    aggregate: Aggregate


def update_norm(update: Mapping[str, torch.Tensor]) -> float:
    """L2 norm over all tensors of an update, accumulated in float64 in sorted-name order."""
    with pinned_threads(1):
        return sum(float(update[name].double().pow(2).sum()) for name in sorted(update)) ** 0.5


def weighted_median(values: Sequence[tuple[float, float]]) -> float:
    """The median of (value, weight) pairs: the value at which the weights below and above are each
    at most half (the mean of the two values around an exact half), as `statistics.median` for
    equal weights. Floats summed in sorted order, so every machine gets the same number."""
    ordered = sorted(values)
    total = 0.0
    for _, weight in ordered:
        total += weight
    below = 0.0
    for i, (value, weight) in enumerate(ordered):
        below += weight
        if 2 * below > total or i == len(ordered) - 1:
            return value
        if 2 * below == total:
            return (value + ordered[i + 1][0]) / 2
    raise ValueError("the median of nothing")


def aggregate(
    global_params: Mapping[str, torch.Tensor],
    contributions: Sequence[Contribution],
    *,
    clip_to_median_norm: bool = True,
) -> Aggregate:
    """Σ_i (w_i / Σw) · c_i · Δ_i over contributions sorted by key, where c_i = min(1, m / ‖Δ_i‖)
    when clipping (else 1), m the median of the norms weighted by the w_i."""
    if not contributions:
        raise ValueError("nothing to aggregate: no contributions")
    ordered = sorted(contributions, key=lambda c: c.key)
    _check_contributions(global_params, ordered)
    total_weight = sum(c.weight for c in ordered)
    with pinned_threads(1):
        norms = {c.key: update_norm(c.pseudo_gradient) for c in ordered}
        median = weighted_median([(norms[c.key], c.weight) for c in ordered])
        clip = {
            key: (min(1.0, median / norm) if norm > 0 else 1.0) if clip_to_median_norm else 1.0
            for key, norm in norms.items()
        }
        update = {name: torch.zeros_like(global_params[name]) for name in sorted(global_params)}
        for c in ordered:
            coefficient = torch.tensor(c.weight / total_weight * clip[c.key], dtype=torch.float32)
            for name in update:
                update[name] = update[name] + c.pseudo_gradient[name] * coefficient
    return Aggregate(update=update, norms=norms, clip_factors=clip)


def outer_step(
    global_params: Mapping[str, torch.Tensor],
    contributions: Sequence[Contribution],
    state: OuterState,
    config: OuterConfig,
) -> OuterResult:
    """G_{w+1} and the new outer state. With no contributions the model and state stay as they
    are (the window is skipped, momentum included)."""
    _check_params(global_params)
    if not contributions:
        empty = Aggregate(update={}, norms={}, clip_factors={})
        unchanged = {name: tensor.clone() for name, tensor in global_params.items()}
        return OuterResult(params=unchanged, state=state, aggregate=empty)
    combined = aggregate(global_params, contributions, clip_to_median_norm=config.clip_to_median_norm)
    mu = torch.tensor(config.momentum, dtype=torch.float32)
    lr = torch.tensor(config.lr, dtype=torch.float32)
    params: dict[str, torch.Tensor] = {}
    momentum: dict[str, torch.Tensor] = {}
    with pinned_threads(1):
        for name in sorted(global_params):
            grad = combined.update[name]
            previous = state.momentum.get(name)
            buf = grad.clone() if previous is None else previous * mu + grad
            step_direction = grad + buf * mu if config.nesterov else buf
            params[name] = global_params[name] - step_direction * lr
            momentum[name] = buf
    return OuterResult(
        params=params, state=OuterState(momentum=momentum, step=state.step + 1), aggregate=combined
    )


def outer_state_hash(state: OuterState) -> str:
    """The canonical hash of an outer state: its momentum buffer and its step count (an aggregate
    names the one after its step, so a checkpoint's momentum is tied to the model it follows)."""
    step = {"step": torch.tensor([state.step], dtype=torch.int64)}
    return hash_sections(OUTER_TAG, {"momentum": state.momentum, "step": step})


def encode_outer_state(state: OuterState) -> bytes:
    """Safetensors bytes of the momentum buffer, with the step in the JSON header record."""
    return encode_tensors(state.momentum, OuterStateRecord(step=state.step))


def decode_outer_state(data: bytes) -> OuterState:
    """Parse bytes written by `encode_outer_state`."""
    tensors, record = decode_tensors(data, OuterStateRecord)
    return OuterState(momentum=dict(tensors), step=record.step)


def save_outer_state(state: OuterState, path: str | Path) -> None:
    Path(path).write_bytes(encode_outer_state(state))


def load_outer_state(path: str | Path) -> OuterState:
    return decode_outer_state(Path(path).read_bytes())


def _check_params(params: Mapping[str, torch.Tensor]) -> None:
    for name, tensor in params.items():
        if tensor.dtype != torch.float32 or tensor.device.type != "cpu":
            raise ValueError(
                f"global parameter {name} must be float32 on the CPU, got {tensor.dtype} on {tensor.device}"
            )


def _check_contributions(global_params: Mapping[str, torch.Tensor], ordered: Sequence[Contribution]) -> None:
    _check_params(global_params)
    keys = [c.key for c in ordered]
    if len(set(keys)) != len(keys):
        raise ValueError("contribution keys must be unique")
    for c in ordered:
        if not (c.weight >= 0 and c.weight < float("inf")):
            raise ValueError(
                f"contribution {c.key!r} has weight {c.weight}; weights must be finite and non-negative"
            )
        if c.pseudo_gradient.keys() != global_params.keys():
            missing = sorted(set(global_params) - set(c.pseudo_gradient))[:5]
            extra = sorted(set(c.pseudo_gradient) - set(global_params))[:5]
            raise ValueError(
                f"contribution {c.key!r} does not match the model: missing {missing}, unexpected {extra}"
            )
        for name, tensor in c.pseudo_gradient.items():
            expected = global_params[name]
            if tensor.dtype != torch.float32 or tensor.device.type != "cpu" or tensor.shape != expected.shape:
                raise ValueError(
                    f"contribution {c.key!r} tensor {name} is {tensor.dtype} {tuple(tensor.shape)} on {tensor.device}, "
                    f"expected float32 {tuple(expected.shape)} on the CPU"
                )
            if not bool(torch.isfinite(tensor).all()):
                raise ValueError(f"contribution {c.key!r} tensor {name} holds NaN or Inf")
    if not sum(c.weight for c in ordered) > 0:
        raise ValueError("contribution weights sum to zero")
