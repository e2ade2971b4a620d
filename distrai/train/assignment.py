"""Which training sequences a miner trains on: a pure function anyone can recompute.

Units. The training sequences [0, n) come in units of `unit` consecutive indices: a unit is one
shard of prepared data (`distrai.data`, where sequence i is at offset i mod unit of shard
i div unit), or one sequence of in-memory data (`unit = 1`). A miner is assigned whole units, so it
and its validators fetch only the shards they use.

Scheme. Each window has a pseudo-random permutation π of the n / unit units, keyed by SHA-256 of
(run id, window). The window's miners are put in slot order by SHA-256 of (run id, window, hotkey),
so slots rotate every window and nobody can pick one. π's positions are cut into
`len(miners) + 1` equal shares of `S = (n / unit) // (len(miners) + 1)` units: slot s owns unit
positions [s·S, (s+1)·S). The last share and the remainder are the window's reserve, which nobody
trains on. A miner's share holds S·unit sequences; at inner step t its batch is the sequences at
share positions t·B … t·B + B − 1, wrapping around inside its own share once t·B passes S·unit.
Share positions run through groups of `MIX_UNITS` units, shuffled within each group by a keyed
permutation, so a batch mixes sequences of several shards while a run of steps (a replayed
segment, a scored sample) stays within a few.

Guarantees. (1) Pure: the answer depends only on the arguments, never on global RNG state,
process, machine or library version (the permutations are a Feistel network over SHA-256 written
here, with cycle walking to stay inside their range). (2) Disjoint: in one window, two different
hotkeys of the same miner list never share a sequence (nor a unit), whatever their steps. (3) The
reserve is disjoint from every miner's share, so `unassigned_indices` returns data that no miner
trained on in that window. (4) Indices run over the training split only, so held-out data (kept
apart by `TokenData` and by prepared data's held-out shards) is never assigned. Every caller must use
the same miner list for the window (the validator takes it from the metagraph at the window's
first block); the order of that list does not matter, and duplicate hotkeys are refused.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence

FEISTEL_ROUNDS = 6
MIX_UNITS = 8
"""Units whose sequences a miner's consecutive batches mix (see the scheme above)."""


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


def share_size(n_sequences: int, n_miners: int, unit: int = 1) -> int:
    """Sequences per miner per window: an equal share of whole units each, plus one reserve share."""
    if n_miners < 1:
        raise ValueError("a window needs at least one miner")
    return _units(n_sequences, unit) // (n_miners + 1) * unit


def _units(n_sequences: int, unit: int) -> int:
    if unit < 1 or n_sequences % unit:
        raise ValueError(f"{n_sequences} sequences are not a whole number of units of {unit}")
    return n_sequences // unit


def _share_sequence(
    run_id: str, window: int, slot: int, position: int, share_units: int, unit: int, n_units: int
) -> int:
    """The sequence at `position` of slot `slot`'s share (0 ≤ position < share_units·unit)."""
    key = window_key(run_id, window)
    if unit == 1:
        return permute(slot * share_units + position, n_units, key)
    group, within = divmod(position, MIX_UNITS * unit)
    group_units = min(MIX_UNITS, share_units - group * MIX_UNITS)
    mixed = permute(within, group_units * unit, _digest("mix", run_id, window, slot, group))
    unit_in_share, offset = divmod(mixed, unit)
    return permute(slot * share_units + group * MIX_UNITS + unit_in_share, n_units, key) * unit + offset


def batch_indices(
    run_id: str,
    window: int,
    hotkey: str,
    step: int,
    batch_size: int,
    n_sequences: int,
    miners: Sequence[str],
    unit: int = 1,
) -> list[int]:
    """Training-sequence indices of `hotkey`'s batch at inner `step` of `window`."""
    share = _Share.of(run_id, window, hotkey, batch_size, n_sequences, miners, unit)
    return [share.sequence(step, j) for j in range(batch_size)]


