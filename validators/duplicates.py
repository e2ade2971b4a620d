"""One piece of work, one share: updates that are the same work under several hotkeys.

A miner that trains once and publishes the result under two hotkeys (verbatim, re-labelled,
rescaled or slightly perturbed) would otherwise be paid twice and weigh twice in the aggregate
whenever neither hotkey is challenged. Independent honest miners train from the same base on
disjoint data, so their updates point in related but clearly different directions; copies of
one update point in the same direction whatever their scale.

Each update is reduced to a count sketch (`distrai.train.sketch`, linear, `size` numbers, O(N)
per update) and every pair's cosine is taken on the sketches: O(M² · size) for M miners instead
of O(M² · N) on the full updates. A checked update is sketched from its payload, never decoded
(`CheckedUpdate.sketch`: the same bits as the sketch of the decoded update), the updates spread over
the validator's cores in threads of one intra-op thread each (torch releases the GIL in its
kernels); each sketch is one thread's and sums in a fixed order, so the result does not depend on
the number of threads. Pairs at or above the run's `duplicate_cosine` are joined into
groups, and in each group the work stays with the miner it was trained for, when that can be told:

1. a member whose challenged steps this validator replayed and found trained on its own data
   (`replay` passed) did the work; the others fail `duplicate`, naming it;
2. else the member whose update bears the mark of its own data best (its loss drop on its assigned
   sequences over its drop on unassigned ones, `usefulness.Usefulness.mark`) did the work, if its
   mark stands above every other member's by at least `ATTRIBUTION_Z` standard errors of the
   difference; the others fail `duplicate`, naming it;
3. else nobody can tell who trained it: every member fails `duplicate`.

A failed `duplicate` is not fraud: the score is zero, the hotkey is not barred.

Why that and not the first commitment: nobody can copy an update of the same window (it is
published after the commit deadline), so two hotkeys doing one piece of work means the work was
trained on one miner's assignment, which is public, and put under both. Commit order would let a
miner that trains on another's data and commits first take that miner's share whenever it is not
replayed. Training leaves its mark on the data trained on: the trainer's update lowers the loss on
its own assigned sequences more than on unseen ones, while the same work under another hotkey meets
that hotkey's assigned data as unseen, whatever its scale.

Why nobody, when the marks are too close to tell: early in a run an update's generic gain swamps
what it memorised, and the marks of a piece of work on its trainer's data and on a copier's are
equal give or take their noise. Keeping the higher of two noisy marks paid a miner that trained on
an honest miner's data the honest share whenever its mark came out higher, about one time in two
(seen in a local network, window 1: marks 0.0124 and 0.0121, standard errors 0.005). Paying nobody
costs the copier its whole window of compute for nothing, and the miner it copied one window's pay
at the validators that replayed neither of them; the validator that replays either one settles it.
"""

from __future__ import annotations

import math
import os
from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor

import torch

from distrai.train.determinism import pinned_threads
from distrai.train.sketch import sketch
from distrai.wire.verdicts import PASS, Check, Number
from validators.checks import MinerVerdict

SKETCH_SIZE = 8192
SKETCH_WORKERS = os.cpu_count() or 1
"""Updates sketched at once: one per core."""
ATTRIBUTION_Z = 2.0
"""How many standard errors of the difference the trainer's mark must stand above each other
member's: the bar that a difference of noise alone clears one time in 44."""


def update_sketch(verdict: MinerVerdict, seed: str) -> torch.Tensor:
    """The sketch of the verdict's update: from its checked payload when it keeps one (nothing is
    decoded), else of the update it holds."""
    if verdict.checked is not None:
        return verdict.checked.sketch(seed, SKETCH_SIZE)
    assert verdict.update is not None, "only verdicts that hold an update are sketched"
    return sketch(verdict.update, seed, SKETCH_SIZE)


def cosine(a: torch.Tensor, b: torch.Tensor) -> float:
    norms = float(a.norm()) * float(b.norm())
    return 0.0 if norms == 0.0 else float(a @ b) / norms


def mark_of(verdict: MinerVerdict) -> float:
    """The mark of the miner's own data on the update (`usefulness.Usefulness.mark`), 0 unmeasured."""
    return verdict.numbers.get(Number.MARK, 0.0)


def mark_error(verdict: MinerVerdict) -> float:
    """The standard error of the mark (the mark over its `mark_z`); infinite when not known."""
    mark, z = verdict.numbers.get(Number.MARK), verdict.numbers.get(Number.MARK_Z)
    if mark is None or z is None or z == 0.0 or not math.isfinite(z):
        return math.inf
    return abs(mark / z)


def replayed_own_work(verdict: MinerVerdict) -> bool:
    """Whether this validator replayed challenged steps of the miner and found them trained on its
    own data, the trajectory ending in its update."""
    return verdict.verdicts.get(Check.REPLAY) == PASS


def trainer(group: Sequence[MinerVerdict], commit_blocks: Mapping[str, int]) -> MinerVerdict | None:
    """The member of a duplicate `group` that did the work, or None when it cannot be told."""

    def order(v: MinerVerdict) -> tuple[float, int, str]:
        return (-mark_of(v), commit_blocks[v.hotkey], v.hotkey)

    replayed = [v for v in group if replayed_own_work(v)]
    if replayed:
        return min(replayed, key=order)
    best = min(group, key=order)
    for other in group:
        if other is best:
            continue
        margin = mark_of(best) - mark_of(other)
        if not margin >= ATTRIBUTION_Z * math.hypot(mark_error(best), mark_error(other)):
            return None
    return best


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
    verdicts: Sequence[MinerVerdict],
    commit_blocks: Mapping[str, int],
    threshold: float,
    seed: str,
    workers: int = SKETCH_WORKERS,
) -> None:
    """Fail every passed update that duplicates the work of another miner, trained on that miner's
    data; record each passed update's largest cosine to any other as `max_cosine` (what
    calibrates the threshold). The updates are sketched `workers` at a time."""
    passed = {v.hotkey: v for v in verdicts if v.passed and v.has_update}
    with pinned_threads(1), ThreadPoolExecutor(workers) as pool:
        sketches = dict(zip(passed, pool.map(lambda v: update_sketch(v, seed), passed.values()), strict=True))
    for hk, v in passed.items():
        others = [cosine(sketches[hk], s) for other, s in sketches.items() if other != hk]
        v.numbers[Number.MAX_COSINE] = max(others, default=0.0)
    for group in duplicate_groups(sketches, threshold):
        members = [passed[hk] for hk in group]
        keeper = trainer(members, commit_blocks)
        if keeper is None:
            for v in members:
                other = next(o for o in members if o is not v)
                more = f" and {len(members) - 2} other miners'" if len(members) > 2 else ""
                v.fail(
                    Check.DUPLICATE,
                    f"the same work as {other.hotkey}'s update{more} (cosine ≥ {threshold}), and who "
                    f"trained it cannot be told: none was replayed here and their marks of their own "
                    f"data (this one {mark_of(v):.4f} ± {mark_error(v):.4f}) are within "
                    f"{ATTRIBUTION_Z:g} standard errors: one piece of work, no share",
                    fraud=False,
                )
            continue
        how = "its replay passed" if replayed_own_work(keeper) else "its mark stands out"
        for v in members:
            if v is not keeper:
                similarity = cosine(sketches[v.hotkey], sketches[keeper.hotkey])
                v.fail(
                    Check.DUPLICATE,
                    f"the same work as {keeper.hotkey}'s update, trained on {keeper.hotkey}'s data "
                    f"({how}; cosine {similarity:.4f} ≥ {threshold}): one piece of work earns one share",
                    fraud=False,
                )
