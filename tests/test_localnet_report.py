"""The local network's report (`distrai localnet --report`) from the nodes' metrics records and the
validators' signed reports, each read through its model."""

from __future__ import annotations

import json

import pytest
from support.metrics_lines import line, reveal_record, train_record, validator_record

from distrai.localnet.report import NodeRecords, RunSummary, read_summary, report_markdown, write_summary
from distrai.wire.window_documents import MinerEntry, WindowReport

VALIDATOR, MINER = "5V0" + "a" * 45, "5M0" + "c" * 45


def signed(window: int, entry: MinerEntry) -> WindowReport:
    return WindowReport(
        run_id="0" * 64,
        window=window,
        validator=VALIDATOR,
        observed_block=0,
        miners={MINER: entry},
        refused=[],
    )


def test_the_report_reads_each_table_from_the_records_and_the_signed_reports():
    miner = [
        line(3, train_record(steps_trained=80, train_seconds=8.0, tokens_per_s=1234.0), hotkey=MINER),
        line(3, reveal_record(upload_seconds=2.5, uploaded_bytes=12_000, revealed_bytes=8_000), hotkey=MINER),
        line(4, train_record(steps_trained=40), hotkey=MINER).model_copy(update={"cuda_peak_bytes": 3 << 30}),
    ]
    validator = [line(3, validator_record(validate_seconds=4.5, accepted=1, updates=2), hotkey=VALIDATOR)]
    nodes = [
        NodeRecords("miner0", "miner", MINER, miner),
        NodeRecords("validator0", "validator", VALIDATOR, validator),
    ]
    replayed = MinerEntry(
        uid=1,
        verdicts={"replay": "pass"},
        numbers={"replay_steps": 20.0, "replay_seconds": 4.0, "replay_tolerance": 0.0},
        score=1.0,
        reason=None,
    )
    text = report_markdown("a run", nodes, [signed(3, replayed)], None)
    assert "| 3 | miner0 | 80 | 8.00 | 1,234 | 1.00 | 4,000 | 2.50 | 8,000 |" in text
    assert "| 4 | miner0 | 40 | 8.00 | 1,000 | 1.00 | – | – | – |" in text
    # 4 s / 20 replayed steps against 8 s / 80 trained steps
    assert "| 3 | validator0 | miner0 | 20 | 4.00 | 2.00 | yes |" in text
    assert "| 3 | validator0 | 4.50 | 1/2 |" in text
    assert "| miner0 | 3.00 GiB | 0.00 GiB |" in text and "| validator0 | no GPU used | 0.00 GiB |" in text


SUMMARY = RunSummary(windows=[3, 4], losses=[5.5, 5.25, 5.0], sequences=16, device="cpu", parameters=985_536)


def test_the_run_summary_reads_back_equal_and_the_report_quotes_it(tmp_path):
    write_summary(tmp_path, SUMMARY)
    assert read_summary(tmp_path) == SUMMARY
    text = report_markdown("a run", [], [], read_summary(tmp_path))
    assert "(16 held-out sequences): 5.500 → 5.250 → 5.000" in text
    assert "after each of windows 3, 4" in text


@pytest.mark.parametrize(
    "text",
    [
        "{",
        json.dumps({**SUMMARY.model_dump(), "losses": "low"}),
        json.dumps({k: v for k, v in SUMMARY.model_dump().items() if k != "windows"}),
        json.dumps({**SUMMARY.model_dump(), "extra": 1}),
    ],
    ids=["torn", "losses not a list", "windows missing", "unknown key"],
)
def test_a_summary_that_is_not_one_reads_as_none_and_the_report_says_not_measured(tmp_path, text):
    (tmp_path / "summary.json").write_text(text)
    assert read_summary(tmp_path) is None
    assert "Held-out loss: not measured" in report_markdown("a run", [], [], read_summary(tmp_path))
