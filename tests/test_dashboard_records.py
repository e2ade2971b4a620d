"""The dashboard's records, from reports, aggregates and the metagraph, by its pure functions; and
what it reads of the operator's own machine (metrics files, public wallet keys)."""

from __future__ import annotations

from dataclasses import replace

import pytest
from support.metrics_lines import line as metrics_line
from support.metrics_lines import train_record, write_lines

from distrai.chain.base import Metagraph, Neuron
from distrai.dashboard.nodes import NodeMetrics, wallet_labels
from distrai.dashboard.records import (
    HELDOUT_OFF,
    HELDOUT_PENDING,
    TEXT_CHARS,
    AggregateCheck,
    ChainState,
    RunInfo,
    WindowDocs,
    clip,
    miner_page,
    miner_row,
    run_view,
    stopped_note,
    validator_row,
    window_row,
)
from distrai.dashboard.words import CHECKS, explain, score_words
from distrai.node.metrics import Metrics
from distrai.node.wallets import create_dev_wallet
from distrai.protocol.standing import NO_AGGREGATE, standing
from distrai.wire.window_documents import MeasurementRecheck, ReceiptRecheck, WindowReport

V0, V1 = "5V0" + "a" * 45, "5V1" + "b" * 45
M0, M1 = "5M0" + "c" * 45, "5M1" + "d" * 45
OWNER = "5OW" + "e" * 45
LABELS = {V0: "validator0", V1: "validator1", M0: "miner0"}


def line(uid: int, score: float, reason: str | None = None, **numbers: float) -> dict:
    verdicts = {"manifest": "pass", "update": "pass"}
    if reason:
        verdicts["replay"] = reason
    return {
        "uid": uid,
        "verdicts": verdicts,
        "numbers": numbers,
        "score": score,
        "reason": reason and f"replay: {reason}",
    }


def report(validator: str, window: int, miners: dict, refused=(), rechecks=()) -> WindowReport:
    return WindowReport.model_validate(
        {
            "kind": "report",
            "run_id": "0" * 64,
            "window": window,
            "validator": validator,
            "observed_block": 0,
            "miners": miners,
            "refused": list(refused),
            "rechecks": list(rechecks),
        }
    )


def chain_state() -> ChainState:
    neurons = (
        Neuron(0, OWNER, "c", 0.0, True, 0, 0),
        Neuron(1, V0, "c", 3000.0, True, 0, 90),
        Neuron(2, V1, "c", 1000.0, True, 0, 80),
        Neuron(3, M0, "c", 0.0, True, 0, 0, incentive=0.6, emission=0.5, total_emission=4.0),
        Neuron(4, M1, "c", 0.0, False, 0, 0, incentive=0.4),
    )
    weights = {1: {3: 0.75, 4: 0.25}, 2: {3: 0.25, 4: 0.75}}
    return ChainState(block=200, metagraph=Metagraph(1, 200, neurons), weights=weights, owner_hotkey=OWNER)


def two_windows() -> list[WindowDocs]:
    """Window 5: both validators pass both miners, the leader takes both. Window 6: validator1
    replays M1 and rejects it; validator0 (the leader) passes it, and its aggregate takes it."""
    w5 = WindowDocs(
        5,
        reports={
            V0: report(V0, 5, {M0: line(3, 1.0, update_bytes=100.0), M1: line(4, 0.5, update_bytes=100.0)}),
            V1: report(V1, 5, {M0: line(3, 0.9, update_bytes=100.0), M1: line(4, 0.4, update_bytes=100.0)}),
        },
        aggregates={
            V0: AggregateCheck(V0, ((M0, 0.6), (M1, 0.4)), "h5"),
            V1: AggregateCheck(V1, ((M0, 0.6), (M1, 0.4)), "h5"),
        },
        leader=V0,
        tokens=1000,
        settled=True,
    )
    w6 = WindowDocs(
        6,
        reports={
            V0: report(V0, 6, {M0: line(3, 1.0, update_bytes=100.0), M1: line(4, 0.8, update_bytes=100.0)}),
            V1: report(
                V1,
                6,
                {
                    M0: line(3, 1.0, update_bytes=100.0),
                    M1: line(
                        4,
                        0.0,
                        "segment 2 differs",
                        update_bytes=100.0,
                        revealed_bytes=900.0,
                        replay_steps=15.0,
                        replay_seconds=2.0,
                    ),
                },
            ),
        },
        aggregates={
            V0: AggregateCheck(V0, ((M0, 0.5), (M1, 0.5)), "h6"),
            V1: AggregateCheck(V1, ((M0, 1.0),), "h6b"),
        },
        leader=V0,
        tokens=2000,
        settled=True,
    )
    return [w5, w6]


