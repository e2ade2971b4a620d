"""Moving encoded pseudo-gradients between benchmark workers as raw bytes.

A payload (the codec's 1-D tensors) is laid end to end in sorted key order as one uint8 tensor
and all-gathered over gloo; each worker cuts every peer's bytes back into tensors with the
codec's own layout. The bytes exchanged are exactly `wire_bytes(payload)`.
"""

from __future__ import annotations

import math
from collections.abc import Mapping

import torch
import torch.distributed as dist

from distrai.codec import Codec, payload_key


def payload_to_bytes(payload: Mapping[str, torch.Tensor]) -> torch.Tensor:
    """The payload's tensors as one flat uint8 tensor, in sorted key order."""
    return torch.cat([payload[key].contiguous().view(torch.uint8).reshape(-1) for key in sorted(payload)])


def bytes_to_payload(
    flat: torch.Tensor, codec: Codec, shapes: Mapping[str, tuple[int, ...]]
) -> dict[str, torch.Tensor]:
    """Cut bytes written by `payload_to_bytes` back into the codec's payload tensors."""
    specs = {
        payload_key(name, field): spec
        for name, shape in shapes.items()
        for field, spec in codec.layout(math.prod(shape)).items()
    }
    payload = {}
    offset = 0
    for key in sorted(specs):
        size = specs[key].nbytes
        payload[key] = flat[offset : offset + size].clone().view(specs[key].dtype)
        offset += size
    if offset != flat.numel():
        raise ValueError(f"received {flat.numel()} bytes, the codec's layout needs {offset}")
    return payload


def all_gather_payloads(
    payload: Mapping[str, torch.Tensor], codec: Codec, shapes: Mapping[str, tuple[int, ...]]
) -> list[dict[str, torch.Tensor]]:
    """Every worker's payload, in rank order."""
    flat = payload_to_bytes(payload)
    gathered = [torch.empty_like(flat) for _ in range(dist.get_world_size())]
    dist.all_gather(gathered, flat)
    return [bytes_to_payload(peer, codec, shapes) for peer in gathered]