class _Share:
    """One hotkey's share of a window (its slot among the window's miners, checked once), which
    `batch_indices` and `trained_sample` read sequence by sequence."""

    def __init__(
        self, run_id: str, window: int, slot: int, batch_size: int, share_units: int, unit: int, n_units: int
    ):
        self.run_id, self.window, self.slot, self.batch_size = run_id, window, slot, batch_size
        self.share_units, self.unit, self.n_units = share_units, unit, n_units

    @classmethod
    def of(
        cls,
        run_id: str,
        window: int,
        hotkey: str,
        batch_size: int,
        n_sequences: int,
        miners: Sequence[str],
        unit: int,
    ) -> _Share:
        if batch_size < 1:
            raise ValueError(f"batch_size must be at least 1, got {batch_size}")
        slot = miner_slot(run_id, window, hotkey, miners)
        n_units = _units(n_sequences, unit)
        share_units = n_units // (len(miners) + 1)
        size = share_units * unit
        if size < batch_size:
            raise ValueError(
                f"{n_sequences} training sequences in units of {unit} give {len(miners)} miners shares of "
                f"{size}, smaller than a batch of {batch_size}"
            )
        return cls(run_id, window, slot, batch_size, share_units, unit, n_units)

    def sequence(self, step: int, position: int) -> int:
        """The training sequence at `position` of the batch of inner `step`."""
        if step < 0:
            raise ValueError(f"step must be non-negative, got {step}")
        size = self.share_units * self.unit
        return _share_sequence(
            self.run_id,
            self.window,
            self.slot,
            (step * self.batch_size + position) % size,
            self.share_units,
            self.unit,
            self.n_units,
        )


def assigned_indices(
    run_id: str,
    window: int,
    hotkey: str,
    steps: int,
    batch_size: int,
    n_sequences: int,
    miners: Sequence[str],
    unit: int = 1,
) -> list[int]:
    """All of `hotkey`'s batch indices for inner steps 0 … steps − 1, step after step."""
    return [
        index
        for step in range(steps)
        for index in batch_indices(run_id, window, hotkey, step, batch_size, n_sequences, miners, unit)
    ]


def reserve_size(n_sequences: int, n_miners: int, unit: int = 1) -> int:
    """Sequences in a window's reserve: the last share and the remainder of the units."""
    n_units = _units(n_sequences, unit)
    return (n_units - n_miners * (n_units // (n_miners + 1))) * unit


def unassigned_indices(
    run_id: str,
    window: int,
    count: int,
    n_sequences: int,
    miners: Sequence[str],
    salt: str = "",
    unit: int = 1,
) -> list[int]:
    """`count` distinct training-sequence indices from the window's reserve, which no miner of
    `miners` was assigned; `salt` (for example a challenge seed) picks where in the reserve. They are
    consecutive in the reserve's order, so with units of many sequences they lie in one or two."""
    n_units = _units(n_sequences, unit)
    reserve_start = len(miners) * (n_units // (len(miners) + 1))
    reserve = reserve_size(n_sequences, len(miners), unit)
    if not 0 < count <= reserve:
        raise ValueError(f"count must be in [1, {reserve}] (the reserve of this window), got {count}")
    offset = int.from_bytes(_digest("reserve", run_id, window, salt)[:8], "little") % reserve
    key = window_key(run_id, window)
    picked = []
    for j in range(count):
        unit_position, within = divmod((offset + j) % reserve, unit)
        picked.append(permute(reserve_start + unit_position, n_units, key) * unit + within)
    return picked


def trained_sample(
    run_id: str,
    window: int,
    seed: bytes,
    hotkey: str,
    count: int,
    steps: range,
    batch_size: int,
    n_sequences: int,
    miners: Sequence[str],
    unit: int = 1,
) -> list[int]:
    """`count` distinct sequences of those `hotkey` trained on at `steps` (fewer when those steps
    hold fewer), drawn by `seed` uniformly over the steps and the positions in their batches. A seed
    nobody knew while training (the window's challenge seed) means a miner cannot know which of its
    sequences are scored: to show the mark of training on them, it must have trained them all."""
    if len(steps) < 1 or count < 1 or steps.start < 0:
        raise ValueError(
            f"steps must be a non-empty range from 0 up and count at least 1, got {steps} and {count}"
        )
    share = _Share.of(run_id, window, hotkey, batch_size, n_sequences, miners, unit)
    picked: dict[int, None] = {}
    for draw in range(4 * count):
        digest = _digest("scored", run_id, window, seed.hex(), hotkey, draw)
        step = steps[int.from_bytes(digest[:8], "little") % len(steps)]
        position = int.from_bytes(digest[8:16], "little") % batch_size
        # the one sequence drawn, not its whole batch: a validator draws hundreds per update
        picked.setdefault(share.sequence(step, position))
        if len(picked) == count:
            break
    return list(picked)
