"""The subnet owner's hotkey on the embedded chain: who may name it, and what Yuma grants its uid."""

from __future__ import annotations

from dataclasses import replace

import pytest
from support.local_harness import OWNER_WALLET, TEST_HYPERPARAMETERS, make_local_harness

from distrai.chain.base import ChainError
from distrai.chain.local_calls import SN_OWNER_HOTKEY_RATE_LIMIT
from distrai.node.wallets import create_dev_wallet


def test_only_the_owner_coldkey_names_the_owner_hotkey_once_per_rate_limit(tmp_path):
    h = make_local_harness(tmp_path)
    owner, stranger = h.owner(), h.new_wallet("stranger")
    assert h.chain.subnet_owner_hotkey() == owner.hotkey.ss58_address
    with pytest.raises(ChainError) as refused:
        h.chain.set_subnet_owner_hotkey(stranger, stranger.hotkey.ss58_address)
    assert refused.value.reason == "BadOrigin"
    with pytest.raises(ChainError) as malformed:
        h.chain.set_subnet_owner_hotkey(owner, "not-an-address")
    assert malformed.value.reason == "BadHotkey"
    h.advance(1)  # a change at block 0 would read as "never changed", as in subtensor
    h.chain.set_subnet_owner_hotkey(owner, stranger.hotkey.ss58_address)
    assert h.chain.subnet_owner_hotkey() == stranger.hotkey.ss58_address
    h.advance(SN_OWNER_HOTKEY_RATE_LIMIT - 1)
    with pytest.raises(ChainError) as again:
        h.chain.set_subnet_owner_hotkey(owner, owner.hotkey.ss58_address)
    assert again.value.reason == "TxRateLimitExceeded"
    h.advance(1)
    h.chain.set_subnet_owner_hotkey(owner, owner.hotkey.ss58_address)
    assert h.chain.subnet_owner_hotkey() == owner.hotkey.ss58_address


def test_the_owner_hotkey_sets_weights_without_permit_or_stake_and_holds_a_permit(tmp_path):
    h = make_local_harness(tmp_path, replace(TEST_HYPERPARAMETERS, stake_threshold=10.0))
    owner = h.owner()
    second, _ = create_dev_wallet(OWNER_WALLET, "second", str(h.wallet_path))  # the owner's coldkey too
    validator, weak, miner = (h.new_wallet(n) for n in ("validator", "weak", "miner"))
    for wallet in (owner, second, validator, weak, miner):
        h.chain.register(wallet)
    h.add_stake(validator, 100.0)
    h.add_stake(weak, 5.0)
    h.add_stake(second, 50.0)

    # Before any epoch no uid holds a permit. The owner's hotkey, without stake, may vote anyway;
    # the others are refused in subtensor's order: stake first, then the permit.
    h.chain.set_weights(owner, [0, 4], [0.5, 0.5])
    with pytest.raises(ChainError) as weak_refused:
        h.chain.set_weights(weak, [4], [1.0])
    assert weak_refused.value.reason == "NotEnoughStakeToSetWeights"
    with pytest.raises(ChainError) as unpermitted:
        h.chain.set_weights(validator, [4], [1.0])
    assert unpermitted.value.reason == "NeuronNoValidatorPermit"

    h.advance(TEST_HYPERPARAMETERS.tempo + 2)
    permits = [n.validator_permit for n in h.chain.metagraph().neurons]
    # The owner hotkey's uid holds a permit with no stake; the owner's other hotkey earns one by
    # its stake like anyone; stake below the threshold earns none.
    assert permits == [True, True, True, False, False]

    # Naming another hotkey moves the permit: the first one has no stake to earn it.
    h.chain.set_subnet_owner_hotkey(owner, second.hotkey.ss58_address)
    h.advance(TEST_HYPERPARAMETERS.tempo + 1)
    assert [n.validator_permit for n in h.chain.metagraph().neurons] == [False, True, True, False, False]


def test_incentive_on_any_hotkey_of_the_owner_coldkey_is_burned(tmp_path):
    h = make_local_harness(tmp_path)
    owner = h.owner()
    second, _ = create_dev_wallet(OWNER_WALLET, "second", str(h.wallet_path))
    validator, miner = h.new_wallet("validator"), h.new_wallet("miner")
    for wallet in (owner, second, validator, miner):
        h.chain.register(wallet)
    h.add_stake(validator, 100.0)
    h.advance(TEST_HYPERPARAMETERS.tempo + 2)
    h.chain.set_weights(validator, [0, 1, 3], [0.25, 0.25, 0.5])
    h.advance(TEST_HYPERPARAMETERS.tempo + 1)
    neurons = h.chain.metagraph().neurons
    assert neurons[0].incentive == pytest.approx(0.25, abs=1e-4)
    assert neurons[1].incentive == pytest.approx(0.25, abs=1e-4)
    assert (neurons[0].emission, neurons[1].emission) == (0.0, 0.0)
    assert neurons[3].emission > 0 and h.chain.subnet_info()["burned"] > 0
