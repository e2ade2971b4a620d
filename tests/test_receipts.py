"""Replay receipts (validators/receipts.py): a validator's replay leaves a receipt no skipper can
write; another validator that draws it replays the segment again and confirms it, or refutes a
receipt that no replay backs; a share of the replays left without receipt or finding is not paid.

The miner is the project's own inner loop and reveal (tests/test_validator_replay.py), its store a
real file store; the receipts travel signed through the catcher's real store."""

from __future__ import annotations

import dataclasses
import math

import pytest
import torch
from support.short_windows import short_windows
from test_validator_findings import CATCHER, CHECKER, basis_of, fresh, signed_manifest
from test_validator_replay import CONFIG, MINER, WINDOW, publish, train

from distrai.protocol.globalmodel import GlobalModel
from distrai.protocol.layout import receipts_key
from distrai.protocol.run import load_run_config
from distrai.protocol.runtime import build_runtime
from distrai.protocol.sync import StoreCache
from distrai.store import FileStore
from distrai.train.outer import OuterState
from distrai.train.sketch import sketch
from distrai.wire.window_documents import Receipt, ReplayReceipts
from validators.held_window import held_window
from validators.published import OthersWindow
from validators.receipts import (
    CONFIRMED,
    NOT_RECHECKED,
    REFUTED,
    own_receipts,
    read_receipts,
    receipt_distance,
    receipt_draw,
    recheck_receipt,
    signed_receipts,
    uncovered,
)
from validators.replay_check import receipt_seed, verify_challenge

SEGMENTS = [0, 1, 2, 3]
CATCHER_HK, CHECKER_HK = CATCHER.ss58_address, CHECKER.ss58_address


@pytest.fixture(scope="module")
def runtime():
    """The adversary config's run, its windows 4 one-step segments (`short_windows`)."""
    return build_runtime(short_windows(load_run_config(CONFIG)))


@pytest.fixture(scope="module")
def model(runtime):
    return GlobalModel(WINDOW, runtime.initial_params(), OuterState(momentum={}))


@pytest.fixture(scope="module")
def window(runtime, model, module_folders):
    """An honest miner's window in its store, replayed by the catcher (receipts kept), and the window
    as the catcher and the checker hold it; both share the miner's replays."""
    store = FileStore(module_folders("receipts") / "miner")
    trained = train(runtime, model)
    cheap = signed_manifest(publish(runtime, store, trained))
    store.put_blob(cheap.blob)
    shares = {CATCHER_HK: [MINER], CHECKER_HK: [MINER]}
    basis = basis_of(runtime, model, store, cheap, shares)
    replayed = fresh(cheap)
    replayed.update = cheap.update
    verify_challenge(basis, replayed, store, SEGMENTS, basis.sample(MINER), receipt_for=CATCHER_HK)
    assert replayed.passed, replayed.verdicts
    catcher = held_window(basis, [replayed], {MINER: store})
    checker = held_window(basis, [fresh(cheap)], {MINER: store})
    return catcher, checker, cheap, trained


def test_a_replay_leaves_a_receipt_per_segment_under_its_own_key(runtime, window):
    catcher, _, cheap, _ = window
    receipts = own_receipts(catcher, CATCHER_HK)
    assert [(r.miner, r.segment) for r in receipts] == [(MINER, s) for s in SEGMENTS]
    assert all(len(r.sketch) == runtime.inner.sketch_size for r in receipts)
    # not the miner's committed sketch of the same end: another key
    for r in receipts:
        committed = cheap.manifest.boundaries[r.segment + 1].sketch
        assert r.sketch != committed
    keys = {receipt_seed(catcher.basis, v, MINER, 1) for v in (CATCHER_HK, CHECKER_HK)}
    assert len(keys) == 2, "each validator's receipt has its own key"


def test_a_receipt_is_confirmed_by_another_validators_replay(runtime, window):
    catcher, checker, _, _ = window
    receipt = own_receipts(catcher, CATCHER_HK)[2]
    result = recheck_receipt(checker, CATCHER_HK, receipt, 0.0)
    assert result.outcome == CONFIRMED, result
    assert (result.validator, result.miner, result.segment) == (CATCHER_HK, MINER, 2)


def test_receipts_no_replay_backs_are_refuted(runtime, window):
    """What a validator can write without replaying: the miner's committed sketch of the segment's
    end, the sketch of the segment's start under the receipt's key (it has the start), or zeros."""
    catcher, checker, cheap, trained = window
    receipt = own_receipts(catcher, CATCHER_HK)[1]
    revealed = trained.states[runtime.inner.segment_steps]  # segment 1's start, in the miner's store
    no_movement = sketch(
        revealed.params, receipt_seed(checker.basis, CATCHER_HK, MINER, 1), len(receipt.sketch)
    )
    fakes = {
        "committed": cheap.manifest.boundaries[2].sketch,
        "start": no_movement.tolist(),
        "zeros": [0.0] * len(receipt.sketch),
    }
    for name, numbers in fakes.items():
        result = recheck_receipt(checker, CATCHER_HK, receipt.model_copy(update={"sketch": numbers}), 0.0)
        assert result.outcome == REFUTED, (name, result)
        assert "no replay of the segment reached it" in result.reason
    # the start is one whole movement away, far beyond any slack a tolerance allows
    mine = torch.tensor(receipt.sketch, dtype=torch.float64)
    assert receipt_distance(mine, no_movement, no_movement) == pytest.approx(1.0)
    slightly = (mine + 1e-6 * (mine - no_movement)).tolist()
    assert (
        recheck_receipt(checker, CATCHER_HK, receipt.model_copy(update={"sketch": slightly}), 0.0).outcome
        == REFUTED
    )
    assert (
        recheck_receipt(checker, CATCHER_HK, receipt.model_copy(update={"sketch": slightly}), 1e-5).outcome
        == CONFIRMED
    )


