"""Tensors on the wire: safetensors only, with every byte of the header checked before use.

A safetensors file is an 8-byte little-endian header length, a JSON header naming each tensor's
dtype, shape and `[begin, end)` byte range in the data section, then the data section. The decoder
validates that structure itself (so a refusal names the exact problem and the library only ever
sees well-formed input), then checks names, dtypes and shapes against what the caller expects,
then loads the bytes with the safetensors library and checks the values.
"""

from __future__ import annotations

import json
import math
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import safetensors.torch
import torch

from distrai.wire.canonical import INT_MAX, looks_like_pickle, parse_json
from distrai.wire.errors import Reason, WireError

DTYPES: dict[str, torch.dtype] = {
    "F64": torch.float64,
    "F32": torch.float32,
    "F16": torch.float16,
    "BF16": torch.bfloat16,
    "I64": torch.int64,
    "I32": torch.int32,
    "I16": torch.int16,
    "I8": torch.int8,
    "U64": torch.uint64,
    "U32": torch.uint32,
    "U16": torch.uint16,
    "U8": torch.uint8,
    "BOOL": torch.bool,
}
"""The safetensors dtypes the wire carries, by their name in the header."""

MAX_HEADER_BYTES = 16 * 2**20
"""Far above any real model's header (about 100 bytes per tensor), and below the 67 MB a zip
archive's magic number would read as, so a `torch.save` file can never pass for a header length."""

MAX_RANK = 16
_LENGTH_PREFIX_BYTES = 8
_ENTRY_FIELDS = frozenset({"dtype", "shape", "data_offsets"})
_MAX_NAMES_IN_MESSAGE = 10
_MALFORMED = Reason.MALFORMED_SAFETENSORS

TensorSpec = tuple[torch.dtype, tuple[int, ...]]


@dataclass(frozen=True)
class _Entry:
    name: str
    dtype: torch.dtype
    shape: tuple[int, ...]
    begin: int
    end: int


def encode_tensors(tensors: dict[str, torch.Tensor], metadata: dict[str, str] | None = None) -> bytes:
    """Safetensors bytes of `tensors` (read from contiguous CPU copies) with optional string metadata.

    The bytes depend only on the names, dtypes, shapes and values, not on insertion order, so equal
    updates get equal content addresses."""
    prepared = prepared_tensors(tensors)
    if metadata is None:
        return safetensors.torch.save(prepared)
    _check_metadata(metadata)
    return _sorted_metadata(safetensors.torch.save(prepared, metadata=metadata))


def save_tensors_file(tensors: dict[str, torch.Tensor], path: Path, metadata: dict[str, str]) -> None:
    """Write `tensors` with one metadata entry to `path` as `encode_tensors` would, streamed from the
    tensors rather than built in memory (a 150m training state is 3.1 GB: building its bytes took 10
    times as long as writing them), through a temporary file renamed into place."""
    if len(metadata) != 1:
        raise WireError(
            Reason.BAD_FIELD, "a streamed file carries exactly one metadata entry (one canonical order)"
        )
    _check_metadata(metadata)
    prepared = prepared_tensors(tensors)
    temp = path.with_name(f".{path.name}.tmp")
    try:
        safetensors.torch.save_file(prepared, str(temp), metadata=metadata)
        os.replace(temp, path)
    except BaseException:
        temp.unlink(missing_ok=True)
        raise


