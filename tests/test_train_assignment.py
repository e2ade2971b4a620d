"""Batch assignment: a pure function, disjoint between miners of a window, never touching the
reserve or the held-out split."""

from __future__ import annotations

import random

import numpy as np
import pytest
import torch
from hypothesis import assume, given, settings
from hypothesis import strategies as st
from support.tiny_models import tiny_data

from distrai.train.assignment import (
    MIX_UNITS,
    assigned_indices,
    batch_indices,
    miner_slot,
    permute,
    share_size,
    trained_sample,
    unassigned_indices,
)

hotkeys = st.lists(
    st.text(alphabet="abcdefgh0123456789", min_size=1, max_size=8), min_size=1, max_size=6, unique=True
)


@settings(max_examples=40, deadline=None)
@given(n=st.integers(1, 300), key=st.binary(min_size=1, max_size=16))
def test_permute_is_a_permutation(n, key):
    assert sorted(permute(i, n, key) for i in range(n)) == list(range(n))


@settings(max_examples=30, deadline=None)
@given(miners=hotkeys, window=st.integers(0, 10**6), step=st.integers(0, 500), run=st.text(max_size=10))
def test_batch_indices_are_pure(miners, window, step, run):
    hotkey = miners[-1]
    first = batch_indices(run, window, hotkey, step, 4, 1000, miners)
    random.seed(step)
    np.random.seed(step)
    torch.manual_seed(step)
    assert batch_indices(run, window, hotkey, step, 4, 1000, list(reversed(miners))) == first
    assert all(0 <= i < 1000 for i in first)


@settings(max_examples=30, deadline=None)
@given(
    miners=hotkeys,
    window=st.integers(0, 10**6),
    n=st.integers(60, 2000),
    batch=st.integers(1, 8),
    steps=st.integers(1, 12),
)
def test_miners_of_a_window_get_disjoint_data_and_the_reserve_is_untouched(miners, window, n, batch, steps):
    assume(share_size(n, len(miners)) >= batch)
    seen: dict[int, str] = {}
    for hotkey in miners:
        for index in assigned_indices("run", window, hotkey, steps, batch, n, miners):
            assert seen.setdefault(index, hotkey) == hotkey
    reserve = n - len(miners) * share_size(n, len(miners))
    spare = unassigned_indices("run", window, reserve, n, miners, salt="challenge")
    assert len(set(spare)) == reserve
    assert not set(spare) & set(seen)


@settings(max_examples=20, deadline=None)
@given(miners=hotkeys, window=st.integers(0, 1000))
def test_a_miner_cycles_through_exactly_its_shard(miners, window):
    n = 300
    size = share_size(n, len(miners))
    hotkey = miners[0]
    first_pass = assigned_indices("run", window, hotkey, size, 1, n, miners)
    assert len(set(first_pass)) == size
    assert batch_indices("run", window, hotkey, size, 1, n, miners) == first_pass[:1]