def test_a_miner_row_counts_the_global_models_windows_and_every_validators_rejections():
    row = miner_row(M1, two_windows(), chain_state(), LABELS, {M1: 0.8})
    assert (row.windows, row.accepted, row.rejected) == (2, 2, 1)
    assert row.last_rejection == "replay: segment 2 differs" and row.last_rejection_window == 6
    assert row.last_rejection_by == "validator1"
    assert row.last_score == 0.8 and row.mean_score == (0.5 + 0.8) / 2
    assert row.bytes_sent == 100 + 100 + 900
    assert row.weight == (3000 * 0.25 + 1000 * 0.75) / 4000
    assert row.label == M1[:8] + "…" and row.uid == 4 and row.utilization == 0.8


def test_a_validator_row_measures_its_agreement_with_the_followed_aggregate_and_its_replays():
    docs = two_windows()
    v1 = validator_row(V1, docs, chain_state(), LABELS, {})
    assert (v1.agreed, v1.compared, v1.led) == (1, 2, 0)
    assert (v1.checked, v1.replayed, v1.replay_steps, v1.replay_seconds) == (2, 1, 15, 2.0)
    assert v1.weights_set == 2 and v1.last_update == 80 and v1.stake == 1000.0 and v1.aggregates == 2
    v0 = validator_row(V0, docs, chain_state(), LABELS, {})
    assert (v0.agreed, v0.compared, v0.led) == (2, 2, 2)


def test_an_aggregate_followers_refuse_counts_against_no_agreement_and_names_its_problem():
    docs = two_windows()
    docs[1] = WindowDocs(
        6, docs[1].reports, {**docs[1].aggregates, V1: AggregateCheck(V1, problem="weights")}, V0
    )
    v1 = validator_row(V1, docs, chain_state(), LABELS, {})
    assert (v1.agreed, v1.compared, v1.aggregate_problem) == (1, 1, "weights")
    assert v1.aggregate_refusal == ("refused", "followers refuse it")


@pytest.mark.parametrize(
    "problem,word",
    [
        (
            "it leaves out the update of 5Cd4gWScAE… (passed as useful by 4000 of 7000 reporting stake, gain 0.8), "
            "and takes only 1 of 3 places",
            "censor",
        ),
        ("its aggregate takes 5Cd4… at 0.9, but its signed report's scores give 5Cd4… at 0.5", "liar"),
        ("it takes an update of 5Cd4 that the miner's signed manifest does not name", "liar"),
        (
            "it takes the update of 5Cd4…, which the signed reports of validators holding 4000 stake failed "
            "(5Hgp…) against 3000 that passed it",
            "outvoted",
        ),
        ("aggregate of window 6 starts from another model", "refused"),
    ],
)
def test_a_refused_aggregate_is_named_in_one_word(problem, word):
    docs = two_windows()
    docs[1] = WindowDocs(
        6, docs[1].reports, {**docs[1].aggregates, V1: AggregateCheck(V1, problem=problem)}, V0
    )
    refusal = validator_row(V1, docs, chain_state(), LABELS, {}).aggregate_refusal
    assert refusal is not None and refusal[0] == word


