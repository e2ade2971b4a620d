"""Canonical SHA-256 of named tensors: the same tensors give the same hex digest on any machine.

The byte stream hashed is: a domain tag line, then for each section in sorted order and each
name in sorted order, one JSON line `[section, name, dtype, shape]` followed by the tensor's raw
little-endian bytes in C order (its length follows from dtype and shape, so the stream parses
one way only). Device, strides and dict insertion order do not matter; dtype, shape, every bit
of every value, and every name do.
"""

from __future__ import annotations

import hashlib
import json
import sys
from collections.abc import Mapping

import torch

if sys.byteorder != "little":
    raise ImportError("distrai's canonical tensor hashing assumes a little-endian machine")


def tensor_bytes(tensor: torch.Tensor) -> memoryview:
    """The raw bytes of a tensor in C order, copied to the CPU when needed."""
    flat = tensor.detach().to("cpu").contiguous().reshape(-1)
    return memoryview(flat.view(torch.uint8).numpy())


def hash_sections(tag: str, sections: Mapping[str, Mapping[str, torch.Tensor]]) -> str:
    """Hex SHA-256 of named tensors grouped in sections, under domain tag `tag`."""
    digest = hashlib.sha256()
    digest.update(json.dumps(["distrai", tag]).encode() + b"\n")
    for section in sorted(sections):
        tensors = sections[section]
        for name in sorted(tensors):
            tensor = tensors[name]
            header = [section, name, str(tensor.dtype).removeprefix("torch."), list(tensor.shape)]
            digest.update(json.dumps(header).encode() + b"\n")
            digest.update(tensor_bytes(tensor))
    return digest.hexdigest()


def hash_tensors(tag: str, tensors: Mapping[str, torch.Tensor]) -> str:
    """Hex SHA-256 of one set of named tensors (for example a model's parameters)."""
    return hash_sections(tag, {"tensors": tensors})
