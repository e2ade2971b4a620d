"""Named tensors plus a small JSON record in one safetensors blob (never pickle).

The JSON record sits in the safetensors header's metadata under the key "distrai" and always
carries a "format" string, so a blob of one kind is never read as another.
"""

from __future__ import annotations

import json
from collections.abc import Mapping

import torch
from safetensors import SafetensorError
from safetensors.torch import load as load_safetensors
from safetensors.torch import save as save_safetensors

META_KEY = "distrai"


def encode_tensors(tensors: Mapping[str, torch.Tensor], record: Mapping[str, object], fmt: str) -> bytes:
    """Safetensors bytes of `tensors` (CPU, contiguous) with `record` and `fmt` in the header."""
    meta = json.dumps({**record, "format": fmt}, sort_keys=True)
    return save_safetensors(
        {k: v.detach().to("cpu").contiguous() for k, v in tensors.items()}, metadata={META_KEY: meta}
    )


def decode_tensors(data: bytes, fmt: str) -> tuple[dict[str, torch.Tensor], dict[str, object]]:
    """Tensors and JSON record of a blob written by `encode_tensors` with the same `fmt`."""
    record = _record(data)
    if record.get("format") != fmt:
        raise ValueError(f"expected a {fmt!r} blob, found format {record.get('format')!r}")
    try:
        tensors = load_safetensors(data)
    except SafetensorError as error:
        raise ValueError(f"malformed {fmt} blob: {error}") from error
    return tensors, record


def _record(data: bytes) -> dict[str, object]:
    if len(data) < 8:
        raise ValueError("blob is shorter than a safetensors header")
    size = int.from_bytes(data[:8], "little")
    if size > len(data) - 8:
        raise ValueError("safetensors header runs past the end of the blob")
    try:
        header = json.loads(data[8 : 8 + size])
        metadata = header.get("__metadata__") if isinstance(header, dict) else None
        record = (
            json.loads(metadata[META_KEY]) if isinstance(metadata, dict) and META_KEY in metadata else None
        )
    except (json.JSONDecodeError, UnicodeDecodeError) as error:
        raise ValueError(f"safetensors header is not valid JSON: {error}") from error
    if not isinstance(record, dict):
        raise ValueError(f"blob carries no '{META_KEY}' record in its safetensors header")
    return record
