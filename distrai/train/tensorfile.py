"""Named tensors plus a small JSON record in one safetensors blob (never pickle).

The JSON record sits in the safetensors header's metadata under the key "distrai"; each kind of
blob has its record model (`distrai.wire.blob_records`), whose `format` keeps a blob of one kind
from being read as another. Decoding goes through `distrai.wire.decode_tensors`, which validates the
header and layout before any tensor is built, then the record through its model; every refusal is a
`ValueError` (a `WireError`, or a `RecordError` naming the field).
"""

from __future__ import annotations

import json
import struct
from collections.abc import Mapping
from pathlib import Path
from typing import TypeVar

import torch
from pydantic import ValidationError

from distrai.wire import Reason, WireError
from distrai.wire import decode_tensors as decode_wire_tensors
from distrai.wire import encode_tensors as encode_wire_tensors
from distrai.wire.blob_records import BlobRecord
from distrai.wire.tensors import save_tensors_file

META_KEY = "distrai"
R = TypeVar("R", bound=BlobRecord)


class RecordError(ValueError):
    """A blob's record that its model refuses; the message names the kind, the field and why."""


def encode_tensors(tensors: Mapping[str, torch.Tensor], record: BlobRecord) -> bytes:
    """Safetensors bytes of `tensors` (CPU, contiguous) with `record` in the header."""
    return encode_wire_tensors(dict(tensors), metadata={META_KEY: record.model_dump_json()})


def save_tensors(tensors: Mapping[str, torch.Tensor], record: BlobRecord, path: Path) -> None:
    """Write `encode_tensors(tensors, record)` to `path`, streamed (`wire.tensors.save_tensors_file`)."""
    save_tensors_file(dict(tensors), path, {META_KEY: record.model_dump_json()})


def decode_tensors(
    data: bytes, kind: type[R], *, max_bytes: int | None = None
) -> tuple[dict[str, torch.Tensor], R]:
    """Tensors and record of a blob written by `encode_tensors` with a record of `kind`."""
    tensors, metadata = decode_wire_tensors(
        data, max_bytes=len(data) if max_bytes is None else max_bytes, require_finite=False
    )
    try:
        text = metadata[META_KEY]
        record = json.loads(text)
    except KeyError:
        raise WireError(Reason.MALFORMED_SAFETENSORS, f"blob carries no '{META_KEY}' record") from None
    except json.JSONDecodeError as error:
        raise WireError(Reason.MALFORMED_JSON, f"the '{META_KEY}' record is not JSON: {error}") from None
    if not isinstance(record, dict):
        raise WireError(Reason.MALFORMED_JSON, f"the '{META_KEY}' record is not a JSON object")
    if record.get("format") != kind.kind():
        raise ValueError(f"expected a {kind.kind()!r} blob, found format {record.get('format')!r:.80}")
    try:
        return tensors, kind.model_validate_json(text)
    except ValidationError as error:
        first = error.errors()[0]
        where = ".".join(str(part) for part in first["loc"]) or "the record"
        raise RecordError(
            f"the {kind.kind()} record's {where}: {first['msg']} (got {first.get('input')!r:.60})"
        ) from None


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
