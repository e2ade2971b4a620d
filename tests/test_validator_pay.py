"""A validator's pay that matures, through its real window: an honest miner's window of a run whose
scores mature two windows late is pending after the validator checks it (the report says so, the
moving average and the weight are 0: a fresh hotkey earns nothing before its first window matures),
and a catch before it matures forfeits it.

One miner trains, commits and reveals a window of the adversary config (every miner challenged) with
`maturity_windows` = 2; the validator checks it on the embedded chain, whose clock moves only when
the test moves it."""

from __future__ import annotations

import pytest
from test_validator_outage import CONFIG, WINDOW, Ticking, train

from distrai.node.seat import Seat
from distrai.protocol.layout import report_key
from distrai.protocol.run import load_run_config
from distrai.protocol.runtime import build_runtime
from distrai.store import FileStore
from distrai.wire import open_document
from distrai.wire.window_documents import MeasurementRecheck, WindowReport, parse_body
from validators.shared_scoring import REFUTED, Pooled
from validators.validator import Validator, ValidatorOptions
from validators.validator_state import Suspension

NOTHING_POOLED = Pooled(measurements={}, measured_by={})
"""A window with no measurement to pool: no miner passed, no validator re-checked."""

MATURITY = 2


@pytest.fixture(scope="module")
def checked(tmp_path_factory):
    root = tmp_path_factory.mktemp("pay")
    base = load_run_config(CONFIG)
    config = base.model_copy(
        update={"scoring": base.scoring.model_copy(update={"maturity_windows": MATURITY})}
    )
    harness, _ = train(root, config, {"alpha": "alpha"})
    store = FileStore(root / "store-validator")
    validator = Validator(
        Seat(build_runtime(config), harness.chain, harness.new_wallet("validator"), store, store.url),
        ValidatorOptions(root / "validator"),
    )
    assert validator.run_window(WINDOW, Ticking(harness))
    miner = harness.new_wallet("alpha").hotkey.ss58_address
    return harness, validator, store, miner


def test_a_checked_window_is_pending_not_paid_and_the_report_says_when_it_matures(checked):
    harness, validator, store, miner = checked
    data = store.get(report_key(validator.rt.run_id, WINDOW, validator.hotkey), 1 << 24)
    report = parse_body(
        WindowReport, open_document(data, max_bytes=1 << 24, is_registered=lambda _: True).body
    )
    entry = report.miners[miner]
    assert entry.score > 0 and entry.reason is None, entry
    assert entry.pay is not None
    assert (entry.pay.average, entry.pay.pending, entry.pay.matures_at) == (
        0.0,
        entry.score,
        WINDOW + MATURITY,
    )
    mg = harness.chain.metagraph()
    assert validator.state.averages[mg.uid_of(miner)] == 0.0
    weights = harness.chain.weights().get(mg.uid_of(validator.hotkey), {})
    assert weights.get(mg.uid_of(miner), 0.0) == 0.0, weights


def test_the_pending_window_matures_unless_a_catch_forfeits_it_first(checked):
    harness, validator, _, miner = checked
    mg = harness.chain.metagraph()
    uid, state = mg.uid_of(miner), validator.state
    score = state.pending[miner][0].score
    alpha = validator.rt.config.scoring.ema_alpha
    # two windows without this miner: its window matures at the second, at the moving average's rate
    validator.fold_scores(WINDOW + 1, mg, [], [], NOTHING_POOLED)
    assert validator.state.averages[uid] == 0.0 and validator.state.pending[miner][0].score == score
    validator.fold_scores(WINDOW + 2, mg, [], [], NOTHING_POOLED)
    assert validator.state.averages[uid] == pytest.approx(alpha * score)
    # the same windows with another validator's finding on it adopted first: nothing ever matures
    validator.state = state
    validator.fold_scores(WINDOW + 1, mg, [], [miner], NOTHING_POOLED)
    validator.fold_scores(WINDOW + 2, mg, [], [], NOTHING_POOLED)
    assert validator.state.averages[uid] == 0.0
    assert [e.window for e in validator.state.pending[miner]] == [WINDOW + 2]  # only what came after


def test_a_validator_whose_measurement_is_refuted_is_distrusted_for_the_ban_windows(checked):
    harness, validator, _, _ = checked
    mg = harness.chain.metagraph()
    state, ban = validator.state, validator.rt.config.scoring.ban_windows
    liar = harness.new_wallet("inventing-validator").hotkey.ss58_address
    refuted = MeasurementRecheck(
        validator=liar,
        miner=liar,
        window=WINDOW + 1,
        outcome=REFUTED,
        reason="measured here: drops 0.1 and 0.2",
    )
    validator.fold_scores(WINDOW + 1, mg, [], [], Pooled({}, {}, rechecks=[refuted]))
    assert validator.state.refuted_until[liar] == WINDOW + 2 + ban
    assert liar in validator.state.distrusted(WINDOW + 1 + ban)
    assert liar not in validator.state.distrusted(WINDOW + 2 + ban)
    validator.fold_scores(WINDOW + 2 + ban, mg, [], [], NOTHING_POOLED)
    assert liar not in validator.state.refuted_until, "a bar that ended is dropped"
    validator.state = state


def test_a_hold_the_validator_can_no_longer_read_again_is_lifted_not_made_a_bar(checked, caplog):
    """A validator held a miner for a withheld reveal of the window before the one it checked last,
    then restarted: the window it checked that miner against is gone, so it cannot read the reveal
    again. The hold is lifted, the miner's pending scores are kept, and the bar before it comes back
    (a chaos run in a fresh-clone CI run barred an honest miner for good this way)."""
    harness, validator, _, miner = checked
    state = validator.state
    mg = harness.chain.metagraph()
    before = state.banned_until.get(miner, -1)
    validator.state = state.model_copy(
        update={
            "suspended": {miner: Suspension(window=WINDOW - 1, banned_until=before)},
            "banned_until": {**state.banned_until, miner: WINDOW + 5},
        }
    )
    assert validator.held.window != WINDOW - 1, "the window the hold was made in is not held here"
    with caplog.at_level("WARNING", logger="distrai.validator"):
        validator.reread_withheld(WINDOW - 1, mg)
    assert miner not in validator.state.suspended
    assert validator.state.banned_until.get(miner, -1) == before
    assert validator.state.pending[miner] == state.pending[miner], "its held scores mature again"
    assert "hold cannot be read again here" in caplog.text and "bar lifted" in caplog.text
    validator.state = state
