"""A window a miner set out to train and lost is written in its metrics file with why, and the
dashboard's miner page lists it beside the windows the validators reported (issue "One network
through any outage": the page left out the windows no report covers)."""

from __future__ import annotations

from support.metrics_lines import line, reveal_record, train_record
from test_miner_roster import WINDOW, miner_registered_at

from distrai.dashboard.nodes import NodeMetrics, own_windows
from distrai.node.metrics import Metrics, read_metrics
from distrai.node.metrics_records import LostRecord
from distrai.protocol.windows import commit_deadline


def test_a_commit_after_the_deadline_is_written_as_a_lost_window(tmp_path):
    miner, harness = miner_registered_at(tmp_path, -5)
    path = tmp_path / "m" / "metrics.jsonl"
    miner.metrics = Metrics(path, role="miner", hotkey=miner.hotkey, run_id=miner.rt.run_id)
    harness.advance(commit_deadline(miner.windows, WINDOW) - harness.local.block())
    assert not miner.commit(WINDOW, b"{}", 1)
    (record,) = [r for r in read_metrics(path) if isinstance(r.record, LostRecord)]
    assert record.window == WINDOW and record.hotkey == miner.hotkey
    assert record.record == LostRecord(why="dropped: training ended after the commit deadline")
    said = NodeMetrics([path]).miner_windows()[miner.hotkey]
    assert said == {WINDOW: "lost: dropped: training ended after the commit deadline"}


def test_the_later_record_of_a_window_tells_what_became_of_it():
    records = [
        line(3, train_record(steps_trained=90)),
        line(4, train_record(steps_trained=60)),
        line(4, reveal_record()),
        line(4, LostRecord(why="its reveal deadline passed while the miner was down")),
        line(5, LostRecord(why="skipped: its base model stayed out of reach until too late")),
        line(6, LostRecord(why="")),
        line(6, train_record(steps_trained=70)),
    ]
    assert own_windows(records) == {
        3: "trained 90 steps and committed",
        4: "lost: its reveal deadline passed while the miner was down",
        5: "lost: skipped: its base model stayed out of reach until too late",
        6: "trained 70 steps and committed",
    }
    assert own_windows(records[:-1])[6] == "lost: no reason recorded"
