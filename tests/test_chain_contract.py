"""One set of behaviours every `Chain` implementation must show, run against each of them."""

from __future__ import annotations

import time
from dataclasses import replace

import pytest
from support.local_harness import TEST_HYPERPARAMETERS, make_local_harness

from distrai.chain.base import ChainError

HARNESSES = {"embedded": make_local_harness}
try:
    from support.subtensor_harness import make_subtensor_harness

    HARNESSES["bittensor"] = make_subtensor_harness
except ImportError:  # the adapter's harness lives beside the adapter; without it only the embedded chain runs
    pass


@pytest.fixture(params=sorted(HARNESSES))
def make_harness(request):
    return HARNESSES[request.param]


@pytest.fixture
def harness(make_harness, tmp_path):
    return make_harness(tmp_path)


def next_epoch(harness) -> None:
    """Advance past the next epoch block of the subnet."""
    tempo = harness.chain.hyperparameters().tempo
    harness.advance(tempo + 2)


def test_register_assigns_uids_in_order_and_is_idempotent(harness):
    wallets = [harness.new_wallet(f"w{i}") for i in range(3)]
    uids = [harness.chain.register(w) for w in wallets]
    assert uids == [0, 1, 2]
    assert harness.chain.register(wallets[1]) == 1
    mg = harness.chain.metagraph()
    assert mg.hotkeys == [w.hotkey.ss58_address for w in wallets]
    assert [n.coldkey for n in mg.neurons] == [w.coldkeypub.ss58_address for w in wallets]


def test_stake_shows_in_metagraph(harness):
    wallet = harness.new_wallet("v")
    harness.chain.register(wallet)
    harness.add_stake(wallet, 250.0)
    neuron = harness.chain.metagraph().neuron(wallet.hotkey.ss58_address)
    assert neuron is not None and neuron.stake == pytest.approx(250.0)


def test_commitments_roundtrip_and_refusals(harness):
    wallet, stranger = harness.new_wallet("m"), harness.new_wallet("stranger")
    harness.chain.register(wallet)
    harness.chain.commit(wallet, "file:///tmp/bucket")
    commitment = harness.chain.commitment(wallet.hotkey.ss58_address)
    assert commitment is not None and commitment.data == "file:///tmp/bucket"
    assert commitment.block <= harness.chain.block()
    with pytest.raises(ChainError) as refused:
        harness.chain.commit(stranger, "s3://nope")
    assert refused.value.reason == "HotKeyNotRegisteredInSubNet"
    harness.advance(2)
    with pytest.raises(ChainError) as too_big:
        harness.chain.commit(wallet, "x" * (harness.chain.hyperparameters().commitment_max_bytes + 1))
    assert too_big.value.reason == "SpaceLimitExceeded"
    assert harness.chain.commitment(wallet.hotkey.ss58_address).data == "file:///tmp/bucket"


def test_set_weights_rules(harness):
    validator, miner, stranger = (harness.new_wallet(n) for n in ("val", "miner", "stranger"))
    v_uid, m_uid = harness.chain.register(validator), harness.chain.register(miner)
    with pytest.raises(ChainError) as unregistered:
        harness.chain.set_weights(stranger, [m_uid], [1.0])
    assert unregistered.value.reason == "HotKeyNotRegisteredInSubNet"
    with pytest.raises(ChainError) as no_permit:
        harness.chain.set_weights(validator, [m_uid], [1.0])
    assert no_permit.value.reason == "NeuronNoValidatorPermit"

    harness.add_stake(validator, 1000.0)
    next_epoch(harness)
    assert harness.chain.metagraph().neurons[v_uid].validator_permit
    harness.chain.set_weights(validator, [v_uid, m_uid], [0.25, 0.75])
    assert harness.chain.weights()[v_uid] == pytest.approx({v_uid: 0.25, m_uid: 0.75}, abs=1e-4)
    with pytest.raises(ChainError) as too_fast:
        harness.chain.set_weights(validator, [m_uid], [1.0])
    assert too_fast.value.reason == "SettingWeightsTooFast"

    next_epoch(harness)
    mg = harness.chain.metagraph()
    assert mg.neurons[m_uid].incentive > 0.5
    assert mg.neurons[v_uid].dividends == pytest.approx(1.0)
    assert mg.neurons[m_uid].emission > 0 and mg.neurons[v_uid].emission > 0


def test_block_hashes_are_fixed_once_produced_and_unknown_before(harness):
    harness.advance(3)
    now = harness.chain.block()
    past = harness.chain.block_hash(now - 1)
    assert past == harness.chain.block_hash(now - 1)
    assert past != harness.chain.block_hash(now)
    assert past.startswith("0x") and len(past) == 66
    with pytest.raises(ChainError) as future:
        harness.chain.block_hash(now + 5)
    assert future.value.reason == "BlockNotYetProduced"


