"""Weights commit-reveal on the embedded chain: sealed commits, revealed by the chain at their epoch."""

from __future__ import annotations

import sqlite3
from dataclasses import replace

import pytest
from support.local_harness import TEST_HYPERPARAMETERS, make_local_harness

from distrai.chain import rules
from distrai.chain.base import ChainError
from distrai.chain.local_reveal import REVEAL_CALL, SealedCommit

U16_STEP = 1 / 65535
COMMIT_REVEAL = replace(TEST_HYPERPARAMETERS, commit_reveal_weights=True)


def advance_to(h, block: int) -> None:
    h.advance(block - h.local.block())


def next_epoch_block(h, after: int) -> int:
    hp = h.local.hyperparameters()
    return next(b for b in range(after + 1, after + hp.tempo + 2) if rules.is_epoch_block(b, 1, hp.tempo))


def subnet(tmp_path, **overrides):
    """A commit-reveal subnet with a permitted validator (uid 0) and two miners (uids 1, 2)."""
    h = make_local_harness(tmp_path, replace(COMMIT_REVEAL, **overrides))
    validator, *miners = (h.new_wallet(n) for n in ("validator", "m1", "m2"))
    for w in (validator, *miners):
        h.chain.register(w)
    h.add_stake(validator, 1000.0)
    advance_to(h, next_epoch_block(h, 0) + 1)
    assert h.chain.metagraph().neurons[0].validator_permit
    return h, validator


def reveals(h) -> list[tuple[int, str, int, str | None]]:
    with sqlite3.connect(h.local.path) as db:
        return db.execute(
            "SELECT block, signer, ok, error FROM extrinsics WHERE call = ? ORDER BY id", (REVEAL_CALL,)
        ).fetchall()


@pytest.mark.parametrize("period", [1, 2])
def test_weights_stay_sealed_until_their_reveal_epoch_then_drive_its_yuma(tmp_path, period):
    h, validator = subnet(tmp_path, commit_reveal_period=period)
    committed_at = h.local.block()
    epoch = rules.epoch_index(committed_at, 1, COMMIT_REVEAL.tempo)
    h.chain.set_weights(validator, [1, 2], [0.25, 0.75])
    assert h.local.sealed_commits() == [SealedCommit(validator.hotkey.ss58_address, epoch, committed_at)]
    assert h.local.weights() == {}
    assert h.chain.metagraph().neurons[0].last_update == committed_at  # the commit is the activity

    reveal_block = committed_at
    for _ in range(period):
        reveal_block = next_epoch_block(h, reveal_block)
    advance_to(h, reveal_block - 1)
    assert h.local.weights() == {} and len(h.local.sealed_commits()) == 1
    assert [n.incentive for n in h.chain.metagraph().neurons] == [0.0, 0.0, 0.0]

    h.advance(1)
    assert h.local.sealed_commits() == []
    assert h.local.weights()[0] == pytest.approx({1: 0.25, 2: 0.75}, abs=U16_STEP)
    # The epoch of the reveal block ran on the revealed weights.
    mg = h.chain.metagraph()
    assert h.local.subnet_info()["last_epoch_block"] == reveal_block
    assert [n.incentive for n in mg.neurons] == pytest.approx([0, 0.25, 0.75], abs=U16_STEP)
    assert mg.neurons[0].last_update == committed_at  # a reveal is not activity of its own
    assert reveals(h) == [(reveal_block, validator.hotkey.ss58_address, 1, None)]


def test_a_commit_in_an_epoch_block_belongs_to_the_epoch_that_block_fires(tmp_path):
    h, validator = subnet(tmp_path)
    fire = next_epoch_block(h, h.local.block())
    advance_to(h, fire)
    h.chain.set_weights(validator, [1, 2], [0.5, 0.5])
    (sealed,) = h.local.sealed_commits()
    assert sealed.commit_epoch == rules.epoch_index(fire, 1, COMMIT_REVEAL.tempo)
    # Not opened by the epoch that already fired in its block: by the next one.
    advance_to(h, next_epoch_block(h, fire) - 1)
    assert h.local.weights() == {}
    h.advance(1)
    assert 0 in h.local.weights()


def test_commit_reveal_refusals_are_named(tmp_path):
    h, validator = subnet(tmp_path)
    stranger = h.new_wallet("stranger")
    with pytest.raises(ChainError) as plain:
        h.local.submit(validator.hotkey, "set_weights", uids=[1, 2], weights=[1, 1], version_key=0)
    assert plain.value.reason == "CommitRevealEnabled"
    with pytest.raises(ChainError) as unregistered:
        h.chain.set_weights(stranger, [1, 2], [0.5, 0.5])
    assert unregistered.value.reason == "HotKeyNotRegisteredInSubNet"
    with pytest.raises(ChainError) as nothing:
        h.chain.set_weights(validator, [1, 2], [0.0, 0.0])
    assert nothing.value.reason == "WeightVecLengthIsLow"
    h.chain.set_weights(validator, [1, 2], [0.5, 0.5])
    h.advance(COMMIT_REVEAL.weights_rate_limit - 1)
    with pytest.raises(ChainError) as fast:
        h.chain.set_weights(validator, [1, 2], [0.5, 0.5])
    assert fast.value.reason == "CommittingWeightsTooFast"
    assert len(h.local.sealed_commits()) == 1


def test_at_most_ten_commits_wait_per_hotkey_and_epoch(tmp_path):
    h, validator = subnet(tmp_path, weights_rate_limit=0)
    for _ in range(10):
        h.chain.set_weights(validator, [1, 2], [0.5, 0.5])
    with pytest.raises(ChainError) as refused:
        h.chain.set_weights(validator, [1, 2], [0.5, 0.5])
    assert refused.value.reason == "TooManyUnrevealedCommits"
    assert len(h.local.sealed_commits()) == 10


def test_commits_are_refused_where_weights_are_set_directly(tmp_path):
    h = make_local_harness(tmp_path)
    validator = h.new_wallet("validator")
    h.chain.register(validator)
    with pytest.raises(ChainError) as refused:
        h.local.submit(validator.hotkey, "commit_weights", uids=[0], weights=[65535], version_key=0)
    assert refused.value.reason == "CommitRevealDisabled"


def test_a_commit_that_fails_the_weight_rules_at_its_reveal_is_dropped(tmp_path):
    h, validator = subnet(tmp_path)
    unpermitted = h.new_wallet("unpermitted")
    h.chain.register(unpermitted)  # uid 3, no stake: no permit
    h.advance(COMMIT_REVEAL.weights_rate_limit)  # registering starts the rate limit
    h.chain.set_weights(validator, [1, 2], [0.5, 0.5])
    h.chain.set_weights(unpermitted, [1, 2], [0.9, 0.1])
    reveal_block = next_epoch_block(h, h.local.block())
    advance_to(h, reveal_block)
    # Both opened; the validator's were applied, the other's dropped by name, and none is left.
    assert h.local.sealed_commits() == []
    assert sorted(h.local.weights()) == [0]
    assert reveals(h) == [
        (reveal_block, validator.hotkey.ss58_address, 1, None),
        (reveal_block, unpermitted.hotkey.ss58_address, 0, "NeuronNoValidatorPermit"),
    ]
