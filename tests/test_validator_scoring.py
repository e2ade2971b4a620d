"""Scores, moving averages and weights: pure functions of the validator's numbers."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from validators.scoring import tokens_trained, vouched_tokens, weights_from_averages


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


FLOOR, EXPONENT = 0.25, 0.3


def concave_gains(claims: dict[str, float], per_work: float = 0.01) -> dict[str, float]:
    """Gains of honest work: per_work · tokens ** EXPONENT."""
    return {hk: per_work * claim**EXPONENT for hk, claim in claims.items()}


def test_honest_work_of_every_size_is_paid_its_claim_and_splitting_changes_nothing():
    claims = {"quarter": 1e5, "one": 4e5, "four": 1.6e6, "split a": 8e5, "split b": 8e5, "h100s": 1.47e7}
    assert vouched_tokens(claims, concave_gains(claims), floor=FLOOR, exponent=EXPONENT) == claims


@pytest.mark.parametrize("scale", [1e-2, 1e-4])
def test_an_update_scaled_down_earns_no_more_than_its_size(scale):
    """An honest update scaled by s delivers about s of its gain (less: the loss is concave along the
    update); paid by the claim its gain vouches for, it earns at most s of its claim."""
    claims = {f"honest{i}": 4e5 for i in range(5)} | {"scaled": 4e5}
    gains = concave_gains(claims)
    gains["scaled"] *= scale
    vouched = vouched_tokens(claims, gains, floor=FLOOR, exponent=EXPONENT)
    assert 0 < vouched["scaled"] <= scale * claims["scaled"]
    assert all(vouched[f"honest{i}"] == claims[f"honest{i}"] for i in range(5))


def test_an_update_that_lowers_no_unseen_loss_vouches_for_nothing():
    claims = {"a": 4e5, "b": 4e5, "c": 4e5}
    gains = concave_gains(claims) | {"c": -1e-3}
    assert vouched_tokens(claims, gains, floor=FLOOR, exponent=EXPONENT)["c"] == 0.0


def test_without_a_yardstick_or_a_floor_every_claim_stands():
    claims = {"a": 4e5, "b": 1e3}
    assert vouched_tokens(claims, {"a": -1e-3, "b": 0.0}, floor=FLOOR, exponent=EXPONENT) == claims
    assert vouched_tokens(claims, {"a": 1e-2, "b": 1e-9}, floor=0.0, exponent=EXPONENT) == claims
    assert vouched_tokens({"alone": 4e5}, {"alone": 1e-9}, floor=FLOOR, exponent=EXPONENT) == {"alone": 4e5}


def test_raising_the_yardstick_to_dock_honest_work_costs_a_majority_most_of_its_pay():
    """The only lever on another miner's pay is the median. Colluders that train fully but claim
    1/k of it raise their gain per unit of work by k ** exponent; to push honest work below the floor
    they must be more than half of the window and raise it past 1 / floor, k > (1 / floor) ** (1 /
    exponent) = 101: they give up more than 99% of their own pay to dock the others."""
    honest = {f"honest{i}": 4e5 for i in range(4)}
    needed = (1 / FLOOR) ** (1 / EXPONENT)
    for k, docked in ((needed / 1.5, False), (needed * 1.5, True)):
        colluders = {f"colluder{i}": 4e5 / k for i in range(5)}
        gains = concave_gains(honest) | {hk: 0.01 * 4e5**EXPONENT for hk in colluders}
        vouched = vouched_tokens(honest | colluders, gains, floor=FLOOR, exponent=EXPONENT)
        assert (vouched["honest0"] < honest["honest0"]) is docked, k
        assert all(vouched[hk] == claim for hk, claim in colluders.items())
    few = {f"colluder{i}": 4e5 / 1e6 for i in range(3)}
    gains = concave_gains(honest) | {hk: 0.01 * 4e5**EXPONENT for hk in few}
    assert vouched_tokens(honest | few, gains, floor=FLOOR, exponent=EXPONENT)["honest0"] == 4e5


@given(
    st.dictionaries(
        st.text(min_size=1, max_size=4),
        st.tuples(st.floats(min_value=1.0, max_value=1e9), st.floats(min_value=-1.0, max_value=1.0)),
        min_size=1,
        max_size=12,
    )
)
@settings(max_examples=200, deadline=None)
def test_a_vouched_claim_is_never_above_the_claim_nor_below_zero(entries):
    claims = {hk: claim for hk, (claim, _) in entries.items()}
    gains = {hk: gain for hk, (_, gain) in entries.items()}
    vouched = vouched_tokens(claims, gains, floor=FLOOR, exponent=EXPONENT)
    assert vouched.keys() == claims.keys()
    assert all(0.0 <= vouched[hk] <= claims[hk] for hk in claims)
