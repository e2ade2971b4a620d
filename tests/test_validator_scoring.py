"""Scores, moving averages and weights: pure functions of the validator's numbers."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from validators.scoring import (
    MARK_Z_FULL,
    MARK_Z_NONE,
    break_even_margin,
    ema_update,
    marks_judged,
    quality,
    tokens_trained,
    weights_from_averages,
)


def test_marks_are_judged_once_the_upper_quartile_shows_one():
    assert marks_judged([5.0, 6.0, 4.0, 0.1, -1.0])
    assert not marks_judged([1.0, 1.5, 3.0, 0.0])  # one of four is not a quartile
    assert not marks_judged([])
    assert not marks_judged([float("nan")])
    # copies show no mark, and cannot pull the quartile down while they are fewer than the honest
    assert marks_judged([6.0, 7.0, 8.0, 0.1, -0.5])


def test_quality_is_a_gate_on_the_marks_significance():
    assert quality(-3.0, judged=False) == 1.0  # unjudged: nobody loses its pay to noise
    assert quality(3.0, judged=True) == quality(9.0, judged=True) == 1.0  # no more than full
    assert quality(2.5, judged=True) == pytest.approx(0.5)
    assert quality(MARK_Z_NONE, judged=True) == quality(-1.0, judged=True) == 0.0
    assert quality(float("nan"), judged=True) == 0.0
    assert MARK_Z_NONE < MARK_Z_FULL


def test_pay_units_are_the_tokens_a_manifest_commits_to():
    assert tokens_trained(1840, 32, 2048) == 1840 * 65536


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


def test_faking_loses_for_every_margin_above_the_break_even_whatever_the_share_faked():
    q, alpha, ban = 16 / 256, 0.1, 144
    margin = break_even_margin(q, alpha, ban)
    assert margin == pytest.approx((1 - q / alpha) / (1 + q * ban))

    def cheat_per_window(f: float, mu: float) -> float:
        """A miner faking a share f of its segments, in units of honest emission per window, from
        the renewal cycle itself: caught with probability q·f a window, then barred `ban` windows
        and short of 1/alpha windows of emission while its average rebuilds."""
        caught = q * f
        unbarred = 1 / caught
        earned = unbarred * (1 - (1 - f) * (1 - mu)) - 1 / alpha
        return earned / (unbarred + ban)

    for f in (0.05, 0.25, 0.5, 1.0):
        assert cheat_per_window(f, margin + 0.01) < margin + 0.01
        assert cheat_per_window(f, margin - 0.01) > margin - 0.01
    assert break_even_margin(0.2, 0.1, 10) == 0.0  # the rebuild alone outweighs anything a fake saves
