"""Subtensor's rules as pure functions."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from distrai.chain import commit_reveal, rules
from distrai.chain.base import ChainError, Hyperparameters


def test_weights_to_u16_max_upscales_and_drops_zeros():
    uids, values = rules.weights_to_u16([3, 1, 2], [0.5, 0.25, 0.0])
    assert uids == [3, 1]
    assert values == [65535, 32768]


@given(st.lists(st.floats(min_value=0.0, max_value=1e6, allow_nan=False), min_size=1, max_size=20))
@settings(max_examples=100, deadline=None)
def test_weights_to_u16_keeps_proportions(weights):
    uids, values = rules.weights_to_u16(list(range(len(weights))), weights)
    assert all(0 < v <= rules.U16_MAX for v in values)
    if values:
        assert max(values) == rules.U16_MAX
        top = max(weights)
        for u, v in zip(uids, values, strict=True):
            assert abs(v - weights[u] / top * rules.U16_MAX) <= 0.5


@pytest.mark.parametrize("bad", [[float("nan")], [-1.0], [float("inf")]])
def test_weights_to_u16_refuses_non_finite_or_negative(bad):
    with pytest.raises(ChainError) as refused:
        rules.weights_to_u16([0], bad)
    assert refused.value.reason == "InvalidWeights"


def call(**overrides):
    base = dict(
        setter_uid=0, n=4, has_permit=True, block=100, last_set_block=None, uids=[1, 2], values=[10, 20]
    )
    return rules.WeightsCall(**{**base, **overrides})


def test_self_weight_needs_no_permit_and_meets_min_length():
    hp = Hyperparameters(min_allowed_weights=3)
    rules.check_set_weights(call(has_permit=False, uids=[0], values=[65535]), hp)
    with pytest.raises(ChainError) as refused:
        rules.check_set_weights(call(has_permit=False), hp)
    assert refused.value.reason == "NeuronNoValidatorPermit"


def test_min_allowed_weights_is_capped_by_subnet_size():
    rules.check_set_weights(call(n=2, uids=[0, 1], values=[1, 1]), Hyperparameters(min_allowed_weights=8))


def test_rate_limit_counts_blocks_since_last_set():
    hp = Hyperparameters(weights_rate_limit=10)
    rules.check_set_weights(call(last_set_block=90), hp)
    with pytest.raises(ChainError) as refused:
        rules.check_set_weights(call(last_set_block=91), hp)
    assert refused.value.reason == "SettingWeightsTooFast"


def test_prune_prefers_lowest_score_then_oldest_then_lowest_uid():
    c = rules.PruneCandidate
    pool = [c(0, 0, 0.5), c(1, 5, 0.1), c(2, 3, 0.1), c(3, 95, 0.0)]
    assert rules.neuron_to_prune(pool, block=100, immunity_period=10) == 2
    all_immune = [c(0, 95, 0.3), c(1, 96, 0.2)]
    assert rules.neuron_to_prune(all_immune, block=100, immunity_period=10) == 1


def test_epoch_blocks_follow_subtensor_schedule():
    blocks = [b for b in range(40) if rules.is_epoch_block(b, netuid=1, tempo=9)]
    assert blocks == [8, 18, 28, 38]


def test_stake_below_the_threshold_cannot_set_weights_unless_it_is_the_owners():
    hp = Hyperparameters(stake_threshold=100.0)
    with pytest.raises(ChainError) as refused:
        rules.check_set_weights(call(stake=99.5), hp)
    assert refused.value.reason == "NotEnoughStakeToSetWeights"
    rules.check_set_weights(call(stake=100.0), hp)
    rules.check_set_weights(call(stake=0.0, is_owner=True), hp)


def test_the_owner_needs_no_permit():
    rules.check_set_weights(call(has_permit=False, is_owner=True), Hyperparameters())


def test_checks_run_in_subtensors_order():
    hp = Hyperparameters(weights_rate_limit=10, stake_threshold=5.0)
    # Unregistered and too many uids: the length check comes first.
    with pytest.raises(ChainError) as too_many:
        rules.check_set_weights(call(setter_uid=None, uids=[0, 1, 2, 3, 0], values=[1] * 5), hp)
    assert too_many.value.reason == "UidsLengthExceedUidsInSubNet"
    # Low stake before the rate limit, the rate limit before the permit, the permit before
    # duplicates and the weight count.
    bad = dict(uids=[1, 1], values=[1, 1], has_permit=False, last_set_block=95)
    order = [
        ({"stake": 0.0}, "NotEnoughStakeToSetWeights"),
        ({"stake": 5.0}, "SettingWeightsTooFast"),
        ({"stake": 5.0, "last_set_block": 90}, "NeuronNoValidatorPermit"),
        ({"stake": 5.0, "last_set_block": 90, "has_permit": True}, "DuplicateUids"),
    ]
    for overrides, reason in order:
        with pytest.raises(ChainError) as refused:
            rules.check_set_weights(call(**{**bad, **overrides}), hp)
        assert refused.value.reason == reason


def test_under_commit_reveal_the_rate_limit_is_the_commits():
    hp = Hyperparameters(weights_rate_limit=10, commit_reveal_weights=True)
    rules.check_set_weights(call(last_set_block=99), hp)


def test_epoch_index_counts_fired_epochs_including_this_block():
    # netuid 1, tempo 9: epochs fire at 8, 18, 28.
    assert [rules.epoch_index(b, netuid=1, tempo=9) for b in (0, 7, 8, 9, 17, 18, 28)] == [
        0,
        0,
        1,
        1,
        1,
        2,
        3,
    ]
    # netuid 12, tempo 9: (b + 13) % 10 == 0 fires at 7, 17; block 0 is genesis and never fires.
    assert [rules.epoch_index(b, netuid=12, tempo=9) for b in (0, 6, 7, 16, 17)] == [0, 0, 1, 1, 2]
    assert rules.epoch_index(100, netuid=1, tempo=0) == 0


def commit(**overrides):
    base = dict(registered=True, block=100, last_update=0, unrevealed_this_epoch=0)
    return commit_reveal.CommitCall(**{**base, **overrides})


@pytest.mark.parametrize(
    ("overrides", "hp", "reason"),
    [
        ({}, Hyperparameters(commit_reveal_weights=False), "CommitRevealDisabled"),
        ({"registered": False}, Hyperparameters(commit_reveal_weights=True), "HotKeyNotRegisteredInSubNet"),
        (
            {"last_update": 95},
            Hyperparameters(commit_reveal_weights=True, weights_rate_limit=10),
            "CommittingWeightsTooFast",
        ),
        (
            {"unrevealed_this_epoch": 10},
            Hyperparameters(commit_reveal_weights=True),
            "TooManyUnrevealedCommits",
        ),
    ],
)
def test_commit_refusals(overrides, hp, reason):
    with pytest.raises(ChainError) as refused:
        commit_reveal.check_commit_weights(commit(**overrides), hp)
    assert refused.value.reason == reason


def test_a_commit_opens_reveal_period_epochs_later_and_then_expires():
    hp = Hyperparameters(commit_reveal_weights=True, weights_rate_limit=10)
    commit_reveal.check_commit_weights(commit(last_update=90, unrevealed_this_epoch=9), hp)
    # Committed in epoch 4 with a reveal period of 2: opens when epoch 6 fires.
    assert commit_reveal.reveal_epoch(6, 2) == 4
    assert [commit_reveal.is_commit_expired(4, current, 2) for current in (4, 5, 6, 7)] == [
        False,
        False,
        False,
        True,
    ]


@pytest.mark.parametrize(("period", "reason"), [(0, "RevealPeriodTooSmall"), (101, "RevealPeriodTooLarge")])
def test_reveal_periods_outside_subtensors_bounds_are_refused(period, reason):
    commit_reveal.check_reveal_period(1)
    commit_reveal.check_reveal_period(100)
    with pytest.raises(ChainError) as refused:
        commit_reveal.check_reveal_period(period)
    assert refused.value.reason == reason
