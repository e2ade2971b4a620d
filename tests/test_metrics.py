"""Node metrics: a local JSON-lines file the dashboard reads, and wandb in offline mode."""

from __future__ import annotations

import json
import math
from pathlib import Path

from support.metrics_lines import reveal_record, train_record, validator_record

from distrai.node.metrics import Metrics, read_metrics
from distrai.node.metrics_records import RevealRecord, TrainRecord


def test_records_append_and_survive_a_torn_last_line(tmp_path):
    path = tmp_path / "m" / "metrics.jsonl"
    metrics = Metrics(path, role="miner", hotkey="5abc", run_id="r")
    metrics.log(3, train_record(loss_first=2.5, loss_last=math.nan))
    metrics.log(4, train_record(loss_first=2.0))
    metrics.close()
    with path.open("a") as f:
        f.write('{"window": 5, "lo')
    records = read_metrics(path)
    assert [r.window for r in records] == [3, 4]
    first = records[0].record
    assert isinstance(first, TrainRecord) and records[0].role == "miner"
    assert first.loss_first == 2.5 and first.loss_last is None, "a loss that is not finite is written as null"
    assert json.loads(path.read_text().splitlines()[0])["loss_last"] is None


def test_a_restarted_node_keeps_its_first_record_after_a_torn_line(tmp_path):
    """A node killed mid-write leaves a line without its newline; the next process's first record
    (a miner's resumed reveal, say) must not be glued to it."""
    path = tmp_path / "metrics.jsonl"
    first = Metrics(path, role="miner", hotkey="5abc", run_id="r")
    first.log(3, train_record())
    first.close()
    with path.open("a") as f:
        f.write('{"window": 4, "event": "rev')
    again = Metrics(path, role="miner", hotkey="5abc", run_id="r")
    again.log(4, reveal_record())
    again.log(5, train_record())
    again.close()
    assert [(r.window, type(r.record)) for r in read_metrics(path)] == [
        (3, TrainRecord),
        (4, RevealRecord),
        (5, TrainRecord),
    ]
    assert path.read_text().count("\n") == 4, "one newline ends the torn line, none is added when whole"
    Metrics(path, role="miner", hotkey="5abc", run_id="r").close()
    assert path.read_text().count("\n") == 4


def test_wandb_runs_offline_without_an_api_key(tmp_path, monkeypatch):
    monkeypatch.delenv("WANDB_API_KEY", raising=False)
    monkeypatch.setenv("WANDB_SILENT", "true")
    metrics = Metrics(
        tmp_path / "metrics.jsonl", role="validator", hotkey="5xyz", run_id="r", wandb_project="distrai"
    )
    metrics.log(1, validator_record(scores={0: 0.5}))
    metrics.close()
    runs = list((tmp_path / "wandb").glob("offline-run-*"))
    assert len(runs) == 1 and any(runs[0].rglob("*.wandb"))
    assert json.loads((tmp_path / "metrics.jsonl").read_text())["score/0"] == 0.5


def high_water_bytes() -> int:
    """The process's peak resident set as the kernel counts it (VmHWM)."""
    line = next(x for x in Path("/proc/self/status").read_text().splitlines() if x.startswith("VmHWM:"))
    return int(line.split()[1]) * 1024


def test_every_record_carries_the_process_peak_memory(tmp_path):
    path = tmp_path / "metrics.jsonl"
    metrics = Metrics(path, role="miner", hotkey="5abc", run_id="r")
    before = high_water_bytes()
    metrics.log(1, train_record())
    after = high_water_bytes()
    metrics.close()
    (record,) = read_metrics(path)
    # getrusage and /proc count pages at slightly different moments: within 1% of each other
    assert 0.99 * before <= record.peak_rss_bytes <= 1.01 * after
    assert record.cuda_peak_bytes is None, "a process that used no GPU records no GPU peak"
    assert "cuda_peak_bytes" not in json.loads(path.read_text())
