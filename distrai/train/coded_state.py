"""A training state coded for the reveal: lossless, smaller, and checked as untrusted input.

A challenged miner reveals the start state of its run of challenged segments; the validator must
restore it bit for bit (the replay is bit-exact) and it must hash to the committed state hash, which
covers the plain tensors (`distrai.train.train_state`). So the coding is transport only: each parameter is
coded as its difference from the window's base G_w, which the validator holds, and each optimizer
tensor as it is, both split into byte planes and compressed with zstd (`distrai.train.lossless`).

The coded state is a safetensors file (format `distrai.coded_train_state/1`): one uint8 tensor per
state tensor, holding its planes' zstd frames one after the other, and a JSON record with the step
and, per tensor, its dtype, shape, whether it is a difference from the base, and each frame's length.
Decoding validates every field against the base's names and shapes before it decompresses anything,
caps the decoded size, and requires each frame to decode to exactly the size its tensor's shape
gives; a malformed or oversized file raises `CodingError` (a `ValueError`) naming what was wrong.
"""

from __future__ import annotations

import math
import os
from collections.abc import Mapping
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import torch

from distrai.train.lossless import (
    FLOAT_DTYPES,
    CodingError,
    compress,
    decompress_exact,
    delta_words,
    join_planes,
    split_planes,
    tensor_of,
    undelta_words,
    words_of,
)
from distrai.train.tensorfile import decode_tensors, encode_tensors
from distrai.train.train_state import OPTIM_PREFIX, PARAM_PREFIX, TrainState
from distrai.wire.blob_records import CodedDtype, CodedStateRecord, CodedTensor

DTYPES: dict[CodedDtype, torch.dtype] = {
    "float32": torch.float32,
    "bfloat16": torch.bfloat16,
    "float16": torch.float16,
}
"""The dtypes a coded state may hold, by their name in its record."""
DTYPE_NAMES = {dtype: name for name, dtype in DTYPES.items()}
WORKERS = min(4, os.cpu_count() or 1)
"""Tensors coded or decoded at once (numpy and zstd release the GIL); each holds a few copies of
its tensor, so at most 4 keep the memory within a few times the largest tensor's."""


def encode_coded_state(state: TrainState, base: Mapping[str, torch.Tensor]) -> bytes:
    """Code `state` against `base` (G_w by parameter name; cast to each parameter's dtype, as the
    model holds it at the window's start). Tensors are coded in `WORKERS` threads."""
    if state.params.keys() != base.keys():
        raise ValueError("the state's parameters and the base's differ in their names")
    jobs = [
        *((PARAM_PREFIX + n, v, base[n]) for n, v in state.params.items()),
        *((OPTIM_PREFIX + n, v, None) for n, v in state.optimizer.items()),
    ]
    with ThreadPoolExecutor(WORKERS) as pool:
        coded = dict(pool.map(lambda job: _encode_tensor(*job), jobs))
    tensors = {key: tensor for key, (tensor, _) in coded.items()}
    entries = {key: entry for key, (_, entry) in coded.items()}
    return encode_tensors(tensors, CodedStateRecord(step=state.step, tensors=entries))


def _encode_tensor(
    key: str, value: torch.Tensor, base: torch.Tensor | None
) -> tuple[str, tuple[torch.Tensor, CodedTensor]]:
    if value.dtype not in DTYPES.values():
        raise ValueError(f"{key} is {value.dtype}; a coded state holds {', '.join(DTYPES)}")
    words = words_of(value) if base is None else delta_words(value, base.to(value.dtype))
    frames = [compress(plane) for plane in split_planes(words)]
    entry = CodedTensor(
        dtype=DTYPE_NAMES[value.dtype],
        shape=list(value.shape),
        delta=base is not None,
        planes=[len(f) for f in frames],
    )
    return key, (torch.from_numpy(np.frombuffer(bytearray(b"".join(frames)), dtype=np.uint8)), entry)


