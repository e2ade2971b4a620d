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
import threading
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


class SketchTable:
    """`sketch` under one seed and size with each parameter's buckets and signs hashed once and kept:
    every boundary of a run sketches the same coordinates under the run's seed, so the hashing, most
    of a sketch's time, is done once per parameter instead of at every boundary. The same bits as
    `sketch`: the same buckets and signs, the same entries (a range's nonzeros alone when they are
    fewer than half of it), summed by one `bincount` per range in the same order. Holds 5 bytes per
    coordinate (an int32 bucket, an int8 sign): 1.3 GB at the GPU config's 257M parameters."""

    def __init__(self, seed: str, size: int = 64):
        if not 1 <= size <= 1 << 16:
            raise ValueError(f"sketch size must be in [1, 65536], got {size}")
        self.seed, self.size = seed, size
        self.tables: dict[tuple[str, int], tuple[torch.Tensor, torch.Tensor]] = {}
        self.lock = threading.Lock()

    def __call__(self, params: Mapping[str, torch.Tensor]) -> torch.Tensor:
        """float64 [size] count sketch of the named tensors."""
        total = torch.zeros(self.size, dtype=torch.float64)
        for name in sorted(params):
            flat = params[name].detach().reshape(-1)
            buckets, signs = self._table(name, flat.numel())
            for start in range(0, flat.numel(), CHUNK):
                stop = min(start + CHUNK, flat.numel())
                chunk = flat[start:stop].to("cpu")
                bucket, sign = buckets[start:stop], signs[start:stop]
                where = (chunk != 0).nonzero().squeeze(1)
                if where.numel() * 2 < chunk.numel():
                    chunk, bucket, sign = chunk[where], bucket[where], sign[where]
                weights = chunk.to(torch.float64) * sign.to(torch.float64)
                total += torch.bincount(bucket, weights=weights, minlength=self.size)
        return total

    def _table(self, name: str, numel: int) -> tuple[torch.Tensor, torch.Tensor]:
        with self.lock:
            return self._built(name, numel)

    def _built(self, name: str, numel: int) -> tuple[torch.Tensor, torch.Tensor]:
        if (name, numel) not in self.tables:
            key = _name_key(self.seed, name)
            buckets, signs = [], []
            for start in range(0, numel, CHUNK):
                index = torch.arange(start, min(start + CHUNK, numel), dtype=torch.int64)
                hashed = _mix32((index + key) & MASK32)
                buckets.append(((hashed & 0xFFFF) % self.size).to(torch.int32))
                signs.append(((hashed >> 31) * 2 - 1).to(torch.int8))
            if not buckets:
                buckets, signs = [torch.zeros(0, dtype=torch.int32)], [torch.zeros(0, dtype=torch.int8)]
            self.tables[(name, numel)] = (torch.cat(buckets), torch.cat(signs))
        return self.tables[(name, numel)]