def test_block_timestamps_step_by_the_block_time_and_reach_past_the_head(harness):
    harness.advance(3)
    now = harness.chain.block()
    step = harness.chain.block_time()
    head = harness.chain.block_timestamp(now)
    assert head <= time.time()
    assert harness.chain.block_timestamp(now - 1) == pytest.approx(head - step, abs=1e-3)
    # a block not yet produced: the head's timestamp and one block time per block in between
    assert harness.chain.block_timestamp(now + 4) == pytest.approx(head + 4 * step, abs=1e-3)
    # a commitment made now lands `inclusion_blocks` after the head at the latest
    wallet = harness.new_wallet("m")
    harness.chain.register(wallet)
    before = harness.chain.block()
    harness.chain.commit(wallet, "file:///tmp/bucket")
    landed = harness.chain.commitment(wallet.hotkey.ss58_address).block
    assert before <= landed <= before + harness.chain.inclusion_blocks


def test_subnet_owner_is_the_coldkey_the_subnet_was_created_with(harness):
    assert harness.chain.subnet_owner() == harness.local.subnet_owner()
    assert harness.chain.subnet_owner() == harness.owner_coldkey


def test_subnet_owner_hotkey_is_the_one_the_subnet_names(make_harness, tmp_path):
    named = make_harness(tmp_path / "named")
    assert named.chain.subnet_owner_hotkey() == named.owner_hotkey == named.owner().hotkey.ss58_address
    unnamed = make_harness(tmp_path / "unnamed", owner_hotkey=False)
    assert unnamed.chain.subnet_owner_hotkey() == ""


def test_commitments_read_as_they_stood_at_a_past_block(harness):
    early, late = harness.new_wallet("early"), harness.new_wallet("late")
    harness.chain.register(early)
    harness.advance(1)
    harness.chain.commit(early, "first")
    first = harness.chain.block()
    harness.advance(2)
    harness.chain.register(late)
    harness.chain.commit(early, "second")
    harness.chain.commit(late, "late")
    now = harness.chain.block()

    def data(commitments) -> dict[str, str]:
        return {hotkey: c.data for hotkey, c in commitments.items()}

    assert data(harness.chain.commitments(first - 1)) == {}
    at_first = harness.chain.commitments(first)
    assert data(at_first) == {early.hotkey.ss58_address: "first"}
    assert at_first[early.hotkey.ss58_address].block == first
    assert data(harness.chain.commitments(now - 1)) == {early.hotkey.ss58_address: "first"}
    current = {early.hotkey.ss58_address: "second", late.hotkey.ss58_address: "late"}
    assert data(harness.chain.commitments(now)) == data(harness.chain.commitments()) == current
    with pytest.raises(ChainError) as future:
        harness.chain.commitments(now + 1)
    assert future.value.reason == "BlockNotYetProduced"


def test_commitments_at_a_block_are_those_of_hotkeys_registered_then(make_harness, tmp_path):
    h = make_harness(tmp_path, replace(TEST_HYPERPARAMETERS, max_uids=2, immunity_period=1))
    pruned, kept, newcomer = (h.new_wallet(n) for n in ("pruned", "kept", "newcomer"))
    h.chain.register(pruned)
    h.chain.register(kept)
    h.advance(2)
    h.chain.commit(pruned, "gone later")
    h.chain.commit(kept, "still here")
    before = h.chain.block()
    h.advance(2)
    assert h.chain.register(newcomer) == 0  # the subnet is full: uid 0, registered first, is replaced
    assert {c.data for c in h.chain.commitments(before).values()} == {"gone later", "still here"}
    assert {c.data for c in h.chain.commitments().values()} == {"still here"}


def test_registrations_read_as_they_stood_at_a_past_block(make_harness, tmp_path):
    h = make_harness(tmp_path, replace(TEST_HYPERPARAMETERS, max_uids=2, immunity_period=1))
    pruned, kept, newcomer = (h.new_wallet(n) for n in ("pruned", "kept", "newcomer"))
    h.chain.register(pruned)
    h.chain.register(kept)
    h.advance(2)
    before = h.chain.block()
    h.advance(1)
    assert h.chain.register(newcomer) == 0
    hk = {w: w.hotkey.ss58_address for w in (pruned, kept, newcomer)}
    assert h.chain.registrations(before) == {hk[pruned]: 0, hk[kept]: 1}
    assert h.chain.registrations() == h.chain.registrations(h.chain.block()) == {hk[newcomer]: 0, hk[kept]: 1}
    with pytest.raises(ChainError) as future:
        h.chain.registrations(h.chain.block() + 1)
    assert future.value.reason == "BlockNotYetProduced"


def test_all_zero_weights_are_refused_by_name(harness):
    validator, miner = harness.new_wallet("val"), harness.new_wallet("miner")
    v_uid, m_uid = harness.chain.register(validator), harness.chain.register(miner)
    harness.add_stake(validator, 1000.0)
    next_epoch(harness)
    with pytest.raises(ChainError) as refused:
        harness.chain.set_weights(validator, [v_uid, m_uid], [0.0, 0.0])
    assert refused.value.reason == "WeightVecLengthIsLow"
