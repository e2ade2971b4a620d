"""Each kind of metrics record is one model, written as one flat JSON line and read back through it;
a line that is not a record is refused by name, and a reader skips it and says where it was."""

from __future__ import annotations

import json
import logging
import math

import pytest
from support.metrics_lines import line, reveal_record, train_record, validator_record, write_lines

from distrai.node.metrics import Metrics, last_record, read_metrics
from distrai.node.metrics_records import (
    LinkRecord,
    LostRecord,
    MetricsError,
    MetricsRecord,
    TornLine,
    ValidatorWindowRecord,
    parse_line,
)

RECORDS: dict[str, MetricsRecord] = {
    "train": train_record(),
    "reveal": reveal_record(upload_rate=None),
    "link": LinkRecord(upload_rate_measured=2e6, upload_rate_needed=math.inf, link_margin=0.0),
    "lost": LostRecord(why="skipped: its base model stayed out of reach until too late"),
    "validator": validator_record(leader_agreed_last_window=1.0, unmeasured=[0], scores={2: 750.5}),
}


@pytest.mark.parametrize("kind", RECORDS)
def test_each_record_kind_reads_back_equal_from_its_line(kind):
    written = line(7, RECORDS[kind], time=1700000000.25)
    text = written.to_json()
    assert "\n" not in text
    assert parse_line(text) == written
    data = json.loads(text)
    assert (data["window"], data["hotkey"], data["time"]) == (7, "5hotkey", 1700000000.25)
    assert data.get("event", "validator") == kind


def test_a_records_line_keeps_the_shape_on_disk():
    """The keys operators' dashboards read: a flat object, per-uid numbers under keys of their own,
    a miner's kind in `event`, none for a validator's window, and no GPU peak unless one was used."""
    data = json.loads(line(3, validator_record(unmeasured=[0], scores={1: 2.5, 2: 0.0})).to_json())
    assert {k: data[k] for k in data if "/" in k} == {
        "weight/0": 0.0,
        "weight/1": 0.5,
        "weight/2": 0.5,
        "score/1": 2.5,
        "score/2": 0.0,
        "unmeasured/0": 1,
        "average/0": 0.0,
        "average/1": 100.0,
        "average/2": 80.0,
    }
    assert "event" not in data and "cuda_peak_bytes" not in data and "record" not in data
    assert json.loads(line(3, train_record()).to_json())["event"] == "train"


def test_a_number_that_is_not_finite_is_null_where_it_may_be_and_refused_elsewhere():
    assert LinkRecord(
        upload_rate_measured=math.nan, upload_rate_needed=1.0, link_margin=math.inf
    ) == LinkRecord(upload_rate_measured=None, upload_rate_needed=1.0, link_margin=None)
    with pytest.raises(ValueError, match="train_seconds"):
        train_record(train_seconds=math.inf, wall_seconds=10.0)


GOOD = line(4, train_record()).to_json()
GOOD_VALIDATOR = line(4, validator_record()).to_json()


@pytest.mark.parametrize(
    "text, said",
    [
        (GOOD.replace('"steps_trained": 80, ', ""), "a train record: steps_trained: Field required"),
        (
            GOOD.replace('"steps_trained": 80', '"steps_trained": "80"'),
            "a train record: steps_trained: Input should",
        ),
        (
            GOOD.replace('"behaviour"', '"colour": "red", "behaviour"'),
            "a train record: colour: Extra inputs are not",
        ),
        (
            GOOD.replace('"event": "train"', '"event": "trained"'),
            "event 'trained' is none of 'train', 'reveal'",
        ),
        (GOOD.replace('"window": 4', '"window": 4.5'), "window: Input should be a valid integer"),
        (GOOD.replace('"hotkey": "5hotkey", ', ""), "hotkey: Field required"),
        (
            GOOD_VALIDATOR.replace('"score/1"', '"scores/1"'),
            "a validator record: 'scores/1' is not a per-uid key",
        ),
        (
            GOOD_VALIDATOR.replace('"average/1"', '"average/7"'),
            "a validator record: the averages are not one for each uid from 0: [0, 2, 7]",
        ),
        (
            GOOD_VALIDATOR.replace('"updates": 2', '"updates": true'),
            "a validator record: updates: Input should",
        ),
        ("[1, 2]", "not a JSON object but list"),
    ],
)
def test_a_line_that_is_not_a_record_is_refused_by_name(text, said):
    with pytest.raises(MetricsError) as refused:
        parse_line(text)
    assert not isinstance(refused.value, TornLine)
    assert str(refused.value).startswith(said), str(refused.value)


def test_a_line_cut_short_is_torn():
    with pytest.raises(TornLine, match="a write cut short"):
        parse_line(GOOD[: len(GOOD) // 2])


def test_a_reader_skips_a_torn_line_quietly_and_any_other_line_with_a_warning(tmp_path, caplog):
    path = tmp_path / "metrics.jsonl"
    write_lines(path, [line(1, train_record()), line(2, reveal_record())])
    with path.open("a") as f:
        f.write(GOOD[:40] + "\n" + GOOD.replace('"window": 4', '"window": "four"') + "\n")
    write_lines(tmp_path / "tail", [line(3, train_record())])
    with path.open("a") as f:
        f.write((tmp_path / "tail").read_text())
    with caplog.at_level(logging.WARNING, logger="distrai.node.metrics"):
        assert [r.window for r in read_metrics(path)] == [1, 2, 3]
    assert [r.getMessage() for r in caplog.records] == [
        f"{path}, line 4: skipped, not a metrics record: window: Input should be a valid integer"
    ]


def test_the_last_record_passes_over_what_is_not_one(tmp_path, caplog):
    path = tmp_path / "metrics.jsonl"
    write_lines(path, [line(5, train_record()), line(6, validator_record())])
    with path.open("a") as f:
        f.write('{"window": 7, "event": "lost"}\n' + GOOD[:30])
    with caplog.at_level(logging.WARNING, logger="distrai.node.metrics"):
        last = last_record(path)
    assert last is not None and last.window == 6 and isinstance(last.record, ValidatorWindowRecord)
    assert [r.getMessage() for r in caplog.records] == [
        f"{path}, line 2 from the end: skipped, not a metrics record: time: Field required"
    ]


def test_a_node_writes_each_record_kind_as_read_back(tmp_path):
    path = tmp_path / "metrics.jsonl"
    metrics = Metrics(path, role="miner", hotkey="5abc", run_id="r")
    for window, record in enumerate(RECORDS.values()):
        metrics.log(window, record)
    metrics.close()
    lines = read_metrics(path)
    assert [x.record for x in lines] == list(RECORDS.values())
    assert [(x.window, x.hotkey, x.run_id) for x in lines] == [(w, "5abc", "r") for w in range(len(RECORDS))]
