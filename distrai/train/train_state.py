"""Training state at a segment boundary: parameters, inner-optimizer state and step, as CPU
tensors; its canonical hash; and its bit-exact serialization (safetensors with a JSON header).

Names. Parameters are keyed by the model's parameter names (tied weights once). Optimizer
state is keyed `"{parameter name}/{state key}"`, e.g. `model.norm.weight/exp_avg`; AdamW keeps
`step`, `exp_avg`, `exp_avg_sq`. A parameter the optimizer has not stepped yet has no entries.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import torch

from distrai.train.hashing import PieceRef, digests_root, piece_digests
from distrai.train.tensorfile import decode_tensors, encode_tensors, save_tensors
from distrai.wire.blob_records import TrainStateRecord

STATE_TAG = "train_state"
PARAM_PREFIX = "param/"
OPTIM_PREFIX = "optim/"


@dataclass(frozen=True)
class TrainState:
    """Parameters and optimizer state after `step` inner steps of the window."""

    params: dict[str, torch.Tensor]
    optimizer: dict[str, torch.Tensor]
    step: int


def capture_state(
    model: torch.nn.Module, optimizer: torch.optim.Optimizer, step: int, into: TrainState | None = None
) -> TrainState:
    """Copy the model's parameters and the optimizer's per-parameter state to the CPU: into the
    tensors of `into` where it holds the same names, shapes and dtypes (memory allocated and touched
    once, several times faster than fresh memory for a large model), else into fresh tensors
    (page-locked for a model on a GPU)."""
    params: dict[str, torch.Tensor] = {}
    optim: dict[str, torch.Tensor] = {}
    for section, key, value in state_entries(model, optimizer):
        target = params if section == PARAM_PREFIX else optim
        reused = (
            None if into is None else (into.params if section == PARAM_PREFIX else into.optimizer).get(key)
        )
        source = value.detach()
        if reused is not None and reused.shape == source.shape and reused.dtype == source.dtype:
            target[key] = reused.copy_(source)
        elif source.is_cuda:  # page-locked, so the copies into it run at the link's full rate
            target[key] = torch.empty(source.shape, dtype=source.dtype, pin_memory=True).copy_(source)
        else:
            target[key] = source.to("cpu", copy=True)
    return TrainState(params=params, optimizer=optim, step=step)


def state_entries(
    model: torch.nn.Module, optimizer: torch.optim.Optimizer
) -> Iterator[tuple[str, str, torch.Tensor]]:
    """Every tensor of the training state, in one order on every process that holds the same model
    and optimizer: (`PARAM_PREFIX`, parameter name, parameter) for each parameter, then
    (`OPTIM_PREFIX`, "{parameter name}/{state key}", value) for each optimizer entry."""
    named = dict(model.named_parameters())
    names = {id(p): name for name, p in named.items()}
    for param, entries in optimizer.state.items():
        if id(param) not in names:
            raise ValueError("optimizer holds state for a tensor that is not a parameter of the model")
        for key, value in entries.items():
            if not isinstance(value, torch.Tensor):
                raise ValueError(f"optimizer state {key!r} is {type(value).__name__}, not a tensor")
    for name, p in named.items():
        yield PARAM_PREFIX, name, p
    for param, entries in optimizer.state.items():
        for key, value in entries.items():
            yield OPTIM_PREFIX, f"{names[id(param)]}/{key}", value


def restore_state(model: torch.nn.Module, optimizer: torch.optim.Optimizer, state: TrainState) -> None:
    """Put `state` into the model and optimizer, bit for bit (checked against the model first)."""
    check_state(model, state)
    named = dict(model.named_parameters())
    with torch.no_grad():
        for name, param in named.items():
            param.copy_(state.params[name])
    optimizer.state.clear()
    for key, value in state.optimizer.items():
        name, entry = key.rsplit("/", 1)
        param = named[name]
        target = "cpu" if value.dim() == 0 else param.device
        optimizer.state[param][entry] = value.to(target, copy=True)


def check_state(model: torch.nn.Module, state: TrainState) -> None:
    """Refuse a state whose names, shapes or dtypes do not fit the model, or whose values are
    not finite; the message names the first offending tensor."""
    named = dict(model.named_parameters())
    missing = sorted(set(named) - set(state.params))
    extra = sorted(set(state.params) - set(named))
    if missing or extra:
        raise ValueError(
            f"state parameters do not match the model: missing {missing[:5]}, unexpected {extra[:5]}"
        )
    for name, param in named.items():
        _check_tensor(f"parameter {name}", state.params[name], param.shape, param.dtype)
    entries: dict[str, set[str]] = {}
    for key, value in state.optimizer.items():
        name, _, entry = key.rpartition("/")
        if name not in named:
            raise ValueError(f"optimizer state {key!r} names no parameter of the model")
        entries.setdefault(name, set()).add(entry)
        if value.dim() == 0:
            _check_tensor(f"optimizer state {key}", value, torch.Size([]), value.dtype)
        else:
            _check_tensor(f"optimizer state {key}", value, named[name].shape, named[name].dtype)
    if len({frozenset(keys) for keys in entries.values()}) > 1:
        raise ValueError("optimizer state has different entries for different parameters")
    if state.step < 0:
        raise ValueError(f"state step must be non-negative, got {state.step}")


def state_hash(state: TrainState) -> str:
    """Canonical hex SHA-256 of (step, parameters, optimizer state)."""
    return digests_root(STATE_TAG, state_digests(state))


def state_digests(state: TrainState) -> dict[PieceRef, str]:
    """The piece digests `state_hash` is the root of: sections `param`, `optim` and `step`."""
    return piece_digests({"param": state.params, "optim": state.optimizer, "step": _step_section(state.step)})


STEP_PIECE = PieceRef("step", "step", 0)
"""The piece of a state's digests that holds its step."""