def test_a_validator_whose_measurement_or_receipt_another_refuted_is_named_refuted():
    """validator0's re-checks refute validator1's measurement of M0 in window 5 and its receipt for a
    replay of window 5 in window 6; validator1's own refutation of nobody names nobody."""
    docs = two_windows()
    refuted = {"validator": V1, "miner": M0, "outcome": "refuted"}
    docs[0].reports[V0] = (
        docs[0]
        .reports[V0]
        .model_copy(
            update={
                "measurement_rechecks": [
                    MeasurementRecheck(
                        window=5, reason="measured here: drops 0.26 and 0.25; it published 0 and 0", **refuted
                    )
                ]
            }
        )
    )
    assert validator_row(V1, docs, chain_state(), LABELS, {}).work_refuted[0] == "refuted"
    docs[1].reports[V0] = (
        docs[1]
        .reports[V0]
        .model_copy(
            update={
                "receipt_rechecks": [
                    ReceiptRecheck(
                        window=5, segment=1, reason="replayed here to 0.997 of it, tolerance 0", **refuted
                    ),
                    ReceiptRecheck(
                        validator=V1, miner=M1, window=5, segment=0, outcome="confirmed", reason="same"
                    ),
                ]
            }
        )
    )
    word, meaning = validator_row(V1, docs, chain_state(), LABELS, {}).work_refuted
    assert word == "refuted"
    assert "measurements and replay receipts were re-done by validator0" in meaning
    assert "2 in the windows shown" in meaning and "0.997" in meaning
    assert validator_row(V0, docs, chain_state(), LABELS, {}).work_refuted is None


def test_a_validator_whose_aggregates_are_built_on_another_model_is_shown_behind_since_the_first():
    """validator1 passed over window 5's aggregate: its aggregates of windows 6 and 7 start from the
    model before it. It is behind since window 6, and no longer once it builds on the network's."""
    docs = [
        WindowDocs(5, aggregates={V0: AggregateCheck(V0, (), "g6", base_hash="g5")}, leader=V0),
        WindowDocs(
            6,
            aggregates={
                V0: AggregateCheck(V0, (), "g7", base_hash="g6"),
                V1: AggregateCheck(V1, (), "x", base_hash="g5"),
            },
            leader=V0,
        ),
        WindowDocs(7, aggregates={V1: AggregateCheck(V1, (), "y", base_hash="x")}),
    ]
    assert validator_row(V1, docs, chain_state(), LABELS, {}).behind_since == 6
    assert validator_row(V0, docs, chain_state(), LABELS, {}).behind_since is None
    rejoined = [
        *docs,
        WindowDocs(8, aggregates={V1: AggregateCheck(V1, (), "g9", base_hash="g7")}, leader=V1),
    ]
    assert validator_row(V1, rejoined, chain_state(), LABELS, {}).behind_since is None


def test_a_miners_page_lists_the_windows_no_report_covers_from_its_own_records():
    """M1 lost window 7 (no validator reported on it); its own records say why. Windows 5 and 6 carry
    what its records say beside the reports."""
    docs = [*two_windows(), WindowDocs(7, settled=True)]
    row = miner_row(M1, docs, chain_state(), LABELS, {})
    own = {6: "trained 60 steps and committed", 7: "lost: dropped: training ended after the commit deadline"}
    page = miner_page(row, docs, LABELS, [], top_n=2, own=own)
    assert [w.window for w in page.windows] == [7, 6, 5]
    lost = page.windows[0]
    assert lost.own == own[7] and lost.verdicts == [] and not lost.in_global_model
    assert page.windows[1].own == own[6] and page.windows[2].own is None
    assert [w.window for w in miner_page(row, docs, LABELS, [], top_n=2).windows] == [6, 5]


def test_a_window_row_counts_each_upload_once_however_many_validators_read_it():
    row = window_row(two_windows()[1], LABELS, {7: 2.5})
    assert (row.update_bytes, row.revealed_bytes, row.reports, row.accepted) == (200, 900, 2, 2)
    assert row.leader_label == "validator0" and row.tokens == 2000 and row.heldout == 2.5


