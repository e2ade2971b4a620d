"""Scores, moving averages and weights: pure functions of the validator's numbers."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from validators.scoring import ema_update, reference_drop, usefulness_score, weights_from_averages


def test_usefulness_rewards_own_data_and_penalizes_training_elsewhere():
    assert usefulness_score(0.05, 0.04, scale=0.1) == pytest.approx(0.5)
    assert usefulness_score(0.5, 0.1, scale=0.1) == 1.0
    assert usefulness_score(0.02, 0.08, scale=0.1) == pytest.approx(0.2 * 0.25)
    assert usefulness_score(0.0, 0.0, scale=0.1) == 0.0
    assert usefulness_score(-0.1, 0.2, scale=0.1) == 0.0
    assert usefulness_score(float("nan"), 0.0, scale=0.1) == 0.0


def test_the_reference_drop_is_the_median_of_the_positive_drops():
    assert reference_drop([0.1, 0.3, 0.2]) == pytest.approx(0.2)
    assert reference_drop([0.1, 0.4, 0.2, 0.3]) == pytest.approx(0.25)
    assert reference_drop([0.2, -0.5, 0.0, float("nan"), 0.4]) == pytest.approx(0.3)
    assert reference_drop([-0.1, 0.0]) == 0.0
    assert reference_drop([]) == 0.0


def test_a_score_is_proportional_to_the_work_against_the_reference():
    reference = reference_drop([0.18, 0.2, 0.22, 0.2e-4])
    assert usefulness_score(0.2, 0.19, reference) == 1.0
    assert usefulness_score(0.18, 0.17, reference) == pytest.approx(0.18 / reference)
    assert usefulness_score(0.2e-4, 0.2e-4, reference) == pytest.approx(1e-4, rel=0.2)
    assert usefulness_score(0.2, 0.1, scale=0.0) == 0.0


def test_ema_moves_toward_scores():
    assert ema_update([0.0, 1.0], [1.0, 0.0], 0.25) == pytest.approx([0.25, 0.75])
    with pytest.raises(ValueError):
        ema_update([0.0], [1.0, 0.0], 0.5)


@given(
    st.lists(st.floats(min_value=0, max_value=10), min_size=1, max_size=12),
    st.floats(min_value=0, max_value=0.99),
    st.booleans(),
)
@settings(max_examples=200, deadline=None)
def test_weights_sum_to_one_with_the_burn_on_the_owner(averages, burn, has_owner):
    owner = 0 if has_owner else None
    weights = weights_from_averages(averages, burn_share=burn, owner_uid=owner)
    assert all(w >= 0 for w in weights)
    total = sum(weights)
    if has_owner or sum(averages) > 0:
        assert total == pytest.approx(1.0)
    else:
        assert total == 0.0
    if has_owner and sum(averages) > 0:
        assert weights[0] >= burn - 1e-12


def test_an_average_decayed_to_a_subnormal_still_gets_the_payable_share():
    weights = weights_from_averages([5e-324, 0.0], burn_share=0.5, owner_uid=1)
    assert weights == [0.5, 0.5]


def test_excluded_uids_get_no_weight():
    weights = weights_from_averages([0.5, 0.5, 1.0], burn_share=0.0, owner_uid=None, exclude=[2])
    assert weights == pytest.approx([0.5, 0.5, 0.0])
