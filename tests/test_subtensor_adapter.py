"""The bittensor adapter's own behaviour: network names, decoding, error names, commit-reveal.

Chain behaviour shared with the embedded chain lives in `test_chain_contract.py`; these tests cover
what only the adapter does, through the SDK over the in-memory substrate.
"""

from __future__ import annotations

import math
import os
import threading
from dataclasses import replace
from types import SimpleNamespace

import bittensor as bt
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from support.local_harness import TEST_HYPERPARAMETERS
from support.memory_substrate import MemorySubstrate, commitment_text
from support.subtensor_harness import make_subtensor_harness

from distrai.chain.base import ChainError
from distrai.chain.local import LocalChain
from distrai.chain.subtensor import (
    RAW_FIELD_BYTES,
    SubtensorChain,
    checked_weights,
    commitment_info,
    hyperparameters_from,
    readable_commitments,
    refusal,
    resolve_network,
)

U16_STEP = 1 / 65535


def staked_validator_and_miners(h, miners: int = 2):
    """A validator holding a permit (after an epoch) and `miners` registered miners."""
    validator = h.new_wallet("validator")
    others = [h.new_wallet(f"miner{i}") for i in range(miners)]
    v_uid = h.chain.register(validator)
    m_uids = [h.chain.register(w) for w in others]
    h.add_stake(validator, 1000.0)
    h.advance(h.local.hyperparameters().tempo + 2)
    assert h.chain.metagraph().neurons[v_uid].validator_permit
    return validator, v_uid, others, m_uids


# -- network names ------------------------------------------------------------------------------


def test_network_names_resolve_to_their_endpoints_without_connecting():
    assert resolve_network("finney") == ("finney", "wss://entrypoint-finney.opentensor.ai:443")
    assert resolve_network("test") == ("test", "wss://test.finney.opentensor.ai:443")
    local = os.environ.get("BT_CHAIN_ENDPOINT") or "ws://127.0.0.1:9944"
    assert resolve_network("local") == ("local", local)
    assert resolve_network("wss://entrypoint-finney.opentensor.ai:443")[0] == "finney"
    chain = SubtensorChain("ws://10.1.2.3:9944", netuid=7)
    assert (chain.network, chain.endpoint, chain.netuid) == ("ws://10.1.2.3:9944", "ws://10.1.2.3:9944", 7)


@pytest.mark.parametrize("bad", ["mainnet", "http://127.0.0.1:9944", ""])
def test_unknown_network_names_are_refused_with_the_choices(bad):
    with pytest.raises(ValueError, match="finney, test, local or a ws"):
        SubtensorChain(bad, netuid=1)


def test_an_unreachable_node_is_a_connection_failure():
    chain = SubtensorChain("ws://127.0.0.1:1", netuid=1)
    with pytest.raises(ChainError) as failed:
        chain.block()
    assert failed.value.reason == "ConnectionFailed"


# -- encoding and decoding ----------------------------------------------------------------------


@settings(max_examples=60, deadline=None)
@given(st.text(max_size=600))
def test_commitment_text_splits_into_raw_fields_and_joins_back(text):
    info = commitment_info(text)
    for field in info["fields"]:
        ((variant, payload),) = field.items()
        size = len(bytes.fromhex(payload.removeprefix("0x")))
        assert variant == f"Raw{size}" and 0 < size <= RAW_FIELD_BYTES
    assert len(info["fields"]) == math.ceil(len(text.encode()) / RAW_FIELD_BYTES)
    assert commitment_text(info) == text


def test_hyperparameters_come_back_in_plain_units(tmp_path):
    hp = replace(
        TEST_HYPERPARAMETERS,
        max_validators=3,
        min_allowed_weights=2,
        max_weight_limit=0.4,
        kappa=0.3,
        bonds_moving_avg=0.75,
        yuma3=False,
        commit_reveal_weights=True,
        commit_reveal_period=4,
        stake_threshold=2.5,
        commitment_max_bytes=300,
        max_registrations_per_block=7,
    )
    got = make_subtensor_harness(tmp_path, hp).chain.hyperparameters()
    assert (got.tempo, got.max_uids, got.max_validators, got.immunity_period) == (10, 8, 3, 20)
    assert (got.min_allowed_weights, got.weights_rate_limit, got.activity_cutoff) == (2, 5, 1000)
    assert (got.yuma3, got.commit_reveal_weights, got.max_registrations_per_block) == (False, True, 7)
    # The reveal period is the subnet's; the stake threshold is subtensor's global one, in rao.
    assert (got.commit_reveal_period, got.stake_threshold) == (4, 2.5)
    # Fractions travel as u16 (65535 = 1) or per-million, so they come back quantized.
    assert got.max_weight_limit == pytest.approx(0.4, abs=U16_STEP)
    assert got.kappa == pytest.approx(0.3, abs=U16_STEP)
    assert got.bonds_moving_avg == pytest.approx(0.75, abs=1e-6)
    # A commitment spans whole 128-byte fields; subtensor has no block-count commitment limit.
    assert (got.commitment_max_bytes, got.commitment_rate_limit) == (3 * RAW_FIELD_BYTES, 0)


