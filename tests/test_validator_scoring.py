"""Scores, moving averages and weights: pure functions of the validator's numbers."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from distrai.run import ScoreWeights
from validators.scoring import ema_update, usefulness_score, weights_from_averages, window_score

W = ScoreWeights(present=0.1, checks=0.1, replay=0.3, usefulness=0.5, distill=0.0)


def test_usefulness_rewards_own_data_and_penalizes_training_elsewhere():
    assert usefulness_score(0.05, 0.04, scale=0.1) == pytest.approx(0.5)
    assert usefulness_score(0.5, 0.1, scale=0.1) == 1.0
    assert usefulness_score(0.02, 0.08, scale=0.1) == pytest.approx(0.2 * 0.25)
    assert usefulness_score(0.0, 0.0, scale=0.1) == 0.0
    assert usefulness_score(-0.1, 0.2, scale=0.1) == 0.0
    assert usefulness_score(float("nan"), 0.0, scale=0.1) == 0.0


def test_window_score_weighs_components_and_zeroes_failures():
    full = {"present": 1.0, "checks": 1.0, "replay": 1.0, "usefulness": 1.0}
    assert window_score(full, W, passed=True) == pytest.approx(1.0)
    assert window_score({**full, "usefulness": 0.0}, W, passed=True) == pytest.approx(0.5)
    unchallenged = {"present": 1.0, "checks": 1.0, "usefulness": 0.5}
    assert window_score(unchallenged, W, passed=True) == pytest.approx((0.1 + 0.1 + 0.25) / 0.7)
    assert window_score(full, W, passed=False) == 0.0
    with pytest.raises(ValueError, match="usefulness"):
        window_score({**full, "usefulness": 1.5}, W, passed=True)
    with pytest.raises(ValueError, match="speed"):
        window_score({"speed": 1.0}, W, passed=True)


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


def test_excluded_uids_get_no_weight():
    weights = weights_from_averages([0.5, 0.5, 1.0], burn_share=0.0, owner_uid=None, exclude=[2])
    assert weights == pytest.approx([0.5, 0.5, 0.0])