def test_the_run_view_lists_miners_and_validators_but_not_the_owner():
    view = run_view(
        RunInfo("run", "0" * 64, 1, 30, 5), chain_state(), two_windows(), {5: 3.0, 6: 2.0, 7: float("nan")},
        LABELS, {}, ["window 6: train"], [], 0.0, heldout_on=True,
    )  # fmt: skip
    assert [m.hotkey for m in view.miners] == [M0, M1]
    assert [v.hotkey for v in view.validators] == [V0, V1]
    assert view.heldout == [(5, 3.0), (6, 2.0)] and view.tokens == 3000 and view.window == 6
    assert view.heldout_empty == HELDOUT_PENDING and view.stopped is None


def test_the_held_out_chart_says_it_is_off_when_the_dashboard_does_not_follow_it():
    view = run_view(
        RunInfo("run", "0" * 64, 1, 30, 5), chain_state(), two_windows(), {}, LABELS, {}, [], [], 0.0,
        heldout_on=False,
    )  # fmt: skip
    assert view.heldout == [] and view.heldout_empty == HELDOUT_OFF


def test_the_network_is_stopped_after_settled_windows_nobody_published_in():
    docs = two_windows()
    silent = [WindowDocs(7, settled=True), WindowDocs(8, settled=True), WindowDocs(9)]
    assert stopped_note(docs + silent[:1]) is None  # one quiet window: an outage, perhaps
    assert stopped_note(docs + silent[2:]) is None  # not due yet
    assert stopped_note([WindowDocs(5, settled=True), *silent]) is None  # nobody has published yet
    note = stopped_note(docs + silent)
    assert note is not None and "since window 6 (windows 7–8 passed their aggregate deadline" in note
    view = run_view(
        RunInfo("run", "0" * 64, 1, 30, 5), chain_state(), docs + silent, {}, LABELS, {}, [], [], 0.0,
        heldout_on=True,
    )  # fmt: skip
    assert view.stopped == note
    page = miner_page(view.miners[0], docs + silent, LABELS, [], 3)
    assert page.stopped == note


def test_earned_names_the_block_it_was_read_at():
    row = miner_row(M0, two_windows(), chain_state(), LABELS, {})
    assert (row.earned, row.earned_block) == (4.0, 200)
    assert validator_row(V0, two_windows(), chain_state(), LABELS, {}).earned_block == 200
    page = miner_page(row, two_windows(), LABELS, [], 3)
    assert page.summary[-1].endswith("4.0000 earned in all as of block 200.")
    assert miner_row(M0, two_windows(), None, LABELS, {}).earned_block is None


def test_a_miner_page_shows_newest_window_first_with_plain_words():
    docs = two_windows()
    page = miner_page(miner_row(M1, docs, chain_state(), LABELS, {}), docs, LABELS, [], 3)
    assert [w.window for w in page.windows] == [6, 5] and page.windows[0].in_global_model
    assert all(w.aggregate_followed for w in page.windows) and all(w.why_not is None for w in page.windows)
    rejected = [v for v in page.windows[0].verdicts if not v.accepted]
    assert rejected[0].explanation == f"The “replay” check failed. It passes when {CHECKS['replay']}."
    assert "rejected it in 1" in page.summary[0]


def test_not_in_the_global_model_says_why_as_the_miners_log_does():
    w5, w6 = two_windows()
    below = replace(w5, aggregates={V0: AggregateCheck(V0, ((M0, 1.0),), "h5")})
    rejected = replace(w6, aggregates={V1: w6.aggregates[V1]}, leader=V1)
    none = replace(w6, window=7, aggregates={}, leader=None)
    open_ = replace(w6, window=8, aggregates={}, leader=None, settled=False)
    docs = [below, rejected, none, open_]
    page = miner_page(miner_row(M1, docs, chain_state(), LABELS, {}), docs, LABELS, [], 1)
    assert [w.in_global_model for w in page.windows] == [False] * 4
    assert [w.why_not for w in reversed(page.windows)] == [
        "ranked 2 of 2 passing updates by score, below aggregate_top_n = 1 (the aggregate takes the best only)",
        "the followed validator rejected it: replay: segment 2 differs",
        NO_AGGREGATE,
        "the window's aggregate deadline has not passed yet",
    ]
    # the miner's log line gives the same reason, with every validator's score
    line = standing(M1, 5, below.reports, V0, ((M0, 1.0),), 1).line()
    assert line == (
        f"window 5: not in the global model: {page.windows[-1].why_not}; scores: {V0[:8]}… 0, {V1[:8]}… 0"
    )