RAW_HYPERPARAMETERS = {
    "tempo": 99,
    "max_allowed_uids": 64,
    "max_validators": 8,
    "immunity_period": 100,
    "min_allowed_weights": 1,
    "max_weights_limit": 65535,
    "weights_rate_limit": 10,
    "activity_cutoff": 500,
    "kappa": 32767,
    "bonds_moving_avg": 900000,
    "yuma_version": 3,
    "commit_reveal_weights_enabled": False,
    "commit_reveal_period": 2,
    "max_regs_per_block": 1,
}
"""A node's `get_subnet_hyperparams_v3` answer, as the SDK flattens it."""


def test_hyperparameters_accept_yuma_version():
    hp = hyperparameters_from(RAW_HYPERPARAMETERS, commitment_fields=3, stake_threshold_rao=1_500_000_000)
    assert hp.yuma3 and hp.max_weight_limit == 1.0 and hp.bonds_moving_avg == pytest.approx(0.9)
    assert (hp.commit_reveal_period, hp.stake_threshold, hp.commitment_max_bytes) == (
        2,
        1.5,
        3 * RAW_FIELD_BYTES,
    )


SOURCES = [
    *((name, "raw") for name in RAW_HYPERPARAMETERS),
    ("MaxFields", "fields"),
    ("StakeThreshold", "threshold"),
]


def hyperparameters_with(name: str, source: str, value) -> None:
    """`hyperparameters_from` over the good answer with one value replaced (`...`: removed)."""
    raw, fields, threshold = dict(RAW_HYPERPARAMETERS), 3, 0
    if source == "raw" and value is ...:
        del raw[name]
    elif source == "raw":
        raw[name] = value
    elif source == "fields":
        fields = value
    else:
        threshold = value
    hyperparameters_from(raw, commitment_fields=fields, stake_threshold_rao=threshold)


@pytest.mark.parametrize(("name", "source"), [s for s in SOURCES if s[1] == "raw"])
def test_a_hyperparameter_the_node_omits_is_named(name, source):
    with pytest.raises(ChainError) as missing:
        hyperparameters_with(name, source, ...)
    assert missing.value.reason == "MissingHyperparameter" and name in missing.value.detail


@pytest.mark.parametrize("garbage", [None, "12", -1, 2.5, [1]])
@pytest.mark.parametrize(("name", "source"), SOURCES)
def test_a_hyperparameter_the_node_garbles_is_named(name, source, garbage):
    with pytest.raises(ChainError) as bad:
        hyperparameters_with(name, source, garbage)
    assert bad.value.reason == "BadHyperparameter" and name in bad.value.detail


@pytest.mark.parametrize("name", ["kappa", "max_weights_limit", "bonds_moving_avg"])
def test_a_fraction_past_one_is_garbage(name):
    with pytest.raises(ChainError) as bad:
        hyperparameters_with(name, "raw", 10**9)
    assert bad.value.reason == "BadHyperparameter"


class GarblingNode(MemorySubstrate):
    """A node that answers one hyperparameter, or the `MaxFields` constant, with None."""

    def __init__(self, local: LocalChain, garbled: str):
        super().__init__(local)
        self.garbled = garbled

    async def runtime_call(self, api: str, method: str, params: list, block_hash=None):
        answer = await super().runtime_call(api, method, params, block_hash)
        if method != "get_subnet_hyperparams_v3":
            return answer
        return [{**e, "value": {"u64": None}} if e["name"] == self.garbled else e for e in answer]

    async def constant(self, module: str, name: str):
        return None if name == self.garbled else await super().constant(module, name)


@pytest.mark.parametrize("garbled", ["tempo", "kappa", "commit_reveal_weights_enabled", "MaxFields"])
def test_a_node_answering_none_is_a_chain_error_through_the_sdk(tmp_path, garbled):
    h = make_subtensor_harness(tmp_path)
    chain = SubtensorChain("local", netuid=1, substrate=GarblingNode(h.local, garbled))
    with pytest.raises(ChainError) as bad:
        chain.hyperparameters()
    assert bad.value.reason == "BadHyperparameter" and garbled in bad.value.detail