def prepared_tensors(tensors: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """`tensors` checked and made contiguous CPU tensors that share no storage, ready to serialize."""
    prepared: dict[str, torch.Tensor] = {}
    storages: set[int] = set()
    for name, tensor in tensors.items():
        if not isinstance(name, str) or not name or name == "__metadata__":
            raise WireError(Reason.BAD_FIELD, f"tensor name {name!r} is not allowed")
        if not isinstance(tensor, torch.Tensor):
            raise WireError(Reason.BAD_FIELD, f"{name!r} is a {type(tensor).__name__}, not a tensor")
        if tensor.dtype not in DTYPES.values():
            raise WireError(
                Reason.WRONG_DTYPE,
                f"tensor {name!r} has dtype {_dtype_text(tensor.dtype)}, {_known_dtypes()}",
            )
        cpu = tensor.detach().to("cpu").contiguous()
        storage = cpu.untyped_storage().data_ptr()
        if storage in storages:
            cpu = cpu.clone()
        storages.add(cpu.untyped_storage().data_ptr())
        prepared[name] = cpu
    return prepared


def _sorted_metadata(data: bytes) -> bytes:
    """The same file with its metadata entries in sorted order: safetensors writes them in the
    order of a hash map, which differs from one call to the next. Same length, same layout."""
    length = int.from_bytes(data[:8], "little")
    header = json.loads(data[8 : 8 + length])
    header["__metadata__"] = dict(sorted(header["__metadata__"].items()))
    text = json.dumps(header, separators=(",", ":"), ensure_ascii=False).encode("utf-8")
    if len(text) > length:
        raise WireError(Reason.BAD_FIELD, "metadata could not be written in canonical order")
    return data[:8] + text.ljust(length, b" ") + data[8 + length :]


def _safetensors_shaped(data: bytes) -> bool:
    """Whether `data` opens as safetensors does: a header length within `MAX_HEADER_BYTES` that the
    data holds, then a JSON object. The pickle sniffer must not see such bytes, which can read as a
    complete pickle: a header length beginning with 0x50 is pickle's PERSID opcode, whose argument
    runs to the next newline, and a 0x2e after it in the tensor data is STOP (an honest miner's codec
    residual was refused so). `pickle.dumps` and `torch.save` output does not open this way (its
    first bytes read as a length far above the limit, or no '{' follows); a pickle crafted to is
    refused as malformed safetensors instead, and nothing is ever unpickled."""
    if len(data) <= _LENGTH_PREFIX_BYTES:
        return False
    length = int.from_bytes(data[:_LENGTH_PREFIX_BYTES], "little")
    return length <= MAX_HEADER_BYTES and _LENGTH_PREFIX_BYTES + length <= len(data) and data[8:9] == b"{"


def decode_tensors(
    data: bytes,
    *,
    max_bytes: int,
    expected: dict[str, TensorSpec] | None = None,
    allow_extra: bool = False,
    require_finite: bool = True,
) -> tuple[dict[str, torch.Tensor], dict[str, str]]:
    """Decode untrusted safetensors bytes into `(tensors, metadata)`, or raise `WireError`.

    Checks, in order: not a pickle; at most `max_bytes`; a well-formed header and data layout;
    when `expected` maps names to `(dtype, shape)`, every expected tensor present with that dtype
    and shape and (unless `allow_extra`) no others; bool tensors hold only 0 and 1; float tensors
    hold no NaN or infinity (unless `require_finite` is false)."""
    if not _safetensors_shaped(data) and looks_like_pickle(data):
        raise WireError(
            Reason.PICKLE, "tensor file is a pickle (or a torch.save archive); only safetensors is accepted"
        )
    if len(data) > max_bytes:
        raise WireError(Reason.TOO_LARGE, f"tensor file is {len(data)} bytes, the limit is {max_bytes}")
    entries, metadata = _read_header(data)
    if expected is not None:
        _check_expected(entries, expected, allow_extra)
    tensors = _load(data)
    for entry in entries:
        _check_values(entry.name, tensors[entry.name], require_finite)
    return tensors, metadata


def _read_header(data: bytes) -> tuple[list[_Entry], dict[str, str]]:
    if len(data) < _LENGTH_PREFIX_BYTES:
        raise WireError(_MALFORMED, f"file is {len(data)} bytes, shorter than the 8-byte header length")
    header_length = int.from_bytes(data[:_LENGTH_PREFIX_BYTES], "little")
    if header_length > MAX_HEADER_BYTES:
        raise WireError(
            _MALFORMED, f"header length {header_length} is over the {MAX_HEADER_BYTES}-byte limit"
        )
    data_start = _LENGTH_PREFIX_BYTES + header_length
    if data_start > len(data):
        raise WireError(
            _MALFORMED, f"header length {header_length} runs past the end of the {len(data)}-byte file"
        )
    try:
        header = parse_json(data[_LENGTH_PREFIX_BYTES:data_start], max_bytes=header_length)
    except WireError as exc:
        raise WireError(_MALFORMED, f"header: {exc.message}") from exc
    metadata = header.pop("__metadata__", {})
    _check_metadata(metadata, reason=_MALFORMED)
    entries = [_entry(name, spec) for name, spec in sorted(header.items())]
    _check_layout(entries, len(data) - data_start)
    return entries, metadata


def _entry(name: str, spec: Any) -> _Entry:
    if not name:
        raise WireError(_MALFORMED, "a tensor has an empty name")
    if not isinstance(spec, dict) or set(spec) != _ENTRY_FIELDS:
        fields = sorted(spec) if isinstance(spec, dict) else type(spec).__name__
        raise WireError(
            _MALFORMED, f"tensor {name!r} header entry is {fields}, expected dtype, shape, data_offsets"
        )
    dtype_name, shape, offsets = spec["dtype"], spec["shape"], spec["data_offsets"]
    if not isinstance(dtype_name, str) or dtype_name not in DTYPES:
        raise WireError(
            _MALFORMED, f"tensor {name!r} has unknown dtype {_short(dtype_name)}, {_known_dtypes()}"
        )
    if not _is_list_of_naturals(shape) or len(shape) > MAX_RANK:
        raise WireError(
            _MALFORMED,
            f"tensor {name!r} has shape {_short(shape)}, expected at most {MAX_RANK} integers >= 0",
        )
    if math.prod(max(size, 1) for size in shape) > INT_MAX:
        raise WireError(
            _MALFORMED, f"tensor {name!r} has shape {_short(shape)}, whose sizes multiply past 2**63"
        )
    if not _is_list_of_naturals(offsets) or len(offsets) != 2 or offsets[0] > offsets[1]:
        raise WireError(
            _MALFORMED,
            f"tensor {name!r} has data_offsets {_short(offsets)}, expected [begin, end] with 0 <= begin <= end",
        )
    dtype = DTYPES[dtype_name]
    begin, end = offsets
    needed = math.prod(shape) * dtype.itemsize
    if end - begin != needed:
        raise WireError(
            _MALFORMED,
            f"tensor {name!r} ({dtype_name}, shape {tuple(shape)}) needs {needed} bytes, "
            f"but its data_offsets [{begin}, {end}] span {end - begin}",
        )
    return _Entry(name=name, dtype=dtype, shape=tuple(shape), begin=begin, end=end)


def _check_layout(entries: list[_Entry], data_length: int) -> None:
    """Tensors must tile the data section exactly: in offset order, each starts where the last ended."""
    position, previous = 0, None
    for entry in sorted(entries, key=lambda e: (e.begin, e.end)):
        if entry.begin < position:
            raise WireError(
                _MALFORMED,
                f"tensor {entry.name!r} starts at byte {entry.begin}, inside tensor {previous!r} "
                f"which ends at byte {position}: tensors overlap",
            )
        if entry.begin > position:
            raise WireError(
                _MALFORMED,
                f"data bytes {position}..{entry.begin} before tensor {entry.name!r} belong to no tensor",
            )
        position, previous = entry.end, entry.name
    if position > data_length:
        raise WireError(
            _MALFORMED,
            f"tensor {previous!r} ends at byte {position}, past the {data_length}-byte data section (truncated?)",
        )
    if position < data_length:
        raise WireError(
            _MALFORMED, f"the last {data_length - position} bytes of the data section belong to no tensor"
        )


def _check_expected(entries: list[_Entry], expected: dict[str, TensorSpec], allow_extra: bool) -> None:
    found = {entry.name: entry for entry in entries}
    missing = sorted(set(expected) - set(found))
    if missing:
        raise WireError(Reason.MISSING_TENSOR, f"missing tensors {_name_list(missing)}")
    extra = sorted(set(found) - set(expected))
    if extra and not allow_extra:
        raise WireError(Reason.UNEXPECTED_TENSOR, f"unexpected tensors {_name_list(extra)}")
    for name in sorted(expected):
        dtype, shape = expected[name]
        entry = found[name]
        if entry.dtype != dtype:
            raise WireError(
                Reason.WRONG_DTYPE,
                f"tensor {name!r} has dtype {_dtype_text(entry.dtype)}, expected {_dtype_text(dtype)}",
            )
        if entry.shape != tuple(shape):
            raise WireError(
                Reason.WRONG_SHAPE, f"tensor {name!r} has shape {entry.shape}, expected {tuple(shape)}"
            )


def _load(data: bytes) -> dict[str, torch.Tensor]:
    try:
        return safetensors.torch.load(data)
    except Exception as exc:
        raise WireError(_MALFORMED, f"the safetensors library refused the file: {exc}") from exc


def _check_values(name: str, tensor: torch.Tensor, require_finite: bool) -> None:
    if tensor.numel() == 0:
        return
    if tensor.dtype == torch.bool and int(tensor.view(torch.uint8).max()) > 1:
        raise WireError(_MALFORMED, f"bool tensor {name!r} holds bytes other than 0 and 1")
    if require_finite and tensor.is_floating_point() and not bool(torch.isfinite(tensor).all()):
        nans = int(torch.isnan(tensor).sum())
        infs = int(torch.isinf(tensor).sum())
        raise WireError(Reason.NON_FINITE, f"tensor {name!r} holds {nans} NaN and {infs} infinite values")


def _check_metadata(metadata: Any, reason: Reason = Reason.BAD_FIELD) -> None:
    if not isinstance(metadata, dict) or not all(
        isinstance(key, str) and isinstance(value, str) for key, value in metadata.items()
    ):
        raise WireError(reason, "safetensors metadata must map strings to strings")


def _is_list_of_naturals(value: Any) -> bool:
    return isinstance(value, list) and all(type(item) is int and item >= 0 for item in value)


def _name_list(names: list[str]) -> str:
    shown = ", ".join(repr(name) for name in names[:_MAX_NAMES_IN_MESSAGE])
    more = len(names) - _MAX_NAMES_IN_MESSAGE
    return f"[{shown}{f', and {more} more' if more > 0 else ''}]"


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _dtype_text(dtype: torch.dtype) -> str:
    return str(dtype).removeprefix("torch.")


def _known_dtypes() -> str:
    return f"the wire carries {', '.join(DTYPES)}"
