"""The held-out re-measurement: the sample is a public function of a seed nobody knows before the
aggregate deadline, and an aggregate is refused when its result raises the loss over its base by
more than the tolerance (or gives a loss that is not a number)."""

from __future__ import annotations

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from distrai.protocol.globalmodel import SyncError
from distrai.protocol.remeasure import check_not_worse, heldout_sample, loss_rise, sample_seed

HASH = "0x" + "1f" * 32
RUN = "ab" * 32


def test_the_sample_seed_depends_on_the_block_hash_the_run_and_the_window():
    seed = sample_seed(HASH, RUN, 7)
    assert len(seed) == 32 and seed == sample_seed(HASH.upper().replace("0X", "0x"), RUN, 7)
    assert seed != sample_seed("0x" + "2f" * 32, RUN, 7)
    assert seed != sample_seed(HASH, "cd" * 32, 7)
    assert seed != sample_seed(HASH, RUN, 8)


@given(population=st.integers(1, 500), count=st.integers(1, 600), window=st.integers(0, 10**6))
@settings(deadline=None)
def test_a_sample_is_distinct_ascending_and_the_same_everywhere(population, count, window):
    seed = sample_seed(HASH, RUN, window)
    drawn = heldout_sample(seed, population, count)
    assert drawn == sorted(set(drawn)) and len(drawn) == min(count, population)
    assert all(0 <= i < population for i in drawn)
    assert drawn == heldout_sample(seed, population, count)


def test_different_windows_draw_different_samples():
    samples = {tuple(heldout_sample(sample_seed(HASH, RUN, w), 1000, 16)) for w in range(20)}
    assert len(samples) == 20


def test_a_sample_of_nothing_is_refused():
    with pytest.raises(ValueError):
        heldout_sample(sample_seed(HASH, RUN, 1), 0, 4)


def test_a_result_within_the_tolerance_is_followed_and_one_beyond_it_refused():
    assert loss_rise(4.0, 4.04) == pytest.approx(0.01)
    check_not_worse(4.0, 3.0, 0.01)
    check_not_worse(4.0, 4.0, 0.0)
    check_not_worse(4.0, 4.03125, 2**-7)  # a rise of exactly the tolerance is followed
    with pytest.raises(
        SyncError, match=r"from 4.0000 to 4.0500 \(\+1.25%\), more than the run's tolerance of 1.00%"
    ):
        check_not_worse(4.0, 4.05, 0.01)
    for after in (math.nan, math.inf):
        with pytest.raises(SyncError, match="is not finite|is nan|is inf"):
            check_not_worse(4.0, after, 0.01)