def test_a_receipt_copied_from_another_validator_is_refuted(runtime, window):
    """The checker replayed honestly and published its receipt; the catcher, which skipped, publishes
    the checker's numbers as its own. Each receipt is keyed by its author: a copy lies a whole
    movement and more away from the catcher's key's sketch of the same end."""
    catcher, checker, cheap, trained = window
    own = own_receipts(catcher, CATCHER_HK)[3]
    end = trained.states[4 * runtime.inner.segment_steps]
    checkers = sketch(end.params, receipt_seed(checker.basis, CHECKER_HK, MINER, 3), len(own.sketch)).tolist()
    assert (
        recheck_receipt(catcher, CHECKER_HK, own.model_copy(update={"sketch": checkers}), 0.0).outcome
        == CONFIRMED
    )
    copied = recheck_receipt(checker, CATCHER_HK, own.model_copy(update={"sketch": checkers}), 0.0)
    assert copied.outcome == REFUTED, copied


def test_a_receipt_outside_its_authors_share_is_not_rechecked(window):
    catcher, checker, _, _ = window
    receipt = own_receipts(catcher, CATCHER_HK)[0]
    held = dataclasses.replace(
        checker, basis=dataclasses.replace(checker.basis, shares={CHECKER_HK: [MINER]})
    )
    assert recheck_receipt(held, CATCHER_HK, receipt, 0.0).outcome == NOT_RECHECKED


def test_receipts_travel_signed_and_a_share_without_them_is_uncovered(runtime, window, tmp_path):
    catcher, checker, _, _ = window
    store = FileStore(tmp_path / "catcher")
    document = signed_receipts(CATCHER, runtime.run_id, WINDOW, own_receipts(catcher, CATCHER_HK))
    store.put(receipts_key(runtime.run_id, WINDOW, CATCHER_HK), document)
    others = OthersWindow(
        StoreCache(), {CATCHER_HK: store.url}, runtime.run_id, WINDOW, 1 << 20, lambda hk: True
    )
    read = read_receipts(others)
    assert [r.segment for r in read[CATCHER_HK].receipts] == SEGMENTS
    assert uncovered(checker, CHECKER_HK, read, set()) == frozenset()
    # one segment's receipt missing: the share is not covered, unless a finding names the miner
    partial = {CATCHER_HK: read[CATCHER_HK].model_copy(update={"receipts": read[CATCHER_HK].receipts[:-1]})}
    assert uncovered(checker, CHECKER_HK, partial, set()) == {CATCHER_HK}
    assert uncovered(checker, CHECKER_HK, {}, set()) == {CATCHER_HK}
    assert uncovered(checker, CHECKER_HK, {}, {(CATCHER_HK, MINER)}) == frozenset()
    # a receipt signed by another validator than the store's announcement names is not read
    forged = signed_receipts(CHECKER, runtime.run_id, WINDOW, own_receipts(catcher, CATCHER_HK))
    store.put(receipts_key(runtime.run_id, WINDOW, CATCHER_HK), forged)
    assert read_receipts(others) == {}


@pytest.mark.parametrize("rate", [1.0, 0.5])
def test_the_draw_reaches_every_receipt_at_the_rate_the_arithmetic_gives(rate):
    """validators/receipts.py, "What a skipped replay costs": at 16 validators with one receipt each,
    each re-checker draws a given receipt with probability rate/15, and all 15 miss it with
    (1 − rate/15)^15: 0.355 at 1, 0.601 at the GPU config's 0.5. Over 400 windows of seeds, the share
    of windows in which nobody drew the faker's receipt lies within four standard errors of that, and
    the receipts drawn per re-checker average the rate."""
    validators = [f"5{'V' * 46}{i:02d}" for i in range(16)]
    faker = validators[0]
    published = {
        v: ReplayReceipts(
            run_id="ab" * 32,
            window=WINDOW,
            validator=v,
            receipts=[Receipt(miner=f"5{'M' * 46}{i:02d}", segment=0, sketch=[1.0])],
        )
        for i, v in enumerate(validators)
    }
    windows, missed, drawn_in_all = 400, 0, 0
    for w in range(windows):
        seed = w.to_bytes(4, "big") * 8
        drawn = {v: receipt_draw(seed, v, published, rate) for v in validators[1:]}
        assert all(pair[0] != v for v, d in drawn.items() for pair in d), "only other validators' receipts"
        drawn_in_all += sum(len(d) for d in drawn.values())
        missed += not any(pair[0] == faker for d in drawn.values() for pair in d)
    p = (1 - rate / 15) ** 15
    assert abs(missed / windows - p) <= 4 * math.sqrt(p * (1 - p) / windows), missed
    checks = windows * 15
    assert abs(drawn_in_all / checks - rate) <= 4 * math.sqrt(rate * (1 - rate) / checks) + 1e-12, (
        drawn_in_all
    )
