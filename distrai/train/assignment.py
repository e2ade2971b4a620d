"""Which training sequences a miner trains on: a pure function anyone can recompute.

Scheme. Each window has a pseudo-random permutation π of the training sequence indices
[0, n), keyed by SHA-256 of (run id, window). The window's miners are put in slot order by
SHA-256 of (run id, window, hotkey), so slots rotate every window and nobody can pick one.
π's positions are cut into `len(miners) + 1` equal shards of `shard_size = n // (len(miners) + 1)`:
slot s owns positions [s·shard_size, (s+1)·shard_size). The last shard and the remainder
are the window's reserve, which nobody trains on. At inner step t a miner's batch is the
sequences at its shard's positions t·B … t·B + B − 1, wrapping around inside its own shard
once t·B passes `shard_size`.

Guarantees. (1) Pure: the answer depends only on the arguments, never on global RNG state,
process, machine or library version (the permutation is a Feistel network over SHA-256 written
here, with cycle walking to stay inside [0, n)). (2) Disjoint: in one window, two different
hotkeys of the same miner list never share a sequence, whatever their steps. (3) The reserve is
disjoint from every miner's shard, so `unassigned_indices` returns data that no miner trained
on in that window. (4) Indices run over the training split only, so held-out data (a separate
tensor in `TokenData`) is never assigned. Every caller must use the same miner list for the
window (the validator takes it from the metagraph at the window's first block); the order of
that list does not matter, and duplicate hotkeys are refused.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence

FEISTEL_ROUNDS = 6


def _digest(*parts: object) -> bytes:
    return hashlib.sha256(json.dumps(["distrai.assignment", *parts]).encode()).digest()


def permute(position: int, n: int, key: bytes) -> int:
    """π_key(position): a keyed pseudo-random permutation of [0, n)."""
    if not 0 <= position < n:
        raise ValueError(f"position {position} outside [0, {n})")
    half_bits = max(1, ((n - 1).bit_length() + 1) // 2)
    mask = (1 << half_bits) - 1
    value = position
    while True:
        left, right = value >> half_bits, value & mask
        for round_index in range(FEISTEL_ROUNDS):
            block = key + bytes([round_index]) + right.to_bytes(8, "little")
            mixed = int.from_bytes(hashlib.sha256(block).digest()[:8], "little") & mask
            left, right = right, left ^ mixed
        value = (left << half_bits) | right
        if value < n:
            return value


def window_key(run_id: str, window: int) -> bytes:
    """The permutation key of one window."""
    return _digest("permutation", run_id, window)


def miner_slot(run_id: str, window: int, hotkey: str, miners: Sequence[str]) -> int:
    """`hotkey`'s shard slot among the window's `miners`."""
    if len(set(miners)) != len(miners):
        raise ValueError("the window's miner list has duplicate hotkeys")
    if hotkey not in miners:
        raise ValueError(f"hotkey {hotkey!r} is not among the window's {len(miners)} miners")
    order = sorted(miners, key=lambda other: _digest("slot", run_id, window, other))
    return order.index(hotkey)


def shard_size(n_sequences: int, n_miners: int) -> int:
    """Sequences per miner per window: one equal shard each, plus one reserve shard."""
    if n_miners < 1:
        raise ValueError("a window needs at least one miner")
    return n_sequences // (n_miners + 1)


def batch_indices(
    run_id: str, window: int, hotkey: str, step: int, batch_size: int, n_sequences: int, miners: Sequence[str]
) -> list[int]:
    """Training-sequence indices of `hotkey`'s batch at inner `step` of `window`."""
    if step < 0:
        raise ValueError(f"step must be non-negative, got {step}")
    if batch_size < 1:
        raise ValueError(f"batch_size must be at least 1, got {batch_size}")
    slot = miner_slot(run_id, window, hotkey, miners)
    size = shard_size(n_sequences, len(miners))
    if size < batch_size:
        raise ValueError(
            f"{n_sequences} training sequences give {len(miners)} miners shards of {size}, "
            f"smaller than a batch of {batch_size}"
        )
    key = window_key(run_id, window)
    first = step * batch_size
    return [permute(slot * size + (first + j) % size, n_sequences, key) for j in range(batch_size)]


def assigned_indices(
    run_id: str,
    window: int,
    hotkey: str,
    steps: int,
    batch_size: int,
    n_sequences: int,
    miners: Sequence[str],
) -> list[int]:
    """All of `hotkey`'s batch indices for inner steps 0 … steps − 1, step after step."""
    return [
        index
        for step in range(steps)
        for index in batch_indices(run_id, window, hotkey, step, batch_size, n_sequences, miners)
    ]


def unassigned_indices(
    run_id: str, window: int, count: int, n_sequences: int, miners: Sequence[str], salt: str = ""
) -> list[int]:
    """`count` distinct training-sequence indices from the window's reserve, which no miner of
    `miners` was assigned; `salt` (for example a challenge seed) picks where in the reserve."""
    size = shard_size(n_sequences, len(miners))
    reserve_start = len(miners) * size
    reserve = n_sequences - reserve_start
    if not 0 < count <= reserve:
        raise ValueError(f"count must be in [1, {reserve}] (the reserve of this window), got {count}")
    offset = int.from_bytes(_digest("reserve", run_id, window, salt)[:8], "little") % reserve
    key = window_key(run_id, window)
    return [permute(reserve_start + (offset + j) % reserve, n_sequences, key) for j in range(count)]
