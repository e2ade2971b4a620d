"""Subtensor's rules as pure functions."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from distrai.chain import rules
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
