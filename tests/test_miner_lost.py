"""A window a miner set out to train and lost is written in its metrics file with why, and the
dashboard's miner page lists it beside the windows the validators reported (issue "One network
through any outage": the page left out the windows no report covers)."""

from __future__ import annotations

from test_miner_roster import WINDOW, miner_registered_at

from distrai.dashboard.nodes import NodeMetrics, own_windows
from distrai.node.metrics import LOST, Metrics, read_metrics
from distrai.protocol.windows import commit_deadline


def test_a_commit_after_the_deadline_is_written_as_a_lost_window(tmp_path):
    miner, harness = miner_registered_at(tmp_path, -5)
    path = tmp_path / "m" / "metrics.jsonl"
    miner.metrics = Metrics(path, role="miner", hotkey=miner.hotkey, run_id=miner.rt.run_id)
    harness.advance(commit_deadline(miner.windows, WINDOW) - harness.local.block())
    assert not miner.commit(WINDOW, b"{}", 1)
    (record,) = [r for r in read_metrics(path) if r.get("event") == LOST]
    assert record["window"] == WINDOW and record["hotkey"] == miner.hotkey
    assert record["why"] == "dropped: training ended after the commit deadline"
    said = NodeMetrics([path]).miner_windows()[miner.hotkey]
    assert said == {WINDOW: "lost: dropped: training ended after the commit deadline"}


def test_the_later_record_of_a_window_tells_what_became_of_it():
    records = [
        {"window": 3, "event": "train", "steps_trained": 90},
        {"window": 4, "event": "train", "steps_trained": 60},
        {"window": 4, "event": LOST, "why": "its reveal deadline passed while the miner was down"},
        {"window": 5, "event": LOST, "why": "skipped: its base model stayed out of reach until too late"},
        {"window": "x", "event": LOST},
    ]
    assert own_windows(records) == {
        3: "trained 90 steps and committed",
        4: "lost: its reveal deadline passed while the miner was down",
        5: "lost: skipped: its base model stayed out of reach until too late",
    }