def test_metagraph_matches_the_chain_within_u16_quantization(tmp_path):
    h = make_subtensor_harness(tmp_path)
    validator, v_uid, miners, m_uids = staked_validator_and_miners(h)
    h.chain.commit(miners[0], "s3://bucket/miner0")
    h.chain.set_weights(validator, m_uids, [0.3, 0.7])
    h.advance(h.local.hyperparameters().tempo + 2)

    theirs, ours = h.local.metagraph(), h.chain.metagraph()
    assert ours.block == theirs.block and ours.hotkeys == theirs.hotkeys
    assert any(n.incentive > 0 for n in theirs.neurons) and any(n.validator_trust > 0 for n in theirs.neurons)
    for mine, chain in zip(ours.neurons, theirs.neurons, strict=True):
        exact = ("uid", "hotkey", "coldkey", "validator_permit", "registered_at", "last_update")
        assert [getattr(mine, f) for f in exact] == [getattr(chain, f) for f in exact]
        assert mine.stake == pytest.approx(chain.stake, abs=1e-9)
        assert mine.emission == pytest.approx(chain.emission, abs=1e-9)
        for score in ("rank", "trust", "consensus", "validator_trust", "incentive", "dividends"):
            assert getattr(mine, score) == pytest.approx(getattr(chain, score), abs=U16_STEP), score
        assert mine.total_emission == 0.0  # subtensor keeps no lifetime total per hotkey
    assert ours.commitments == theirs.commitments and ours.commitments == h.chain.commitments()


def test_only_readable_commitments_are_reported():
    sealed_field = {"TimelockEncrypted": {"encrypted": "0x00", "reveal_round": 77}}

    def commitment(data: str, fields: list, revealed: list) -> bt.NeuronCommitment:
        encrypted = fields == [sealed_field]
        return bt.NeuronCommitment(
            hotkey="hk",
            netuid=1,
            uid=0,
            block=5,
            queried_block=9,
            deposit=bt.Balance(0),
            data=data,
            encrypted=encrypted,
            reveal_round=77 if encrypted else None,
            revealed=revealed,
            fields=fields,
        )

    got = readable_commitments(
        {
            "sealed": commitment("", [sealed_field], []),
            "opened": commitment("", [sealed_field], [(8, "revealed text")]),
            "plain": commitment("plain", [{"Raw5": "0x" + b"plain".hex()}], []),
            "absent": None,
        }
    )
    assert {hotkey: c.data for hotkey, c in got.items()} == {"opened": "revealed text", "plain": "plain"}


def test_block_hashes_are_the_chains(tmp_path):
    h = make_subtensor_harness(tmp_path)
    h.advance(4)
    now = h.local.block()
    assert [h.chain.block_hash(b) for b in (0, now - 1, now)] == [
        h.local.block_hash(b) for b in (0, now - 1, now)
    ]
    assert h.chain.block_hash() == h.local.block_hash(now)


def test_commitments_of_a_block_whose_state_the_node_pruned_are_unavailable(tmp_path):
    h = make_subtensor_harness(tmp_path)
    miner = h.new_wallet("miner")
    h.chain.register(miner)
    h.chain.commit(miner, "old")
    h.advance(5)
    lite = SubtensorChain("local", netuid=1, substrate=MemorySubstrate(h.local, state_pruning=3))
    now = lite.block()
    assert {c.data for c in lite.commitments(now - 3).values()} == {"old"}
    with pytest.raises(ChainError) as pruned:
        lite.commitments(now - 4)
    assert pruned.value.reason == "BlockUnavailable" and str(now - 4) in pruned.value.detail
    with pytest.raises(ChainError) as negative:
        lite.commitments(-1)
    assert negative.value.reason == "BadBlock"


# -- weights ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("uids", "weights", "reason"),
    [
        ([0, 1], [1.0], "WeightVecNotEqualSize"),
        ([0, 0], [1.0, 2.0], "DuplicateUids"),
        ([-1], [1.0], "UidVecContainInvalidOne"),
        ([0, 1], [1.0, float("nan")], "InvalidWeights"),
        ([0, 1], [1.0, float("inf")], "InvalidWeights"),
        ([0, 1], [1.0, -0.5], "InvalidWeights"),
    ],
)
def test_malformed_weights_are_refused_by_name(uids, weights, reason):
    with pytest.raises(ChainError) as refused:
        checked_weights(uids, weights)
    assert refused.value.reason == reason