def test_score_words_name_the_tokens_the_drop_and_the_mark_of_a_score():
    numbers = {"tokens": 30720.0, "drop_trained": 0.031, "mark": 0.02, "mark_z": 2.5}
    words = score_words(numbers)
    assert "30,720 tokens, each paid in full" in words
    assert (
        "last segment by 3.10%" in words and "2.00% more than of unseen ones (2.5 standard errors)" in words
    )
    assert score_words({"tokens": 10.0}) == "You trained 10 tokens, each paid in full."
    assert score_words({"tokens": 10.0, "vouched": 10.0}) == "You trained 10 tokens, each paid in full."
    assert score_words({"tokens": 30720.0, "vouched": 3.2e-7}).startswith(
        "You claimed 30,720 tokens, but your update's gain on unseen data vouches for only 3.2e-07 of them"
    )
    assert score_words({}) == "No usefulness was measured."
    assert explain({"manifest": "pass"}) == "Every check passed."
    assert "does not describe (novel)" in explain({"novel": "no"})


def test_clip_keeps_text_short():
    assert clip("x" * 10) == "x" * 10
    assert len(clip("x" * 10_000)) == TEXT_CHARS and clip("x" * 10_000).endswith("…")


def test_wallet_labels_read_public_keys_only(tmp_path):
    wallet, _ = create_dev_wallet("alice", "default", str(tmp_path))
    other, _ = create_dev_wallet("alice", "spare", str(tmp_path))
    (tmp_path / "bob" / "hotkeys").mkdir(parents=True)
    (tmp_path / "bob" / "hotkeys" / "defaultpub.txt").write_text("not json")
    labels = wallet_labels(tmp_path)
    assert labels == {wallet.hotkey.ss58_address: "alice", other.hotkey.ss58_address: "alice/spare"}
    assert wallet_labels(None) == {} and wallet_labels(tmp_path / "none") == {}


def test_node_metrics_give_each_hotkeys_utilization_and_skip_a_torn_line(tmp_path):
    node = tmp_path / "nodes" / "miner0"
    metrics = Metrics(node / "metrics.jsonl", role="miner", hotkey=M0, run_id="r")
    for w in range(3):
        metrics.log(w, train_record(train_seconds=5.0 + w, wall_seconds=10.0))
    metrics.close()
    with (node / "metrics.jsonl").open("a") as f:
        f.write('{"torn')
    reader = NodeMetrics([tmp_path / "nodes", tmp_path / "missing"])
    assert reader.utilization() == {M0: (6.0 + 7.0) / 20.0}
    write_lines(node / "metrics.jsonl", [metrics_line(0, train_record(), hotkey=M1)])
    assert reader.utilization() == {M1: None}


def test_a_miners_page_shows_its_matured_and_pending_pay_from_the_newest_report_that_says():
    docs = two_windows()
    pay = {"average": 1200.0, "pending": 5400.0, "matures_at": 9, "held": False}
    newer = WindowDocs(
        7,
        reports={V1: report(V1, 7, {M1: {**line(4, 0.8), "pay": pay}})},
        leader=None,
        settled=False,
    )
    row = miner_row(M1, [*docs, newer], chain_state(), LABELS, {})
    assert (row.pay.average, row.pay.pending, row.pay.matures_at, row.pay_window) == (1200.0, 5400.0, 9, 7)
    page = miner_page(row, [*docs, newer], LABELS, [], 3)
    words = next(s for s in page.summary if s.startswith("After window 7"))
    assert "matured pay 1,200 tokens a window" in words and "pending 5,400 tokens" in words
    assert "the oldest maturing at window 9" in words and "forfeits it" in words
    assert miner_row(M1, docs, chain_state(), LABELS, {}).pay is None  # no report says: none shown
