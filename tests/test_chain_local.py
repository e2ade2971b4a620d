"""The embedded chain's own guarantees: signed writes, nonces, pruning, limits, epochs, persistence."""

from __future__ import annotations

import dataclasses
import sqlite3

import pytest
from bittensor.keyfiles import Keypair
from support.local_harness import TEST_HYPERPARAMETERS, make_local_harness

from distrai.chain import local_db
from distrai.chain.base import ChainError
from distrai.chain.local import LocalChain
from distrai.chain.signing import SignedExtrinsic, encode_payload, sign_extrinsic


@pytest.fixture
def h(tmp_path):
    return make_local_harness(tmp_path)


def test_forged_signature_is_refused(h):
    owner, thief = h.new_wallet("owner"), h.new_wallet("thief")
    h.chain.register(owner)
    payload = encode_payload(
        h.chain.genesis, "set_commitment", {"data": "evil"}, owner.hotkey.ss58_address, 0
    )
    forged = SignedExtrinsic(payload, bytes(thief.hotkey.sign(payload)))
    with pytest.raises(ChainError) as refused:
        h.chain.apply(forged)
    assert refused.value.reason == "BadSignature"
    assert h.chain.commitments() == {}


def test_tampered_payload_is_refused(h):
    wallet = h.new_wallet("m")
    h.chain.register(wallet)
    ext = sign_extrinsic(wallet.hotkey, h.chain.genesis, "set_commitment", {"data": "a"}, 0)
    tampered = SignedExtrinsic(ext.payload.replace(b'"a"', b'"b"'), ext.signature)
    with pytest.raises(ChainError) as refused:
        h.chain.apply(tampered)
    assert refused.value.reason == "BadSignature"


def test_replayed_extrinsic_is_refused(h):
    wallet = h.new_wallet("m")
    h.chain.register(wallet)
    ext = sign_extrinsic(wallet.hotkey, h.chain.genesis, "set_commitment", {"data": "once"}, 0)
    h.chain.apply(ext)
    h.advance(2)
    with pytest.raises(ChainError) as replay:
        h.chain.apply(ext)
    assert replay.value.reason == "StaleNonce"


def test_extrinsic_for_another_chain_is_refused(h, tmp_path):
    other = LocalChain.create(tmp_path / "other.db", block_time=1000.0)
    wallet = h.new_wallet("m")
    h.chain.register(wallet)
    ext = sign_extrinsic(wallet.hotkey, other.genesis, "set_commitment", {"data": "x"}, 0)
    with pytest.raises(ChainError) as refused:
        h.chain.apply(ext)
    assert refused.value.reason == "BadGenesis"


def test_only_the_coldkey_owner_can_stake_or_reregister_a_hotkey(h):
    wallet, other = h.new_wallet("a"), h.new_wallet("b")
    h.chain.register(wallet)
    with pytest.raises(ChainError) as stake:
        h.chain.submit(other.coldkey, "add_stake", hotkey=wallet.hotkey.ss58_address, amount=5.0)
    assert stake.value.reason == "NonAssociatedColdKey"
    with pytest.raises(ChainError) as twice:
        h.chain.submit(wallet.coldkey, "burned_register", hotkey=wallet.hotkey.ss58_address)
    assert twice.value.reason == "HotKeyAlreadyRegisteredInSubNet"


def test_registrations_per_block_are_limited(tmp_path):
    hp = dataclasses.replace(TEST_HYPERPARAMETERS, max_registrations_per_block=2)
    h = make_local_harness(tmp_path, hp)
    wallets = [h.new_wallet(f"w{i}") for i in range(3)]
    for w in wallets[:2]:
        h.chain.submit(w.coldkey, "burned_register", hotkey=w.hotkey.ss58_address)
    with pytest.raises(ChainError) as limited:
        h.chain.submit(wallets[2].coldkey, "burned_register", hotkey=wallets[2].hotkey.ss58_address)
    assert limited.value.reason == "TooManyRegistrationsThisBlock"
    h.advance(1)
    assert h.chain.submit(wallets[2].coldkey, "burned_register", hotkey=wallets[2].hotkey.ss58_address) == 2


def test_full_subnet_prunes_the_lowest_non_immune_neuron(tmp_path):
    hp = dataclasses.replace(TEST_HYPERPARAMETERS, max_uids=3, immunity_period=5, tempo=4)
    h = make_local_harness(tmp_path, hp)
    validator, good, bad = (h.new_wallet(n) for n in ("v", "good", "bad"))
    for w in (validator, good, bad):
        h.chain.register(w)
    h.add_stake(validator, 100.0)
    h.advance(6)
    h.chain.set_weights(validator, [1], [1.0])
    h.advance(6)
    newcomer = h.new_wallet("new")
    assert h.chain.register(newcomer) == 2
    mg = h.chain.metagraph()
    assert mg.hotkeys == [
        validator.hotkey.ss58_address,
        good.hotkey.ss58_address,
        newcomer.hotkey.ss58_address,
    ]
    immune = h.new_wallet("too-soon")
    assert h.chain.register(immune) != 2