def test_weights_land_on_chain_as_u16_proportions(tmp_path):
    h = make_subtensor_harness(tmp_path)
    validator, v_uid, _, m_uids = staked_validator_and_miners(h)
    h.chain.set_weights(validator, m_uids, [0.25, 0.75])
    stored = h.local.weights()[v_uid]
    assert stored[m_uids[0]] == pytest.approx(0.25, abs=U16_STEP)
    assert stored[m_uids[1]] == pytest.approx(0.75, abs=U16_STEP)


def test_weights_read_back_through_the_sdk_as_the_chain_holds_them(tmp_path):
    h = make_subtensor_harness(tmp_path)
    validator, v_uid, _, m_uids = staked_validator_and_miners(h)
    assert h.chain.weights() == {}
    h.chain.set_weights(validator, m_uids, [0.25, 0.75])
    read = h.chain.weights()
    assert set(read) == {v_uid} and set(read[v_uid]) == set(m_uids)
    for uid in m_uids:
        assert read[v_uid][uid] == pytest.approx(h.local.weights()[v_uid][uid], abs=U16_STEP)
    assert ("SubtensorModule", "Weights") in h.substrate.storage_reads


def test_the_rate_limit_the_sdk_preflights_is_the_chains(tmp_path):
    h = make_subtensor_harness(tmp_path)
    h.advance(3)  # past block 0, which subtensor's LastUpdate reads as "never set"
    validator, v_uid, _, m_uids = staked_validator_and_miners(h)
    latecomer = h.new_wallet("latecomer")
    h.chain.register(latecomer)
    with pytest.raises(ChainError) as just_registered:  # registering starts the rate limit, as on subtensor
        h.chain.set_weights(latecomer, m_uids, [1.0, 1.0])
    assert just_registered.value.reason == "SettingWeightsTooFast"
    h.chain.set_weights(validator, m_uids, [1.0, 1.0])
    h.advance(TEST_HYPERPARAMETERS.weights_rate_limit - 1)
    with pytest.raises(ChainError) as too_fast:
        h.chain.set_weights(validator, m_uids, [1.0, 2.0])
    assert too_fast.value.reason == "SettingWeightsTooFast"
    h.advance(1)
    h.chain.set_weights(validator, m_uids, [1.0, 2.0])
    assert h.local.weights()[v_uid][m_uids[1]] == pytest.approx(2 / 3, abs=U16_STEP)


def test_too_few_weights_are_refused_before_signing(tmp_path):
    h = make_subtensor_harness(tmp_path, replace(TEST_HYPERPARAMETERS, min_allowed_weights=2))
    validator, _, _, m_uids = staked_validator_and_miners(h)
    with pytest.raises(ChainError) as refused:
        h.chain.set_weights(validator, m_uids[:1], [1.0])
    assert refused.value.reason == "WeightVecLengthIsLow"


def test_all_zero_weights_are_preflighted_and_refused_without_reaching_the_chain(tmp_path):
    h = make_subtensor_harness(tmp_path)
    h.advance(3)  # past block 0, which subtensor's LastUpdate reads as "never set"
    validator, _, _, m_uids = staked_validator_and_miners(h)
    stranger = h.new_wallet("stranger")
    h.chain.set_weights(validator, m_uids, [1.0, 1.0])
    sent = len(h.substrate.submitted)
    # The SDK's preflight runs first, as for any weights: registration, then the rate limit...
    with pytest.raises(ChainError) as unregistered:
        h.chain.set_weights(stranger, m_uids, [0.0, 0.0])
    assert unregistered.value.reason == "HotKeyNotRegisteredInSubNet"
    with pytest.raises(ChainError) as too_fast:
        h.chain.set_weights(validator, m_uids, [0.0, 0.0])
    assert too_fast.value.reason == "SettingWeightsTooFast"
    # ...and then the SDK refuses to send nothing, by the name subtensor gives an empty vector.
    h.advance(TEST_HYPERPARAMETERS.weights_rate_limit)
    with pytest.raises(ChainError) as empty:
        h.chain.set_weights(validator, m_uids, [0.0, 0.0])
    assert empty.value.reason == "WeightVecLengthIsLow"
    with pytest.raises(ChainError) as none_at_all:
        h.chain.set_weights(validator, [], [])
    assert none_at_all.value.reason == "WeightVecLengthIsLow"
    assert len(h.substrate.submitted) == sent


