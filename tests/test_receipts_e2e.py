"""A validator that skips its replays, through the validators' own windows: two validators share the
replays of a window (the adversary config: every segment of every miner, each by both), one honest
and one `skipper` (`validators.leader_adversaries.Skipper`: receipts no replay backs). Each publishes its
receipts in its store; while checking the next window, the honest one replays a drawn receipt of the
skipper's again and refutes it, distrusts it for `ban_windows` and pays it no worker share, and the
skipper's re-check (its audit is honest code) confirms the honest one's. A validator that publishes
no receipts at all is not paid as a worker for the window, and nothing more.

One miner trains, commits and reveals the window; the chain is the embedded one, whose clock moves
only when the test moves it."""

from __future__ import annotations

import pytest
from support.short_windows import short_windows
from test_validator_outage import CONFIG, WINDOW, Ticking, train

from distrai.node.seat import Seat
from distrai.protocol.layout import receipts_key, report_key
from distrai.protocol.run import load_run_config
from distrai.protocol.runtime import build_runtime
from distrai.store import FileStore
from distrai.wire import open_document
from distrai.wire.window_documents import ReplayReceipts, WindowReport, parse_body
from validators.leader_adversaries import Skipper
from validators.receipts import CONFIRMED, REFUTED
from validators.shared_scoring import Pooled
from validators.validator import Validator, ValidatorOptions


@pytest.fixture(scope="module")
def validators(module_folders):
    root = module_folders("receipts")
    config = short_windows(load_run_config(CONFIG))
    harness, _ = train(root, config, {"alpha": "alpha"}, absent=("skipper",))
    made = {}
    for name, behaviour in (("skipper", Skipper()), ("validator", None)):
        store = FileStore(root / f"store-{name}")
        options = (
            ValidatorOptions(root / name) if behaviour is None else ValidatorOptions(root / name, behaviour)
        )
        made[name] = Validator(
            Seat(build_runtime(config), harness.chain, harness.new_wallet(name), store, store.url), options
        )
        assert made[name].run_window(WINDOW, Ticking(harness))
    return harness, made["validator"], made["skipper"]


def read(validator: Validator, key: str, model):
    data = validator.store.get(key, 1 << 24)
    return parse_body(model, open_document(data, max_bytes=1 << 24, is_registered=lambda _: True).body)


def test_both_publish_receipts_for_every_replayed_segment(validators):
    _, honest, skipper = validators
    for v in (honest, skipper):
        receipts = read(v, receipts_key(v.rt.run_id, WINDOW, v.hotkey), ReplayReceipts)
        assert receipts.validator == v.hotkey
        assert len(receipts.receipts) == 4, "every segment of the one miner (the config replays them all)"
        report = read(v, report_key(v.rt.run_id, WINDOW, v.hotkey), WindowReport)
        assert report.receipt_rechecks == [], "window 3 is the first either checked: nothing to re-check"


def test_the_honest_validator_refutes_a_skippers_receipt_and_stops_paying_it(validators, caplog):
    harness, honest, skipper = validators
    mg = harness.chain.metagraph()
    audit = honest.audit_replays(WINDOW, mg, [])
    (recheck,) = audit.rechecks  # replay_rechecks = 1
    assert (recheck.validator, recheck.outcome) == (skipper.hotkey, REFUTED), recheck
    assert "no replay of the segment reached it" in recheck.reason
    assert audit.uncovered == frozenset(), "the skipper published receipts for its whole share"
    state = honest.state
    with caplog.at_level("WARNING", logger="distrai.validator"):
        honest.fold_scores(
            WINDOW + 1, mg, [], [], Pooled({}, {}, workers=[honest.hotkey, skipper.hotkey]), audit
        )
    ban = honest.rt.config.scoring.ban_windows
    assert honest.state.workers == [honest.hotkey]
    assert honest.state.refuted_until[skipper.hotkey] == WINDOW + 2 + ban
    assert skipper.hotkey in honest.state.distrusted(WINDOW + 2), "its measurements are not taken either"
    assert "receipt for a replay of window 3 refuted" in caplog.text
    honest.state = state


def test_the_skipper_confirms_the_honest_receipt(validators):
    harness, honest, skipper = validators
    audit = skipper.audit_replays(WINDOW, harness.chain.metagraph(), [])
    (recheck,) = audit.rechecks
    assert (recheck.validator, recheck.outcome) == (honest.hotkey, CONFIRMED), recheck


def test_a_validator_that_publishes_no_receipts_is_not_paid_for_the_window(validators):
    harness, honest, skipper = validators
    mg = harness.chain.metagraph()
    key = receipts_key(skipper.rt.run_id, WINDOW, skipper.hotkey)
    kept = skipper.store.get(key, 1 << 24)
    skipper.store.delete(key)
    try:
        audit = honest.audit_replays(WINDOW, mg, [])
    finally:
        skipper.store.put(key, kept)
    assert audit.rechecks == [] and audit.uncovered == {skipper.hotkey}
    state = honest.state
    honest.fold_scores(WINDOW + 1, mg, [], [], Pooled({}, {}, workers=[honest.hotkey, skipper.hotkey]), audit)
    assert honest.state.workers == [honest.hotkey]
    assert skipper.hotkey not in honest.state.refuted_until, "skipping costs the window's pay, not a bar"
    honest.state = state
