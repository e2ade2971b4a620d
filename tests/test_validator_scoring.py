"""Scores, moving averages and weights: pure functions of the validator's numbers."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from validators.scoring import (
    MARK_Z,
    MarkReference,
    break_even_margin,
    ema_update,
    mark_reference,
    quality,
    tokens_trained,
    weights_from_averages,
)


def test_the_reference_is_the_median_mark_of_the_miners_that_show_one():
    marks = [(0.10, 5.0), (0.30, 6.0), (0.20, 4.0), (0.001, 0.1), (-0.05, -1.0)]
    assert mark_reference(marks) == MarkReference(pytest.approx(0.2), True)


def test_copies_cannot_drag_the_reference_down():
    honest = [(0.2, 5.0), (0.25, 6.0), (0.3, 7.0)]
    copies = [(0.0, 0.1), (0.01, 0.5), (-0.01, -0.3)]
    assert mark_reference(honest + copies).value == mark_reference(honest).value == pytest.approx(0.25)


def test_marks_are_not_judged_while_few_miners_show_one():
    assert not mark_reference([(0.01, 1.0), (0.02, 1.5), (0.03, 3.0), (0.0, 0.0)]).judged
    assert not mark_reference([]).judged
    assert not mark_reference([(float("nan"), 3.0)]).judged
    # unjudged, every passing update has full quality: nobody loses its pay to noise
    assert quality(-0.5, -3.0, MarkReference(0.0, False), share=0.5) == 1.0


def test_quality_is_full_from_the_share_of_the_typical_mark_and_proportional_below():
    reference = MarkReference(0.2, True)
    assert quality(0.1, 4.0, reference, share=0.5) == 1.0
    assert (
        quality(0.4, 9.0, reference, share=0.5) == 1.0
    )  # no more than full: nothing to gain beyond honest work
    assert quality(0.05, 2.5, reference, share=0.5) == pytest.approx(0.5)
    assert quality(0.05, MARK_Z - 0.1, reference, share=0.5) == 0.0  # a mark within noise is no mark
    assert quality(-0.1, 3.0, reference, share=0.5) == 0.0
    assert quality(float("inf"), 3.0, reference, share=0.5) == 0.0


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
