"""A validator stopped between saving its state and writing the window's metrics record.

The state file is the window's commit: the scores folded into the averages, the weights set, and the
metrics record that describes them, saved at once. A validator killed after that save and before its
metrics file took the record (or while it wrote it: a torn line) writes the record when it starts
again, once; the chaos run's check that every window folded into the state has its record
(`bench/_chaos_checks.py`, "validator state") failed on that gap in one fresh-clone run of the
suite.

One miner trains, commits and reveals a window of the adversary config; the validator checks it on
the embedded chain, whose clock moves only when the test moves it."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import pytest
from support.metrics_lines import line, train_record, validator_record, write_lines
from test_validator_outage import CONFIG, WINDOW, Ticking, train

from distrai.node.metrics import Metrics, last_record, read_metrics
from distrai.node.metrics_records import MetricsLine, ValidatorWindowRecord
from distrai.node.seat import Seat
from distrai.protocol.run import load_run_config
from distrai.protocol.runtime import build_runtime
from distrai.store import FileStore
from validators.validator import Validator, ValidatorOptions
from validators.validator_state import load_state


def start_validator(harness, work: Path) -> Validator:
    """A validator process as it starts in `work`, with its metrics file there."""
    config = load_run_config(CONFIG)
    wallet = harness.new_wallet("validator")
    store = FileStore(work.parent / "store-validator")
    metrics = Metrics(work / "metrics.jsonl", role="validator", hotkey=wallet.hotkey.ss58_address, run_id="r")
    return Validator(
        Seat(build_runtime(config), harness.chain, wallet, store, store.url, metrics), ValidatorOptions(work)
    )


@pytest.fixture(scope="module")
def checked(tmp_path_factory):
    """A validator's folder after it checked WINDOW, and the record it wrote for it."""
    root = tmp_path_factory.mktemp("record")
    harness, _ = train(root, load_run_config(CONFIG), {"alpha": "alpha"})
    work = root / "validator"
    validator = start_validator(harness, work)
    assert validator.run_window(WINDOW, Ticking(harness))
    assert validator.metrics is not None
    validator.metrics.close()
    return harness, work, read_metrics(work / "metrics.jsonl")[-1]


def numbers(record: MetricsLine) -> MetricsLine:
    """A record less what each write adds: its time and the process's memory peaks."""
    return record.model_copy(update={"time": 0.0, "peak_rss_bytes": 0, "cuda_peak_bytes": None})


def restart(harness, work: Path, caplog) -> tuple[list[MetricsLine], list[str]]:
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="distrai.validator"):
        validator = start_validator(harness, work)
    assert validator.metrics is not None
    validator.metrics.close()
    return read_metrics(work / "metrics.jsonl"), [r.getMessage() for r in caplog.records]


def test_the_saved_state_holds_the_windows_record(checked):
    harness, work, record = checked
    state = load_state(work / "validator_state.json", build_runtime(load_run_config(CONFIG)).run_id)
    assert record.window == state.window == WINDOW
    assert isinstance(state.record, ValidatorWindowRecord) and state.record.updates == 1
    assert record.record == state.record
    assert state.record.averages, "the averages are in the record"
    saved = json.loads((work / "validator_state.json").read_text())["record"]
    assert "average/0" in saved, "saved with the per-uid keys of the metrics file, as before"


@pytest.mark.parametrize("left", ["nothing", "a torn line"])
def test_a_record_the_stop_kept_out_of_the_file_is_written_once_at_the_next_start(
    checked, tmp_path, caplog, left
):
    harness, checked_work, record = checked
    work = tmp_path / "validator"
    work.mkdir()
    (work / "validator_state.json").write_bytes((checked_work / "validator_state.json").read_bytes())
    lines = (checked_work / "metrics.jsonl").read_text().splitlines(keepends=True)
    kept = "".join(lines[:-1]) + ("" if left == "nothing" else lines[-1][: len(lines[-1]) // 2])
    (work / "metrics.jsonl").write_text(kept)
    assert last_record(work / "metrics.jsonl") is None

    records, said = restart(harness, work, caplog)
    assert [r.window for r in records] == [WINDOW]
    assert numbers(records[-1]) == numbers(record)
    assert said == [
        f"window {WINDOW}: its metrics record was saved with the state but not written (the validator "
        "stopped between the two); written now"
    ]

    records, said = restart(harness, work, caplog)
    assert [r.window for r in records] == [WINDOW], "written twice"
    assert said == []


def test_a_record_already_in_the_file_is_not_written_again(checked, tmp_path, caplog):
    harness, checked_work, _ = checked
    work = tmp_path / "validator"
    work.mkdir()
    for name in ("validator_state.json", "metrics.jsonl"):
        (work / name).write_bytes((checked_work / name).read_bytes())
    records, said = restart(harness, work, caplog)
    assert [r.window for r in records] == [WINDOW] and said == []


def test_the_last_record_is_read_back_from_the_end_past_torn_and_long_lines(tmp_path):
    path = tmp_path / "metrics.jsonl"
    assert last_record(path) is None
    path.write_text("")
    assert last_record(path) is None
    long = line(7, validator_record(weights=[0.0] * 5000, averages=[float(uid) for uid in range(5000)]))
    write_lines(path, [line(6, train_record()), long])
    with path.open("a") as f:
        f.write('{"window": 8, "va\n')
    assert last_record(path, chunk=64) == long
    assert last_record(path, chunk=1 << 16) == long
    path.write_text('{"window": 8, "va\n\n')
    assert last_record(path, chunk=4) is None