def test_the_sdk_clips_to_the_max_weight_limit_and_the_chain_refuses_what_cannot_be(tmp_path):
    h = make_subtensor_harness(tmp_path, replace(TEST_HYPERPARAMETERS, max_weight_limit=0.4))
    validator, v_uid, _, m_uids = staked_validator_and_miners(h)
    # Two equal weights are a half each whatever the clipping: above a 0.4 cap.
    with pytest.raises(ChainError) as refused:
        h.chain.set_weights(validator, m_uids, [1.0, 1.0])
    assert refused.value.reason == "MaxWeightExceeded"
    # Three weights can fit under 0.4: the SDK clips 0.6 down and spreads the rest.
    h.chain.set_weights(validator, [v_uid, *m_uids], [0.2, 0.2, 0.6])
    assert max(h.local.weights()[v_uid].values()) <= 0.4 + U16_STEP


def timelocked_commit(tmp_path, period: int):
    """A validator's weights through `SetWeights` on a commit-reveal subnet with this reveal period."""
    hp = replace(TEST_HYPERPARAMETERS, commit_reveal_weights=True, commit_reveal_period=period)
    h = make_subtensor_harness(tmp_path, hp)
    validator, v_uid, _, m_uids = staked_validator_and_miners(h)
    h.chain.set_weights(validator, m_uids, [0.5, 0.5])
    (commit,) = h.substrate.timelocked_commits
    return h, validator, v_uid, commit


def test_commit_reveal_subnets_get_a_sealed_commit_not_plain_weights(tmp_path):
    h, validator, v_uid, commit = timelocked_commit(tmp_path / "one", period=1)
    assert (commit.hotkey, commit.netuid) == (validator.hotkey.ss58_address, 1)
    assert len(commit.commit) > 0 and commit.reveal_round > bt.timelock.current_round()
    # No plain weights landed, and the embedded chain holds no commit it could open.
    assert v_uid not in h.local.weights() and h.local.sealed_commits() == []
    assert not any(c.function == "set_mechanism_weights" for c in h.substrate.submitted)
    # The SDK found the reveal epoch from the chain's own schedule and reveal period.
    schedule = {"Tempo", "RevealPeriodEpochs", "LastEpochBlock", "SubnetEpochIndex", "BlocksSinceLastStep"}
    assert schedule <= {name for module, name in h.substrate.storage_reads if module == "SubtensorModule"}
    # Two more epochs of reveal period lock the weights two tempos of drand rounds (3 s each) longer.
    _, _, _, later = timelocked_commit(tmp_path / "three", period=3)
    rounds = 2 * TEST_HYPERPARAMETERS.tempo * h.local.block_time() / 3
    assert later.reveal_round - commit.reveal_round == pytest.approx(rounds, abs=2)


# -- error names --------------------------------------------------------------------------------


def test_refusals_keep_chain_names_and_name_sdk_codes():
    named = bt.ChainError("too fast", "RateLimitExceeded")
    assert refusal(named, "m").reason == "RateLimitExceeded"
    assert (
        refusal(named, "m", aliases={"RateLimitExceeded": "SettingWeightsTooFast"}).reason
        == "SettingWeightsTooFast"
    )
    coded = bt.ChainError("not registered", code=bt.ErrorCode.NOT_REGISTERED)
    assert refusal(coded, "m", {bt.ErrorCode.NOT_REGISTERED: "HotKeyNotRegisteredInSubNet"}).reason == (
        "HotKeyNotRegisteredInSubNet"
    )
    assert refusal(coded, "m").reason == "not_registered"
    assert refusal(None, "dropped").reason == "unknown"


def test_registration_waits_out_a_full_block(tmp_path):
    h = make_subtensor_harness(tmp_path, replace(TEST_HYPERPARAMETERS, max_registrations_per_block=1))
    first, second = h.new_wallet("first"), h.new_wallet("second")
    h.chain.register(first)
    start = h.local.block()
    clock = LocalChain(h.local.path, netuid=1)  # its own connection, as another process would have
    ticker = threading.Timer(0.3, clock.advance, args=(1,))
    ticker.start()
    try:
        assert h.chain.register(second) == 1
    finally:
        ticker.join()
    assert h.chain.metagraph().neurons[1].registered_at == start + 1


def test_chain_refusals_reach_the_caller_by_name(tmp_path):
    h = make_subtensor_harness(tmp_path)
    owner, thief = h.new_wallet("owner"), h.new_wallet("thief")
    h.chain.register(owner)
    hijack = SimpleNamespace(coldkey=thief.coldkey, coldkeypub=thief.coldkeypub, hotkey=owner.hotkey)
    with pytest.raises(ChainError) as refused:
        h.chain.add_stake(hijack, 1.0)
    assert refused.value.reason == "NonAssociatedColdKey"