def step_digest(step: int) -> str:
    """The digest of `STEP_PIECE` in the digests of any state after `step` inner steps."""
    return piece_digests({"step": _step_section(step)})[STEP_PIECE]


def _step_section(step: int) -> dict[str, torch.Tensor]:
    return {"step": torch.tensor([step], dtype=torch.int64)}


def states_equal(a: TrainState, b: TrainState) -> bool:
    """Bit equality of two states (same names, dtypes, shapes and values)."""
    return (
        a.step == b.step
        and a.params.keys() == b.params.keys()
        and a.optimizer.keys() == b.optimizer.keys()
        and all(_same(a.params[k], b.params[k]) for k in a.params)
        and all(_same(a.optimizer[k], b.optimizer[k]) for k in a.optimizer)
    )


def encode_state(state: TrainState) -> bytes:
    """Serialize to safetensors bytes; the step and format live in the JSON header record."""
    return encode_tensors(_state_tensors(state), TrainStateRecord(step=state.step))


def _state_tensors(state: TrainState) -> dict[str, torch.Tensor]:
    tensors = {PARAM_PREFIX + k: v for k, v in state.params.items()}
    tensors.update({OPTIM_PREFIX + k: v for k, v in state.optimizer.items()})
    return tensors


def decode_state(data: bytes) -> TrainState:
    """Parse bytes written by `encode_state` (no pickle; tensors and JSON only)."""
    tensors, record = decode_tensors(data, TrainStateRecord)
    params: dict[str, torch.Tensor] = {}
    optim: dict[str, torch.Tensor] = {}
    for key, value in tensors.items():
        if key.startswith(PARAM_PREFIX):
            params[key.removeprefix(PARAM_PREFIX)] = value
        elif key.startswith(OPTIM_PREFIX):
            optim[key.removeprefix(OPTIM_PREFIX)] = value
        else:
            raise ValueError(f"train state holds unexpected tensor {key!r}")
    return TrainState(params=params, optimizer=optim, step=record.step)


def save_state(state: TrainState, path: str | Path) -> None:
    """Write `encode_state(state)` to `path`, streamed from the tensors and renamed into place: a
    miner writes one at every segment boundary, 3.1 GB at 150m."""
    save_tensors(_state_tensors(state), TrainStateRecord(step=state.step), Path(path))


def load_state(path: str | Path) -> TrainState:
    """Read a state written by `save_state`."""
    return decode_state(Path(path).read_bytes())


def _check_tensor(what: str, tensor: torch.Tensor, shape: torch.Size, dtype: torch.dtype) -> None:
    if tensor.shape != shape or tensor.dtype != dtype:
        raise ValueError(f"{what} is {tensor.dtype} {tuple(tensor.shape)}, expected {dtype} {tuple(shape)}")
    if tensor.is_floating_point() and not bool(torch.isfinite(tensor).all()):
        raise ValueError(f"{what} holds NaN or Inf")


def _same(a: torch.Tensor, b: torch.Tensor) -> bool:
    return a.dtype == b.dtype and a.shape == b.shape and torch.equal(a, b)