def decode_coded_state(data: bytes, base: Mapping[str, torch.Tensor], max_bytes: int) -> TrainState:
    """The state `encode_coded_state` coded against the same `base`. `max_bytes` caps both the coded
    file and the decoded tensors; every field is checked against `base` before decompressing."""
    tensors, record = decode_tensors(data, CodedStateRecord, max_bytes=max_bytes)
    if set(record.tensors) != set(tensors):
        raise CodingError("the coded state's record does not list exactly the tensors it holds")
    layouts = {key: _layout(key, entry, base, tensors[key]) for key, entry in record.tensors.items()}
    decoded = sum(math.prod(shape) * dtype.itemsize for dtype, shape, _, _ in layouts.values())
    if decoded > max_bytes:
        raise CodingError(f"the coded state decodes to {decoded} bytes, the limit is {max_bytes}")
    with ThreadPoolExecutor(WORKERS) as pool:
        values = list(pool.map(lambda key: _decode_tensor(key, tensors[key], layouts[key], base), layouts))
    params: dict[str, torch.Tensor] = {}
    optim: dict[str, torch.Tensor] = {}
    for key, value in zip(layouts, values, strict=True):
        if key.startswith(PARAM_PREFIX):
            params[key.removeprefix(PARAM_PREFIX)] = value
        else:
            optim[key.removeprefix(OPTIM_PREFIX)] = value
    return TrainState(params=params, optimizer=optim, step=record.step)


def check_coded_state(data: bytes, max_bytes: int) -> int:
    """Check a coded state where the base is not at hand (a store audit): every field, and every
    frame decompressing to exactly its plane's size, against a zero base of the shapes it lists.
    Returns the tensors it holds; raises `CodingError` (or `WireError`) naming what is wrong."""
    _, record = decode_tensors(data, CodedStateRecord, max_bytes=max_bytes)
    shapes = {
        key.removeprefix(PARAM_PREFIX): tuple(entry.shape)
        for key, entry in record.tensors.items()
        if key.startswith(PARAM_PREFIX)
    }
    if sum(math.prod(shape) for shape in shapes.values()) * 4 > max_bytes:
        raise CodingError(f"the coded state's parameters exceed {max_bytes} bytes")
    base = {name: torch.zeros(shape) for name, shape in shapes.items()}
    state = decode_coded_state(data, base, max_bytes)
    return len(state.params) + len(state.optimizer)


def _layout(
    key: str, entry: CodedTensor, base: Mapping[str, torch.Tensor], stored: torch.Tensor
) -> tuple[torch.dtype, tuple[int, ...], bool, list[int]]:
    """(dtype, shape, delta, frame lengths) of one tensor, checked against the model and the file
    (the record's model checked each field's type)."""
    dtype, shape, planes = DTYPES[entry.dtype], tuple(entry.shape), entry.planes
    if key.startswith(PARAM_PREFIX):
        name = key.removeprefix(PARAM_PREFIX)
        if name not in base:
            raise CodingError(f"{key}: the model has no parameter {name!r:.120}")
        if shape != tuple(base[name].shape):
            raise CodingError(f"{key}: shape {shape}, the model's parameter is {tuple(base[name].shape)}")
        if not entry.delta or dtype not in FLOAT_DTYPES:
            raise CodingError(f"{key}: a parameter is coded as its difference from the base")
    elif key.startswith(OPTIM_PREFIX):
        name = key.removeprefix(OPTIM_PREFIX).rpartition("/")[0]
        if name not in base:
            raise CodingError(f"{key}: optimizer state for no parameter of the model")
        if shape not in (tuple(base[name].shape), ()):
            raise CodingError(
                f"{key}: shape {shape}, expected the parameter's {tuple(base[name].shape)} or ()"
            )
        if entry.delta:
            raise CodingError(f"{key}: optimizer state is coded as it is, not as a difference")
    else:
        raise CodingError(f"unexpected tensor {key!r:.120} in a coded state")
    if len(planes) != dtype.itemsize:
        raise CodingError(f"{key}: planes must be {dtype.itemsize} frame lengths")
    if stored.dtype != torch.uint8 or stored.dim() != 1 or sum(planes) != stored.numel():
        raise CodingError(f"{key}: frames of {sum(planes)} bytes in all, the file holds {stored.numel()}")
    return dtype, shape, entry.delta, planes


def _decode_tensor(
    key: str,
    stored: torch.Tensor,
    layout: tuple[torch.dtype, tuple[int, ...], bool, list[int]],
    base: Mapping[str, torch.Tensor],
) -> torch.Tensor:
    """One tensor's frames decompressed (each to exactly its plane's size), joined, and added to the
    base when it is a difference."""
    dtype, shape, delta, frame_lengths = layout
    raw = stored.numpy().data
    count = math.prod(shape)
    planes, offset = [], 0
    for i, length in enumerate(frame_lengths):
        try:
            planes.append(decompress_exact(raw[offset : offset + length], count))
        except CodingError as exc:
            raise CodingError(f"{key}: byte plane {i}: {exc}") from None
        offset += length
    words = join_planes(planes, dtype.itemsize)
    if delta:
        name = key.removeprefix(PARAM_PREFIX)
        words = undelta_words(words, base[name].to(dtype))
    return tensor_of(np.asarray(words), dtype, shape)
