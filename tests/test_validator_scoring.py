"""Scores, moving averages and weights: pure functions of the validator's numbers."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from validators.scoring import tokens_trained, weights_from_averages


def test_pay_units_are_the_tokens_a_manifest_commits_to():
    assert tokens_trained(1840, 32, 2048) == 1840 * 65536


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
