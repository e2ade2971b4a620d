"""A small linear sketch of a model's parameters: `size` numbers S·θ for a fixed random S.

S is a count sketch: every parameter coordinate goes to one of `size` buckets with a random sign,
both taken from a 32-bit integer hash of (seed, parameter name, coordinate index) computed with
exact integer tensor arithmetic, so every machine builds the same S without storing it. Because
S is linear, sketch(θ_a) − sketch(θ_b) = sketch(θ_a − θ_b): a validator can relate committed
boundary sketches to a published pseudo-gradient without the full states, and
E‖S·x‖² = ‖x‖². Sums run in float64 on the CPU with `torch.bincount`, a sequential loop, so the
numbers do not depend on the thread count; compare sketches with a tolerance all the same (the
hash is the exact commitment, the sketch the cheap approximate one).

`sketch_entries` takes the same sketch of a codec's decoded update from its payload's entries
(`distrai.codec.Entries`), without the dense tensors, and gives the same bits: each range of CHUNK
coordinates is one `bincount` either way, over the same nonzero entries in ascending order, and an
entry that decodes to zero adds nothing to its bucket (x + ±0 = x, and a bucket starts at +0).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping

import torch

from distrai.codec import Entries

MASK32 = 0xFFFFFFFF
MIX = 0x45D9F3B
CHUNK = 1 << 22


def _name_key(seed: str, name: str) -> int:
    return int.from_bytes(
        hashlib.sha256(json.dumps(["distrai.sketch", seed, name]).encode()).digest()[:4], "little"
    )


def _mix32(values: torch.Tensor) -> torch.Tensor:
    """A 32-bit integer hash, evaluated in int64 so no product overflows."""
    values = ((values >> 16) ^ values) * MIX & MASK32
    values = ((values >> 16) ^ values) * MIX & MASK32
    return (values >> 16) ^ values


def sketch(params: Mapping[str, torch.Tensor], seed: str, size: int = 64) -> torch.Tensor:
    """float64 [size] count sketch of the named tensors under `seed`."""
    return sketch_entries({name: TensorEntries(tensor) for name, tensor in params.items()}, seed, size)


def sketch_entries(params: Mapping[str, Entries], seed: str, size: int = 64) -> torch.Tensor:
    """float64 [size] count sketch, under `seed`, of the named tensors the entries decode to."""
    if not 1 <= size <= 1 << 16:
        raise ValueError(f"sketch size must be in [1, 65536], got {size}")
    total = torch.zeros(size, dtype=torch.float64)
    for name in sorted(params):
        entries, key = params[name], _name_key(seed, name)
        for start in range(0, entries.numel, CHUNK):
            index, values = entries.between(start, min(start + CHUNK, entries.numel))
            hashed = _mix32((index + key) & MASK32)
            signs = (hashed >> 31).to(torch.float64) * 2 - 1
            buckets = (hashed & 0xFFFF) % size
            total += torch.bincount(buckets, weights=values.to(torch.float64) * signs, minlength=size)
    return total


class TensorEntries(Entries):
    """A dense tensor's entries, brought to the CPU a range at a time: a range's nonzeros alone when
    they are fewer than half of it (a sparse update: zeros add nothing to any bucket), else every
    entry of the range."""

    def __init__(self, tensor: torch.Tensor):
        self.flat = tensor.detach().reshape(-1)
        self.numel = self.flat.numel()

    def between(self, start: int, stop: int) -> tuple[torch.Tensor, torch.Tensor]:
        chunk = self.flat[start:stop].to("cpu")
        where = (chunk != 0).nonzero().squeeze(1)
        if where.numel() * 2 < chunk.numel():
            return where + start, chunk[where]
        return torch.arange(start, stop, dtype=torch.int64), chunk

    def dense(self) -> torch.Tensor:
        return self.flat
