"""One set of behaviours every `Chain` implementation must show, run against each of them."""

from __future__ import annotations

import pytest
from support.local_harness import make_local_harness

from distrai.chain.base import ChainError

HARNESSES = {"embedded": make_local_harness}
try:
    from support.subtensor_harness import make_subtensor_harness

    HARNESSES["bittensor"] = make_subtensor_harness
except ImportError:  # the adapter's harness lives beside the adapter; without it only the embedded chain runs
    pass


@pytest.fixture(params=sorted(HARNESSES))
def harness(request, tmp_path):
    return HARNESSES[request.param](tmp_path)


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


def test_subnet_owner_is_the_coldkey_the_subnet_was_created_with(harness):
    assert harness.chain.subnet_owner() == harness.local.subnet_owner()
    assert harness.chain.subnet_owner() == harness.owner_coldkey