@settings(max_examples=30, deadline=None)
@given(
    miners=hotkeys,
    window=st.integers(0, 10**6),
    units=st.integers(4, 60),
    unit=st.integers(2, 9),
    batch=st.integers(1, 8),
    steps=st.integers(1, 12),
)
def test_with_units_miners_get_whole_disjoint_units_and_the_reserve_is_untouched(
    miners, window, units, unit, batch, steps
):
    n = units * unit
    assume(share_size(n, len(miners), unit) >= batch)
    owner: dict[int, str] = {}
    for hotkey in miners:
        for index in assigned_indices("run", window, hotkey, steps, batch, n, miners, unit):
            assert 0 <= index < n
            assert owner.setdefault(index // unit, hotkey) == hotkey
    reserve = n - len(miners) * share_size(n, len(miners), unit)
    spare = unassigned_indices("run", window, reserve, n, miners, salt="s", unit=unit)
    assert len(set(spare)) == reserve
    assert not {i // unit for i in spare} & set(owner)


@settings(max_examples=20, deadline=None)
@given(miners=hotkeys, window=st.integers(0, 1000), unit=st.integers(2, 6))
def test_with_units_a_miner_cycles_through_exactly_its_share(miners, window, unit):
    n = 60 * unit
    size = share_size(n, len(miners), unit)
    first_pass = assigned_indices("run", window, miners[0], size, 1, n, miners, unit)
    assert len(set(first_pass)) == size
    assert len({i // unit for i in first_pass}) == size // unit
    assert batch_indices("run", window, miners[0], size, 1, n, miners, unit) == first_pass[:1]


def test_with_units_batches_mix_units_and_runs_of_steps_stay_in_few():
    miners, unit, batch = ["a", "b", "c"], 32, 8
    n = 400 * unit
    steps = [batch_indices("run", 3, "b", t, batch, n, miners, unit) for t in range(20)]
    assert all(len({i // unit for i in indices}) > 1 for indices in steps)
    assert len({i // unit for indices in steps for i in indices}) <= MIX_UNITS * 2


def test_the_scored_sample_is_drawn_by_the_seed_from_the_steps_asked():
    miners, n, batch = ["a", "b", "c"], 400 * 32, 8
    trained = assigned_indices("run", 1, "a", 40, batch, n, miners, 32)
    step_of = {index: position // batch for position, index in enumerate(trained)}
    sample = trained_sample("run", 1, b"\x01" * 32, "a", 64, range(40), batch, n, miners, 32)
    assert len(sample) == len(set(sample)) == 64 and set(sample) <= set(trained)
    steps = sorted(step_of[i] for i in sample)
    assert steps[0] < 10 and steps[-1] >= 30  # from the whole run, not its first steps
    assert sample == trained_sample("run", 1, b"\x01" * 32, "a", 64, range(40), batch, n, miners, 32)
    assert sample != trained_sample("run", 1, b"\x02" * 32, "a", 64, range(40), batch, n, miners, 32)
    last = trained_sample("run", 1, b"\x01" * 32, "a", 16, range(30, 40), batch, n, miners, 32)
    assert len(last) == 16 and {step_of[i] for i in last} <= set(range(30, 40))  # the last segment alone
    # steps that hold fewer sequences than asked give all of them
    assert sorted(trained_sample("run", 1, b"\x01" * 32, "a", 16, range(1), batch, n, miners, 32)) == sorted(
        trained[:batch]
    )
    with pytest.raises(ValueError, match="non-empty range"):
        trained_sample("run", 1, b"\x01" * 32, "a", 16, range(5, 5), batch, n, miners, 32)


def reference_trained_sample(run_id, window, seed, hotkey, count, steps, batch_size, n, miners, unit=1):
    """`trained_sample` as it first read: each draw's whole batch, then its drawn position."""
    from distrai.train.assignment import _digest

    picked: list[int] = []
    for draw in range(4 * count):
        digest = _digest("scored", run_id, window, seed.hex(), hotkey, draw)
        step = steps[int.from_bytes(digest[:8], "little") % len(steps)]
        position = int.from_bytes(digest[8:16], "little") % batch_size
        index = batch_indices(run_id, window, hotkey, step, batch_size, n, miners, unit)[position]
        if index not in picked:
            picked.append(index)
            if len(picked) == count:
                break
    return picked


@settings(max_examples=40, deadline=None)
@given(
    miners=hotkeys,
    window=st.integers(0, 10**6),
    seed=st.binary(min_size=1, max_size=32),
    count=st.integers(1, 80),
    first=st.integers(0, 50),
    length=st.integers(1, 20),
    batch=st.integers(1, 9),
    unit=st.sampled_from([1, 4, 32]),
)
def test_the_scored_sample_reads_each_drawn_sequence_as_its_batch_holds_it(
    miners, window, seed, count, first, length, batch, unit
):
    """Each draw reads one sequence of its step's batch, not the whole batch: the same sample, in
    the same order, as drawing from `batch_indices`."""
    n = (len(miners) + 1) * batch * unit * 3 + unit
    hotkey, steps = miners[0], range(first, first + length)
    got = trained_sample("run", window, seed, hotkey, count, steps, batch, n, miners, unit)
    assert got == reference_trained_sample("run", window, seed, hotkey, count, steps, batch, n, miners, unit)


def test_the_scored_sample_refuses_what_batch_indices_refuses():
    miners = ["a", "b", "c"]
    with pytest.raises(ValueError, match="smaller than a batch of 8"):
        trained_sample("run", 1, b"\x01", "a", 4, range(3), 8, 20, miners)
    with pytest.raises(ValueError, match="batch_size must be at least 1"):
        trained_sample("run", 1, b"\x01", "a", 4, range(3), 0, 400, miners)
    with pytest.raises(ValueError, match="not among the window's 3 miners"):
        trained_sample("run", 1, b"\x01", "z", 4, range(3), 8, 400, miners)
    with pytest.raises(ValueError, match="step must be non-negative"):
        trained_sample("run", 1, b"\x01", "a", 4, range(2, -3, -1), 8, 400, miners)


def test_slots_rotate_between_windows():
    miners = [f"miner{i}" for i in range(8)]
    slots = {miner_slot("run", window, "miner0", miners) for window in range(40)}
    assert len(slots) > 1
    assert sorted(miner_slot("run", 5, m, miners) for m in miners) == list(range(8))


def test_batches_change_with_window_step_and_run():
    miners = ["a", "b"]
    base = batch_indices("run", 0, "a", 0, 8, 10_000, miners)
    assert batch_indices("run", 1, "a", 0, 8, 10_000, miners) != base
    assert batch_indices("run", 0, "a", 1, 8, 10_000, miners) != base
    assert batch_indices("other", 0, "a", 0, 8, 10_000, miners) != base


def test_heldout_split_is_never_assigned():
    data = tiny_data(seq_len=32, documents=120, heldout_fraction=0.1)
    miners = ["a", "b", "c"]
    assigned = [i for m in miners for i in assigned_indices("run", 2, m, 10, 4, data.n_train, miners)]
    heldout_rows = {tuple(row.tolist()) for row in data.heldout}
    assigned_rows = {tuple(row.tolist()) for row in data.batch(assigned)}
    assert all(0 <= i < data.n_train for i in assigned)
    assert not heldout_rows & assigned_rows


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (lambda: batch_indices("r", 0, "z", 0, 2, 100, ["a", "b"]), "not among the window's 2 miners"),
        (lambda: batch_indices("r", 0, "a", 0, 2, 100, ["a", "a"]), "duplicate hotkeys"),
        (lambda: batch_indices("r", 0, "a", 0, 40, 100, ["a", "b"]), "smaller than a batch of 40"),
        (lambda: batch_indices("r", 0, "a", -1, 2, 100, ["a"]), "step must be non-negative"),
        (lambda: unassigned_indices("r", 0, 60, 100, ["a"]), r"count must be in \[1, 50\]"),
        (lambda: permute(5, 5, b"k"), "outside"),
        (lambda: batch_indices("r", 0, "a", 0, 2, 100, ["a"], unit=3), "not a whole number of units of 3"),
    ],
)
def test_bad_requests_are_refused(call, message):
    with pytest.raises(ValueError, match=message):
        call()
