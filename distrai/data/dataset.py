"""Training data from prepared shards: the sequences a node asks for, read from the few shards that
hold them.

A sequence of T tokens never crosses a shard: training shard u holds Q = shard_tokens // T
sequences at token offsets 0, T, …, (Q − 1)·T, and training sequence i is sequence i mod Q of shard
i div Q. Only shards that hold Q whole sequences count (a shorter last shard is left out), so every
unit of the assignment (`distrai.train.assignment`, `unit = Q`) is one shard.
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import cached_property

import numpy as np
import torch

from distrai.data.cache import ShardCache
from distrai.data.manifest import DataManifest, DataManifestError


class PreparedData:
    def __init__(self, manifest: DataManifest, cache: ShardCache, seq_len: int):
        per_shard = manifest.shard_tokens // seq_len
        if per_shard < 1:
            raise DataManifestError(
                f"seq_len {seq_len} is longer than the data's shards of {manifest.shard_tokens} tokens"
            )
        units = sum(1 for shard in manifest.train if shard.tokens // seq_len == per_shard)
        if units == 0:
            raise DataManifestError(
                f"the data has no training shard of {per_shard} whole sequences of {seq_len}"
            )
        self.manifest = manifest
        self.cache = cache
        self.seq_len = seq_len
        self.unit = per_shard
        self.units = units

    @property
    def n_train(self) -> int:
        return self.units * self.unit

    @property
    def waited_s(self) -> float:
        """Seconds spent waiting for shards out of reach (`ShardCache.waited_s`)."""
        return self.cache.waited_s

    def shards_of(self, indices: Sequence[int]) -> list[int]:
        """The training shards that hold `indices`, in order of first use."""
        return list(dict.fromkeys(i // self.unit for i in indices))

    def give_up_at(self, deadline: float | None) -> None:
        self.cache.give_up_at = deadline

    def batch(self, indices: Sequence[int]) -> torch.Tensor:
        """The training sequences at `indices` (as returned by `assignment.batch_indices`), int64 [len, T]."""
        bad = [i for i in indices if not 0 <= i < self.n_train]
        if bad:
            raise IndexError(f"training sequence indices {bad[:5]} outside [0, {self.n_train})")
        rows = np.empty((len(indices), self.seq_len), dtype=np.int64)
        t = self.seq_len
        for row, index in enumerate(indices):
            unit, offset = divmod(index, self.unit)
            tokens = self.cache.tokens(self.manifest.train[unit], f"train shard {unit}")
            rows[row] = tokens[offset * t : (offset + 1) * t]
        return torch.from_numpy(rows)

    @cached_property
    def heldout(self) -> torch.Tensor:
        """Every held-out sequence, int64 [M, T] (at most the prepared held-out cap of tokens)."""
        t = self.seq_len
        rows = []
        for number, shard in enumerate(self.manifest.heldout):
            tokens = self.cache.tokens(shard, f"held-out shard {number}")
            whole = (shard.tokens // t) * t
            rows.append(np.asarray(tokens[:whole], dtype=np.int64).reshape(-1, t))
        sequences = np.concatenate(rows)
        if len(sequences) == 0:
            raise DataManifestError(f"the held-out split holds no whole sequence of {t} tokens")
        return torch.from_numpy(sequences)
