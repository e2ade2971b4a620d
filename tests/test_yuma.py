"""Yuma Consensus: small cases worked out by hand, and properties over random subnets."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from distrai.chain.yuma import (
    NO_PENDING_COMMIT,
    EpochInputs,
    EpochParams,
    EpochResult,
    run_epoch,
    split_emission,
)

CLASSIC = EpochParams(yuma3=False)
YUMA3 = EpochParams(yuma3=True)
PROPERTY = settings(max_examples=120, deadline=None)


def input_fields(weights, stake) -> dict:
    """Every uid with stake holds a permit, all are active, no weight or bond is outdated."""
    stake = np.asarray(stake, dtype=float)
    n = stake.size
    return dict(
        weights=np.asarray(weights, dtype=float),
        stake=stake,
        validator_permit=stake > 0,
        active=np.ones(n, dtype=bool),
        registered_at=np.zeros(n, dtype=np.int64),
        last_update=np.ones(n, dtype=np.int64),
        bonds=np.zeros((n, n)),
        current_block=1000,
    )


def make_inputs(weights, stake, **overrides) -> EpochInputs:
    return EpochInputs(**{**input_fields(weights, stake), **overrides})


# One validator (uid 0, stake 1) weights miner 1 with 0.75 and miner 2 with 0.25.
ONE_VALIDATOR = [[0, 0.75, 0.25], [0, 0, 0], [0, 0, 0]]

# Validator 0 (stake 3) and validator 1 (stake 1) disagree about miners 2 and 3.
DISAGREE = [[0, 0, 0.8, 0.2], [0, 0, 0.2, 0.8], [0, 0, 0, 0], [0, 0, 0, 0]]


def test_one_validator_two_miners():
    result = run_epoch(make_inputs(ONE_VALIDATOR, [1, 0, 0]), YUMA3)
    # A lone voter is the whole majority: consensus equals its weights and nothing is clipped.
    assert result.consensus == pytest.approx([0, 0.75, 0.25])
    assert result.validator_trust == pytest.approx([1, 0, 0])
    assert result.trust == pytest.approx([0, 1, 1])
    assert result.incentive == pytest.approx([0, 0.75, 0.25])
    assert result.rank == pytest.approx(result.incentive)
    assert result.dividends == pytest.approx([1, 0, 0])
    # Yuma3 bonds start at zero and move 1 - 0.9 = 0.1 of the way to the weights.
    assert result.bonds[0] == pytest.approx([0, 0.075, 0.025])
    assert not result.bonds[1:].any()
    assert result.validator_permit.tolist() == [True, False, False]


def test_one_validator_classic_bonds_are_column_max_upscaled():
    result = run_epoch(make_inputs(ONE_VALIDATOR, [1, 0, 0]), CLASSIC)
    # The only bond holder owns every miner's column: normalized 1, max-upscaled 1.
    assert result.bonds[0] == pytest.approx([0, 1, 1])
    assert result.dividends == pytest.approx([1, 0, 0])


def test_two_validators_disagreeing_yuma3():
    result = run_epoch(make_inputs(DISAGREE, [3, 1, 0, 0]), YUMA3)
    # Active stake 0.75 / 0.25; kappa 0.5 puts the median at stake point 0.5.
    # Miner 2: sorted 0.2 (0.25 of stake), 0.8 (up to 1.0): 0.5 lies in 0.8's stretch.
    # Miner 3: sorted 0.2 (0.75 of stake): 0.5 lies in 0.2's stretch.
    assert result.consensus == pytest.approx([0, 0, 0.8, 0.2])
    # Validator 1 is clipped to (0.2, 0.2); validator 0 keeps (0.8, 0.2).
    assert result.validator_trust == pytest.approx([1, 0.4, 0, 0])
    # Ranks before clipping: .75*.8+.25*.2 = .65, .75*.2+.25*.8 = .35; after: .65, .15+.05 = .2.
    assert result.trust == pytest.approx([0, 0, 1, 0.2 / 0.35])
    assert result.incentive == pytest.approx([0, 0, 13 / 17, 4 / 17])
    # Bonds 0.1 * clipped: (.08, .02) and (.02, .02); per column shares (.8, .5) and (.2, .5).
    assert result.bonds[:2] == pytest.approx(np.array([[0, 0, 0.08, 0.02], [0, 0, 0.02, 0.02]]))
    # Per validator: .8*13/17 + .5*4/17 = 12.4/17 and .2*13/17 + .5*4/17 = 4.6/17, times stake
    # .75 and .25: 9.3 : 1.15, i.e. 186/209 and 23/209.
    assert result.dividends == pytest.approx([186 / 209, 23 / 209, 0, 0])


def test_two_validators_disagreeing_classic():
    result = run_epoch(make_inputs(DISAGREE, [3, 1, 0, 0]), CLASSIC)
    assert result.incentive == pytest.approx([0, 0, 13 / 17, 4 / 17])
    # ΔB = clipped * stake: (.6, .15) and (.05, .05); column shares (12/13, 3/4) and (1/13, 1/4).
    # Dividends: 12/13*13/17 + 3/4*4/17 = 15/17 and 1/13*13/17 + 1/4*4/17 = 2/17.
    assert result.dividends == pytest.approx([15 / 17, 2 / 17, 0, 0])
    # Stored column max-upscaled: (1, 1) and (1/12, 1/3).
    assert result.bonds[:2] == pytest.approx(np.array([[0, 0, 1, 1], [0, 0, 1 / 12, 1 / 3]]))


def test_yuma3_bonds_ema_over_two_epochs():
    first = run_epoch(make_inputs(ONE_VALIDATOR, [1, 0, 0]), YUMA3)
    swapped = [[0, 0.25, 0.75], [0, 0, 0], [0, 0, 0]]
    second = run_epoch(make_inputs(swapped, [1, 0, 0], bonds=first.bonds), YUMA3)
    # 0.1 * new weight + 0.9 * old bond: .025 + .0675 and .075 + .0225.
    assert second.bonds[0] == pytest.approx([0, 0.0925, 0.0975])


def test_yuma3_early_validator_earns_more_when_both_agree():
    only_first = [[0, 0, 1], [0, 0, 0], [0, 0, 0]]
    both = [[0, 0, 1], [0, 0, 1], [0, 0, 0]]
    first = run_epoch(make_inputs(only_first, [1, 1, 0]), YUMA3)
    # Equal stakes: validator 1's zero sits on the stake point 0.5 itself; the upper weight
    # (1) is consensus, so validator 0 is not clipped and bonds 0.1 to the miner.
    assert first.bonds[:, 2] == pytest.approx([0.1, 0, 0])
    second = run_epoch(make_inputs(both, [1, 1, 0], bonds=first.bonds), YUMA3)
    # Bonds .1 + .9*.1 = .19 and .1; the single miner has all incentive; equal stakes.
    assert second.bonds[:, 2] == pytest.approx([0.19, 0.1, 0])
    assert second.dividends == pytest.approx([19 / 29, 10 / 29, 0])


def test_classic_early_validator_keeps_most_bonds():
    only_first = [[0, 0, 1], [0, 0, 0], [0, 0, 0]]
    both = [[0, 0, 1], [0, 0, 1], [0, 0, 0]]
    first = run_epoch(make_inputs(only_first, [3, 1, 0]), CLASSIC)
    assert first.bonds[:, 2] == pytest.approx([1, 0, 0])
    second = run_epoch(make_inputs(both, [3, 1, 0], bonds=first.bonds), CLASSIC)
    # ΔB column shares .75 / .25; EMA .1*(.75, .25) + .9*(1, 0) = (.975, .025).
    assert second.dividends == pytest.approx([0.975, 0.025, 0])
    assert second.bonds[:, 2] == pytest.approx([1, 1 / 39, 0])


def test_kappa_sets_the_stake_needed_to_back_a_weight():
    weights = [[0, 0, 0.6, 0.4], [0, 0, 0.2, 0.8], [0, 0, 0, 0], [0, 0, 0, 0]]
    # Equal stakes: at kappa 0.5 the point 0.5 is the boundary and the upper weight wins.
    half = run_epoch(make_inputs(weights, [1, 1, 0, 0]), EpochParams(kappa=0.5))
    assert half.consensus == pytest.approx([0, 0, 0.6, 0.8])
    # At kappa 0.6 the point is 0.4, inside the lower weight's stretch.
    strict = run_epoch(make_inputs(weights, [1, 1, 0, 0]), EpochParams(kappa=0.6))
    assert strict.consensus == pytest.approx([0, 0, 0.2, 0.4])


def test_self_weight_is_dropped_except_the_owners():
    weights = [[0.5, 0.5], [0, 0]]
    # Validator 0 weights itself and miner 1 equally; its self-weight is dropped...
    assert run_epoch(make_inputs(weights, [1, 0]), YUMA3).incentive == pytest.approx([0, 1])
    # ...unless uid 0 is the subnet owner, whose self-weight is how emission gets burned.
    owner = run_epoch(make_inputs(weights, [1, 0], owner_uid=0), YUMA3)
    assert owner.incentive == pytest.approx([0.5, 0.5])


def test_the_owner_uid_keeps_its_permit_without_stake():
    weights = [[0, 0, 1], [0, 0, 0], [0, 0, 0]]
    # Uid 1 has no stake: no new permit for it...
    assert run_epoch(make_inputs(weights, [1, 0, 0]), YUMA3).validator_permit.tolist() == [True, False, False]
    # ...unless it is the owner's hotkey, whose permit is forced (subtensor's epoch_mechanism).
    owner = run_epoch(make_inputs(weights, [1, 0, 0], owner_uid=1), YUMA3)
    assert owner.validator_permit.tolist() == [True, True, False]
    # With no stake it carries no vote: uid 0 alone decides.
    assert owner.active_stake == pytest.approx([1, 0, 0])
    assert owner.incentive == pytest.approx([0, 0, 1])


def test_the_owner_uid_votes_with_a_forced_permit():
    # Validator 0 (permit) weights miner 2; the owner, uid 1, holds equal stake but no permit
    # yet (it staked after the last epoch) and weights miner 3.
    weights = [[0, 0, 1, 0], [0, 0, 0, 1], [0, 0, 0, 0], [0, 0, 0, 0]]
    permit = np.array([True, False, False, False])
    plain = run_epoch(make_inputs(weights, [1, 1, 0, 0], validator_permit=permit), YUMA3)
    assert plain.active_stake == pytest.approx([1, 0, 0, 0])
    assert plain.incentive == pytest.approx([0, 0, 1, 0])
    owner = run_epoch(make_inputs(weights, [1, 1, 0, 0], validator_permit=permit, owner_uid=1), YUMA3)
    # Forced permit: active stake .5 / .5. Each miner column is 1 from one voter and 0 from the
    # other; the stake point .5 falls on the boundary, where the upper weight (1) is consensus,
    # so nothing is clipped: ranks .5 and .5.
    assert owner.active_stake == pytest.approx([0.5, 0.5, 0, 0])
    assert owner.consensus == pytest.approx([0, 0, 1, 1])
    assert owner.incentive == pytest.approx([0, 0, 0.5, 0.5])
    # Bonds .1 each on its own miner: each validator owns its column, earns .5 of incentive,
    # times equal stake: dividends split evenly.
    assert owner.dividends == pytest.approx([0.5, 0.5, 0, 0])


def test_the_owner_uid_is_exempt_from_the_stake_threshold_and_its_self_weight_routes_incentive():
    # Threshold 2. Validator 0 (stake 3) weights the owner uid 1 and miner 2 equally; the owner
    # (stake 1, below the threshold) weights only itself.
    weights = [[0, 0.5, 0.5], [0, 1, 0], [0, 0, 0]]
    params = EpochParams(stake_threshold=2)
    plain = run_epoch(make_inputs(weights, [3, 1, 0]), params)
    # Without the exemption the owner's stake counts as zero: no vote, no permit.
    assert plain.stake == pytest.approx([1, 0, 0])
    assert plain.incentive == pytest.approx([0, 0.5, 0.5])
    assert plain.validator_permit.tolist() == [True, False, False]

    owner = run_epoch(make_inputs(weights, [3, 1, 0], owner_uid=1), params)
    # Stake kept: .75 / .25. Owner column: .5 (stake .75) then 1 (up to 1.0): the point .5
    # lies in .5's stretch, consensus .5. Miner column: 0 (stake .25) then .5: consensus .5.
    assert owner.stake == pytest.approx([0.75, 0.25, 0])
    assert owner.consensus == pytest.approx([0, 0.5, 0.5])
    # The owner's self-weight 1 is clipped to .5; validator 0 keeps (.5, .5).
    assert owner.validator_trust == pytest.approx([1, 0.5, 0])
    # Ranks: owner .75*.5 + .25*.5 = .5, miner .75*.5 = .375; incentive 4/7 and 3/7.
    # Before clipping the owner's rank was .75*.5 + .25*1 = .625: trust .5/.625 = .8.
    assert owner.incentive == pytest.approx([0, 4 / 7, 3 / 7])
    assert owner.trust == pytest.approx([0, 0.8, 1])
    # Bonds .1 * clipped: (.05, .05) and (.05, 0); column shares (.5, 1) and (.5, 0).
    # Per validator: .5*4/7 + 1*3/7 = 5/7 and .5*4/7 = 2/7; times stake .75 and .25:
    # 3.75 : .5, i.e. 15/17 and 2/17.
    assert owner.dividends == pytest.approx([15 / 17, 2 / 17, 0])
    assert owner.validator_permit.tolist() == [True, True, False]


def test_weights_to_uids_registered_after_a_pending_commit_are_dropped():
    weights = [[0, 0.5, 0.5], [0, 0, 0], [0, 0, 0]]
    # Validator 0 last updated at block 10, after both registrations, so nothing is outdated...
    fields = dict(registered_at=np.array([0, 3, 7]), last_update=np.array([10, 10, 10]))
    assert run_epoch(make_inputs(weights, [1, 0, 0], **fields), YUMA3).incentive == pytest.approx(
        [0, 0.5, 0.5]
    )
    # ...but its earliest pending commit is from block 5, before uid 2 registered at 7: those
    # weights were made for the neuron uid 2 replaced, and are dropped (subtensor's column mask).
    pending = np.array([5, NO_PENDING_COMMIT, NO_PENDING_COMMIT])
    masked = run_epoch(make_inputs(weights, [1, 0, 0], pending_commit_block=pending, **fields), YUMA3)
    assert masked.incentive == pytest.approx([0, 1, 0])


def test_weights_set_before_a_registration_are_dropped():
    weights = [[0, 0.5, 0.5], [0, 0, 0], [0, 0, 0]]
    # Validator 0 set weights at block 5; uid 1 was registered again at block 7.
    inputs = make_inputs(
        weights, [1, 0, 0], last_update=np.array([5, 5, 5]), registered_at=np.array([0, 7, 0])
    )
    assert run_epoch(inputs, YUMA3).incentive == pytest.approx([0, 0, 1])


def test_inactive_and_unpermitted_validators_do_not_vote():
    weights = [[0, 0, 1, 0], [0, 0, 0, 1], [0, 0, 0, 0], [0, 0, 0, 0]]
    inactive = make_inputs(weights, [1, 3, 0, 0], active=np.array([True, False, True, True]))
    unpermitted = make_inputs(weights, [1, 3, 0, 0], validator_permit=np.array([True, False, False, False]))
    for inputs in (inactive, unpermitted):
        result = run_epoch(inputs, YUMA3)
        assert result.active_stake == pytest.approx([1, 0, 0, 0])
        assert result.incentive == pytest.approx([0, 0, 1, 0])
        assert result.dividends == pytest.approx([1, 0, 0, 0])


def test_bonds_to_recently_registered_uids_are_dropped():
    weights = [[0, 0.5, 0.5], [0, 0, 0], [0, 0, 0]]
    old = np.array([[0, 0.5, 0.5], [0, 0, 0], [0, 0, 0]])
    # Block 1000, tempo 100: uid 2 registered at 950, after the last tempo started (900).
    inputs = make_inputs(
        weights, [1, 0, 0], bonds=old, registered_at=np.array([0, 0, 950]), last_update=np.full(3, 990)
    )
    result = run_epoch(inputs, EpochParams(tempo=100))
    # Kept: .1*.5 + .9*.5 = .5; dropped: .1*.5 + .9*0 = .05.
    assert result.bonds[0] == pytest.approx([0, 0.5, 0.05])


def test_permits_go_to_the_largest_stakes_and_lost_permits_clear_bonds():
    inputs = make_inputs(DISAGREE, [3, 1, 0, 0], bonds=np.full((4, 4), 0.5))
    result = run_epoch(inputs, EpochParams(max_validators=1))
    assert result.validator_permit.tolist() == [True, False, False, False]
    assert result.bonds[0].any()
    assert not result.bonds[1:].any()


def test_stake_below_threshold_counts_as_zero():
    result = run_epoch(make_inputs(DISAGREE, [3, 1, 0, 0]), EpochParams(stake_threshold=2))
    assert result.stake == pytest.approx([1, 0, 0, 0])
    assert result.incentive == pytest.approx([0, 0, 0.8, 0.2])
    assert result.dividends == pytest.approx([1, 0, 0, 0])


def test_liquid_alpha_rates():
    weights = [[0, 0.75, 0.25, 0], [0, 0, 0, 0], [0, 0, 0, 0], [0, 0, 0, 0]]
    old = np.zeros((4, 4))
    old[0, 2], old[0, 3] = 0.9, 0.5
    params = EpochParams(liquid_alpha=True)
    result = run_epoch(make_inputs(weights, [1, 0, 0, 0], bonds=old), params)
    # Miner 1, buying at consensus: gap 0, sigmoid 1/(1+e^5), alpha = .7 + .2 * sigmoid.
    buy = 0.7 + 0.2 / (1 + math.exp(5))
    # Miner 2, selling: gap .9 - .25 = .65, sigmoid 1/(1+e^-1.5).
    sell = 0.7 + 0.2 / (1 + math.exp(-1.5))
    # Miner 3 gets no weight: subtensor's sparse EMA drops the bond.
    assert result.bonds[0] == pytest.approx([0, buy * 0.75, (1 - sell) * 0.9 + sell * 0.25, 0])
    fixed = run_epoch(make_inputs(weights, [1, 0, 0, 0], bonds=old), YUMA3)
    assert fixed.bonds[0] == pytest.approx([0, 0.075, 0.9 * 0.9 + 0.1 * 0.25, 0.45])


def test_split_emission_pays_owner_miners_and_validators():
    result = run_epoch(make_inputs(DISAGREE, [3, 1, 0, 0]), CLASSIC)
    split = split_emission(result, 100.0, owner_cut=0.18)
    # 18 to the owner; 41 to miners by incentive (13/17, 4/17); 41 by dividends (15/17, 2/17).
    assert split.owner == pytest.approx(18)
    assert split.server == pytest.approx([0, 0, 41 * 13 / 17, 41 * 4 / 17])
    assert split.validator == pytest.approx([41 * 15 / 17, 41 * 2 / 17, 0, 0])
    assert split.burned == 0


def test_split_emission_without_weights_pays_validators_by_active_stake():
    result = run_epoch(make_inputs(np.zeros((3, 3)), [3, 1, 0]), YUMA3)
    split = split_emission(result, 100.0, owner_cut=0.18)
    assert split.server == pytest.approx([0, 0, 0])
    assert split.validator == pytest.approx([61.5, 20.5, 0])


def test_split_emission_without_any_stake_burns_the_rest():
    split = split_emission(run_epoch(make_inputs(np.zeros((2, 2)), [0, 0]), YUMA3), 100.0, owner_cut=0.18)
    assert (split.owner, split.burned) == pytest.approx((18, 82))
    assert not split.server.any() and not split.validator.any()


def test_split_emission_burns_incentive_of_owner_uids():
    weights = [[0, 0.25, 0.75], [0, 0, 0], [0, 0, 0]]
    split = split_emission(run_epoch(make_inputs(weights, [1, 0, 0]), YUMA3), 100.0, 0.2, owner_uids=[2])
    assert split.server == pytest.approx([0, 10, 0])
    assert split.burned == pytest.approx(30)
    assert split.validator == pytest.approx([40, 0, 0])


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({"weights": np.zeros((2, 3))}, "weights must have shape"),
        ({"stake": [1.0, -1.0]}, "stake must be finite and non-negative"),
        ({"weights": [[0, math.nan], [0, 0]]}, "weights must be finite"),
        ({"bonds": np.full((2, 2), 1.5)}, "bonds must be in"),
        ({"active": [1, 0]}, "active must be a bool vector"),
        ({"last_update": [0.5, 1.0]}, "last_update must be a vector"),
        ({"owner_uid": 2}, "owner_uid 2"),
        ({"pending_commit_block": [1]}, "pending_commit_block must be a vector"),
        ({"current_block": -1}, "current_block"),
    ],
)
def test_bad_inputs_are_named(overrides, message):
    with pytest.raises(ValueError, match=message):
        EpochInputs(**{**input_fields(np.zeros((2, 2)), [1.0, 0.0]), **overrides})


@pytest.mark.parametrize(
    ("params", "message"),
    [
        ({"kappa": 1.5}, "kappa"),
        ({"bonds_moving_avg": -0.1}, "bonds_moving_avg"),
        ({"alpha_low": 0.9, "alpha_high": 0.7}, "alpha_low"),
        ({"tempo": -1}, "tempo"),
        ({"stake_threshold": math.inf}, "stake_threshold"),
    ],
)
def test_bad_params_are_named(params, message):
    with pytest.raises(ValueError, match=message):
        EpochParams(**params)


def test_bad_split_arguments_are_named():
    result = run_epoch(make_inputs(ONE_VALIDATOR, [1, 0, 0]), YUMA3)
    with pytest.raises(ValueError, match="owner_cut"):
        split_emission(result, 1.0, owner_cut=1.5)
    with pytest.raises(ValueError, match="total_emission"):
        split_emission(result, -1.0)
    with pytest.raises(ValueError, match="owner_uids"):
        split_emission(result, 1.0, owner_uids=[3])


# ---------------------------------------------------------------- properties


ANY_AMOUNT = st.floats(0, 1e308)
"""Any finite non-negative float: huge ones overflow sums, tiny ones are subnormal."""


@st.composite
def epoch_params(draw) -> EpochParams:
    low, high = sorted(draw(st.lists(st.floats(0, 1), min_size=2, max_size=2)))
    return EpochParams(
        kappa=draw(st.floats(0, 1)),
        bonds_moving_avg=draw(st.floats(0, 1)),
        bonds_penalty=draw(st.sampled_from([0.0, 1.0]) | st.floats(0, 1)),
        yuma3=draw(st.booleans()),
        liquid_alpha=draw(st.booleans()),
        alpha_low=low,
        alpha_high=high,
        alpha_sigmoid_steepness=draw(st.floats(-50, 50)),
        tempo=draw(st.integers(0, 40)),
        max_validators=draw(st.integers(0, 6)),
        stake_threshold=draw(st.just(0.0) | st.floats(0, 1e6)),
    )


@st.composite
def epoch_inputs(draw, value=ANY_AMOUNT, max_n: int = 5) -> EpochInputs:
    """Random subnets; `value` draws weights and stakes."""
    n = draw(st.integers(1, max_n))
    vector = st.lists(value, min_size=n, max_size=n)
    flags = st.lists(st.booleans(), min_size=n, max_size=n)
    blocks = st.lists(st.integers(0, 60), min_size=n, max_size=n)
    return EpochInputs(
        weights=np.array(draw(st.lists(vector, min_size=n, max_size=n))).reshape(n, n),
        stake=np.array(draw(vector)),
        validator_permit=np.array(draw(flags)),
        active=np.array(draw(flags)),
        registered_at=np.array(draw(blocks), dtype=np.int64),
        last_update=np.array(draw(blocks), dtype=np.int64),
        bonds=np.array(
            draw(st.lists(st.lists(st.floats(0, 1), min_size=n, max_size=n), min_size=n, max_size=n))
        ),
        current_block=draw(st.integers(0, 80)),
        owner_uid=draw(st.none() | st.integers(0, n - 1)),
        pending_commit_block=draw(st.none() | blocks.map(lambda b: np.array(b, dtype=np.int64))),
    )


def sums_to_one_or_zero(x: np.ndarray) -> bool:
    return not x.any() or math.isclose(x.sum(), 1.0, rel_tol=1e-9)


@PROPERTY
@given(epoch_inputs(), epoch_params())
def test_outputs_are_finite_non_negative_and_chain_into_the_next_epoch(inputs, params):
    result = run_epoch(inputs, params)
    for name in (
        "stake",
        "active_stake",
        "consensus",
        "validator_trust",
        "rank",
        "trust",
        "incentive",
        "dividends",
    ):
        value = getattr(result, name)
        assert value.shape == (inputs.n,)
        assert np.all(np.isfinite(value)) and np.all(value >= 0), name
    assert np.all((result.bonds >= 0) & (result.bonds <= 1))
    follow_up = EpochInputs(
        **{**inputs.__dict__, "bonds": result.bonds, "validator_permit": result.validator_permit}
    )
    assert np.all(np.isfinite(run_epoch(follow_up, params).dividends))


@PROPERTY
@given(epoch_inputs(), epoch_params())
def test_incentive_and_dividends_each_sum_to_one_or_are_all_zero(inputs, params):
    result = run_epoch(inputs, params)
    assert sums_to_one_or_zero(result.incentive)
    assert sums_to_one_or_zero(result.dividends)
    assert sums_to_one_or_zero(result.stake) and sums_to_one_or_zero(result.active_stake)


@PROPERTY
@given(epoch_inputs(), epoch_params(), st.floats(0, 1e12), st.floats(0, 1), st.data())
def test_emissions_of_an_epoch_sum_to_its_total(inputs, params, total, owner_cut, data):
    owner_uids = data.draw(st.lists(st.integers(0, inputs.n - 1), max_size=2))
    split = split_emission(run_epoch(inputs, params), total, owner_cut, owner_uids)
    assert math.isclose(split.total, total, rel_tol=1e-9, abs_tol=1e-300)
    assert np.all(split.server >= 0) and np.all(split.validator >= 0)
    assert split.owner >= 0 and split.burned >= 0
    assert not split.server[owner_uids].any()


@PROPERTY
@given(epoch_inputs(), epoch_params(), st.data())
def test_zero_stake_earns_no_dividends(inputs, params, data):
    # Classic Yuma pays dividends on bonds alone, so there the uid must hold no old bonds (on
    # chain a uid's bonds are cleared when it loses its permit, which zero stake causes).
    uid = data.draw(st.integers(0, inputs.n - 1))
    stake, bonds = inputs.stake.copy(), inputs.bonds.copy()
    stake[uid] = 0.0
    if not params.yuma3:
        bonds[uid] = 0.0
    result = run_epoch(EpochInputs(**{**inputs.__dict__, "stake": stake, "bonds": bonds}), params)
    assert result.dividends[uid] == 0
    assert split_emission(result, 1000.0).validator[uid] == 0


@PROPERTY
@given(
    epoch_inputs(value=st.integers(0, 65535).map(float)),
    epoch_params().map(lambda p: EpochParams(**{**p.__dict__, "max_validators": 64})),
    st.randoms(use_true_random=False),
)
def test_permuting_uids_permutes_every_result(inputs, params, rng):
    # Integer stakes and u16 weights sum exactly in any order, so the medians match exactly.
    # Permits are not capped here: equal stakes at the cap are broken by uid, as on chain.
    perm = np.array(rng.sample(range(inputs.n), inputs.n))
    owner = None if inputs.owner_uid is None else int(np.argsort(perm)[inputs.owner_uid])
    permuted = EpochInputs(
        weights=inputs.weights[np.ix_(perm, perm)],
        stake=inputs.stake[perm],
        validator_permit=inputs.validator_permit[perm],
        active=inputs.active[perm],
        registered_at=inputs.registered_at[perm],
        last_update=inputs.last_update[perm],
        bonds=inputs.bonds[np.ix_(perm, perm)],
        current_block=inputs.current_block,
        owner_uid=owner,
        pending_commit_block=None
        if inputs.pending_commit_block is None
        else inputs.pending_commit_block[perm],
    )
    original, shuffled = run_epoch(inputs, params), run_epoch(permuted, params)
    for name in EpochResult.__dataclass_fields__:
        expected = getattr(original, name)
        expected = expected[np.ix_(perm, perm)] if expected.ndim == 2 else expected[perm]
        np.testing.assert_allclose(getattr(shuffled, name), expected, rtol=1e-9, atol=1e-12, err_msg=name)


@st.composite
def normalized_row(draw, miners: int) -> np.ndarray:
    row = np.array(draw(st.lists(st.integers(0, 100), min_size=miners, max_size=miners)), dtype=float)
    assume(row.sum() > 0)
    return row / row.sum()


@PROPERTY
@given(
    st.integers(1, 3).flatmap(lambda m: st.tuples(normalized_row(m), normalized_row(m))),
    st.integers(1, 100),
    st.integers(1, 100),
    st.booleans(),
)
def test_a_validator_against_the_majority_is_clipped_and_earns_less(rows, equal_stake, majority_stake, yuma3):
    agreed, dissent = rows
    assume(np.abs(agreed - dissent).sum() > 1e-3)
    miners = agreed.size
    # Uids 0 and 1 have equal stake; uid 2 agrees with uid 0, so together they hold the majority.
    weights = np.zeros((3 + miners, 3 + miners))
    weights[0, 3:] = weights[2, 3:] = agreed
    weights[1, 3:] = dissent
    stake = [equal_stake, equal_stake, majority_stake] + [0] * miners
    result = run_epoch(make_inputs(weights, stake), EpochParams(yuma3=yuma3))
    assert result.consensus[3:] == pytest.approx(agreed)
    assert result.validator_trust[0] == pytest.approx(1)
    assert result.validator_trust[1] < result.validator_trust[0] - 1e-4
    assert result.dividends[1] < result.dividends[0]
    split = split_emission(result, 1000.0)
    assert split.validator[1] < split.validator[0]
