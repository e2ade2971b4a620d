"""One piece of work, one share: updates that are the same work under several hotkeys.

A miner that trains once and publishes the result under two hotkeys (verbatim, re-labelled,
rescaled or slightly perturbed) would otherwise be paid twice and weigh twice in the aggregate
whenever neither hotkey is challenged. Independent honest miners train from the same base on
disjoint data, so their updates point in related but clearly different directions; copies of
one update point in the same direction whatever their scale.

Each update is reduced to a count sketch (`distrai.train.sketch`, linear, `size` numbers, O(N)
per update) and every pair's cosine is taken on the sketches: O(M² · size) for M miners instead
of O(M² · N) on the full updates. Pairs at or above the run's `duplicate_cosine` are joined into
groups; in each group the work stays with the miner it was trained for: the update whose loss drop
on its miner's assigned data exceeds its drop on unassigned data the most (then the earliest
commitment, then the hotkey). Every other member fails the `duplicate` check with the one it
duplicates named. It is not treated as fraud: the score is zero, the hotkey is not barred.

Why that and not the first commitment: nobody can copy an update of the same window (it is
published after the commit deadline), so two hotkeys doing one piece of work means the work was
trained on one miner's assignment, which is public, and put under both. Commit order would let a
miner that trains on another's data and commits first take that miner's share whenever it is not
replayed. Training leaves its mark on the data trained on: the trainer's update lowers the loss on
its own assigned sequences more than on unseen ones, while the same work under another hotkey meets
that hotkey's assigned data as unseen, whatever its scale.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import torch

from distrai.train.sketch import sketch
from distrai.wire.verdicts import Check, Number
from validators.checks import MinerVerdict

SKETCH_SIZE = 8192


def update_sketch(update: Mapping[str, torch.Tensor], seed: str) -> torch.Tensor:
    return sketch(update, seed, SKETCH_SIZE)


def cosine(a: torch.Tensor, b: torch.Tensor) -> float:
    norms = float(a.norm()) * float(b.norm())
    return 0.0 if norms == 0.0 else float(a @ b) / norms


def fit_to_own_data(verdict: MinerVerdict) -> float:
    """The mark of the miner's own data on the update (`usefulness.Usefulness.mark`)."""
    return verdict.numbers.get(Number.MARK, 0.0)


def duplicate_groups(sketches: Mapping[str, torch.Tensor], threshold: float) -> list[list[str]]:
    """Groups (two or more hotkeys, sorted) whose sketches are joined by cosines ≥ `threshold`."""
    keys = sorted(sketches)
    parent = {k: k for k in keys}

    def root(k: str) -> str:
        while parent[k] != k:
            parent[k] = parent[parent[k]]
            k = parent[k]
        return k

    for i, a in enumerate(keys):
        for b in keys[i + 1 :]:
            if cosine(sketches[a], sketches[b]) >= threshold:
                parent[root(b)] = root(a)
    groups: dict[str, list[str]] = {}
    for k in keys:
        groups.setdefault(root(k), []).append(k)
    return [g for g in groups.values() if len(g) > 1]


def flag_duplicates(
    verdicts: Sequence[MinerVerdict], commit_blocks: Mapping[str, int], threshold: float, seed: str
) -> None:
    """Fail every passed update that duplicates the work of another miner, trained on that miner's
    data; record each passed update's largest cosine to any other as `max_cosine` (what
    calibrates the threshold)."""
    passed = {v.hotkey: v for v in verdicts if v.passed and v.update is not None}
    # `passed` holds updates only; the filter says so again for the types.
    sketches = {hk: update_sketch(v.update, seed) for hk, v in passed.items() if v.update is not None}
    for hk, v in passed.items():
        others = [cosine(sketches[hk], s) for other, s in sketches.items() if other != hk]
        v.numbers[Number.MAX_COSINE] = max(others, default=0.0)
    for group in duplicate_groups(sketches, threshold):
        keeper = min(
            group,
            key=lambda hk: (-fit_to_own_data(passed[hk]), commit_blocks[hk], hk),
        )
        for hk in group:
            if hk != keeper:
                similarity = cosine(sketches[hk], sketches[keeper])
                passed[hk].fail(
                    Check.DUPLICATE,
                    f"the same work as {keeper}'s update, trained on {keeper}'s data "
                    f"(cosine {similarity:.4f} ≥ {threshold}): one piece of work earns one share",
                    fraud=False,
                )
