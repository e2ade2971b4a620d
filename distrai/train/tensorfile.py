"""Named tensors plus a small JSON record in one safetensors blob (never pickle).

The JSON record sits in the safetensors header's metadata under the key "distrai" and always
carries a "format" string, so a blob of one kind is never read as another. Decoding goes through
`distrai.wire.decode_tensors`, which validates the header and layout before any tensor is built;
its `WireError` is a `ValueError`.
"""

from __future__ import annotations

import json
import struct
from collections.abc import Mapping
from pathlib import Path

import torch

from distrai.wire import Reason, WireError
from distrai.wire import decode_tensors as decode_wire_tensors
from distrai.wire import encode_tensors as encode_wire_tensors
from distrai.wire.tensors import save_tensors_file

META_KEY = "distrai"


def encode_tensors(tensors: Mapping[str, torch.Tensor], record: Mapping[str, object], fmt: str) -> bytes:
    """Safetensors bytes of `tensors` (CPU, contiguous) with `record` and `fmt` in the header."""
    meta = json.dumps({**record, "format": fmt}, sort_keys=True)
    return encode_wire_tensors(dict(tensors), metadata={META_KEY: meta})


def save_tensors(
    tensors: Mapping[str, torch.Tensor], record: Mapping[str, object], fmt: str, path: Path
) -> None:
    """Write `encode_tensors(tensors, record, fmt)` to `path`, streamed (`wire.tensors.save_tensors_file`)."""
    meta = json.dumps({**record, "format": fmt}, sort_keys=True)
    save_tensors_file(dict(tensors), path, {META_KEY: meta})


def decode_tensors(
    data: bytes, fmt: str, *, max_bytes: int | None = None
) -> tuple[dict[str, torch.Tensor], dict[str, object]]:
    """Tensors and JSON record of a blob written by `encode_tensors` with the same `fmt`."""
    tensors, metadata = decode_wire_tensors(
        data, max_bytes=len(data) if max_bytes is None else max_bytes, require_finite=False
    )
    try:
        record = json.loads(metadata[META_KEY])
    except KeyError:
        raise WireError(Reason.MALFORMED_SAFETENSORS, f"blob carries no '{META_KEY}' record") from None
    except json.JSONDecodeError as error:
        raise WireError(Reason.MALFORMED_JSON, f"the '{META_KEY}' record is not JSON: {error}") from None
    if not isinstance(record, dict):
        raise WireError(Reason.MALFORMED_JSON, f"the '{META_KEY}' record is not a JSON object")
    if record.get("format") != fmt:
        raise ValueError(f"expected a {fmt!r} blob, found format {record.get('format')!r}")
    return tensors, record


def blob_format(data: bytes) -> str | None:
    """The format a blob written by `encode_tensors` declares, read from its header alone; None when
    the header is not safetensors JSON carrying a record with a format."""
    if len(data) < 8:
        return None
    (size,) = struct.unpack("<Q", data[:8])
    try:
        header = json.loads(data[8 : 8 + size])
        fmt = json.loads(header["__metadata__"][META_KEY]).get("format")
    except (ValueError, KeyError, TypeError, AttributeError):
        return None
    return fmt if isinstance(fmt, str) else None