def test_weights_are_stored_as_u16_and_checked(h):
    v, *miners = (h.new_wallet(n) for n in ("v", "m1", "m2", "m3"))
    for w in (v, *miners):
        h.chain.register(w)
    h.add_stake(v, 10.0)
    h.advance(TEST_HYPERPARAMETERS.tempo + 2)
    with pytest.raises(ChainError) as dup:
        h.chain.submit(v.hotkey, "set_weights", uids=[1, 1], weights=[10, 10], version_key=0)
    assert dup.value.reason == "DuplicateUids"
    with pytest.raises(ChainError) as invalid:
        h.chain.submit(v.hotkey, "set_weights", uids=[1, 9], weights=[10, 10], version_key=0)
    assert invalid.value.reason == "UidVecContainInvalidOne"
    h.chain.set_weights(v, [1, 2, 3], [0.5, 0.25, 0.25])
    stored = h.chain.weights()[0]
    assert stored == pytest.approx({1: 0.5, 2: 0.25, 3: 0.25}, abs=1e-4)


def test_max_weight_limit_and_min_allowed_weights(tmp_path):
    hp = dataclasses.replace(TEST_HYPERPARAMETERS, max_weight_limit=0.5, min_allowed_weights=2)
    h = make_local_harness(tmp_path, hp)
    v, m1, m2 = (h.new_wallet(n) for n in ("v", "m1", "m2"))
    for w in (v, m1, m2):
        h.chain.register(w)
    h.add_stake(v, 10.0)
    h.advance(hp.tempo + 2)
    with pytest.raises(ChainError) as short:
        h.chain.set_weights(v, [1], [1.0])
    assert short.value.reason == "WeightVecLengthIsLow"
    with pytest.raises(ChainError) as heavy:
        h.chain.set_weights(v, [1, 2], [0.8, 0.2])
    assert heavy.value.reason == "MaxWeightExceeded"
    h.chain.set_weights(v, [1, 2], [0.5, 0.5])
    assert h.chain.weights()[0] == pytest.approx({1: 0.5, 2: 0.5}, abs=1e-4)


def test_state_survives_reopening_from_another_handle(h):
    wallet = h.new_wallet("m")
    h.chain.register(wallet)
    h.chain.commit(wallet, "hello")
    again = LocalChain(h.chain.path, 1)
    assert again.metagraph().hotkeys == [wallet.hotkey.ss58_address]
    assert again.commitment(wallet.hotkey.ss58_address).data == "hello"
    assert again.genesis == h.chain.genesis


def test_emission_accumulates_and_sums_to_issuance(h):
    v, m = h.new_wallet("v"), h.new_wallet("m")
    h.chain.register(v)
    h.chain.register(m)
    h.add_stake(v, 50.0)
    h.advance(TEST_HYPERPARAMETERS.tempo + 2)
    h.chain.set_weights(v, [1], [1.0])
    start = h.chain.subnet_info()["last_epoch_block"]
    h.advance(3 * (TEST_HYPERPARAMETERS.tempo + 1))
    info = h.chain.subnet_info()
    issued = info["emission_per_block"] * info["last_epoch_block"]
    earned = (
        sum(n.total_emission for n in h.chain.metagraph().neurons) + info["owner_emission"] + info["burned"]
    )
    assert earned == pytest.approx(issued)
    assert info["last_epoch_block"] > start
    assert h.chain.metagraph().neurons[1].total_emission > 0


def test_opening_a_missing_chain_names_the_problem(tmp_path):
    with pytest.raises(ChainError) as missing:
        LocalChain(tmp_path / "nope.db")
    assert missing.value.reason == "NoChain"
    (tmp_path / "junk.db").write_bytes(b"not a database at all" * 100)
    with pytest.raises(ChainError) as junk:
        LocalChain(tmp_path / "junk.db")
    assert junk.value.reason == "NoChain"


def test_malformed_extrinsics_are_refused(h):
    kp = Keypair.create_from_uri("//Alice")
    bad_json = SignedExtrinsic(b"{not json", bytes(kp.sign(b"{not json")))
    with pytest.raises(ChainError) as refused:
        h.chain.apply(bad_json)
    assert refused.value.reason == "BadPayload"
    ext = sign_extrinsic(kp, h.chain.genesis, "mint_tokens", {"amount": 10}, 0)
    with pytest.raises(ChainError) as unknown:
        h.chain.apply(ext)
    assert unknown.value.reason == "UnknownCall"
    wrong_args = sign_extrinsic(kp, h.chain.genesis, "set_commitment", {"text": "x"}, 0)
    with pytest.raises(ChainError) as args:
        h.chain.apply(wrong_args)
    assert args.value.reason == "BadArguments"


def test_a_write_that_waits_past_the_busy_timeout_is_refused_and_lands_later(h, monkeypatch):
    """Another process holding the file's write lock longer than a write will wait: the write is a
    named refusal (as a node refuses a call it cannot take), not a raw sqlite error, and goes
    through once the lock is let go."""
    miner = h.new_wallet("miner")
    h.chain.register(miner)
    monkeypatch.setattr(local_db, "BUSY_TIMEOUT_S", 0.2)
    impatient = LocalChain(h.chain.path, h.chain.netuid)
    holder = sqlite3.connect(str(h.chain.path), isolation_level=None)
    holder.execute("BEGIN EXCLUSIVE")
    try:
        with pytest.raises(ChainError) as locked:
            impatient.commit(miner, "s3://bucket/miner")
        assert locked.value.reason == "ChainLocked" and "locked by another process" in locked.value.detail
    finally:
        holder.execute("ROLLBACK")
        holder.close()
    impatient.commit(miner, "s3://bucket/miner")
    assert h.chain.commitments()[miner.hotkey.ss58_address].data == "s3://bucket/miner"
