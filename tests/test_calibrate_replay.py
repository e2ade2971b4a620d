"""Smoke test of bench/calibrate_replay.py on the CPU: a `--quick` run, and a second process replaying
the states the first one saved (a background job of the session, `support.bench_jobs`), each write a
well-formed report in which every honest replay is
bit-exact (distance exactly 0, equal state hashes) while the control replay on other data is not."""

from __future__ import annotations

import re
import sys
import tomllib
from pathlib import Path
from types import SimpleNamespace

from support.bench_jobs import KEPT, MARKER

from distrai.protocol.run import ClassTolerance

ROOT = Path(__file__).resolve().parent.parent
HEADERS = [
    "trained on",
    "replayed on",
    "replay",
    "segments",
    "bit-exact states",
    "median",
    "p99",
    "max",
    "recommended tolerance",
    "run config's tolerance",
    "max loss drift",
    "recommended loss tolerance",
    "control on other data (min)",
]
SEGMENT_HEADERS = ["segment", "inner steps", "replays", "bit-exact states", "median", "max"]


def table_after(text: str, heading: str) -> list[list[str]]:
    """The cells of the markdown table in the section under `heading`, header row first."""
    section = text.split(heading + "\n", 1)[1].split("\n## ", 1)[0]
    rows = [line for line in section.splitlines() if line.startswith("|")]
    cells = [[cell.strip() for cell in row.strip("|").split("|")] for row in rows]
    assert set(rows[1].strip("|").split("|")) == {"---"}
    return [cells[0], *cells[2:]]


def check_report(text: str, replay: str) -> None:
    trials = re.search(r"- trials: (\d+) window\(s\) × (\d+) honest miner\(s\).* in (\d+) segments of", text)
    assert trials, text[:2000]
    windows, miners, per_window = (int(g) for g in trials.groups())
    segments = windows * miners * per_window
    assert segments >= 2

    header, *rows = table_after(text, "## Measured distances")
    assert header == HEADERS
    assert len(rows) == 1 and len(rows[0]) == len(HEADERS)
    row = dict(zip(HEADERS, rows[0], strict=True))
    assert row["trained on"].startswith("cpu (") and row["replayed on"].startswith("cpu (")
    assert row["replay"].startswith(replay)
    assert int(row["segments"]) == segments
    assert int(row["bit-exact states"]) == segments
    for column in ("median", "p99", "max"):
        assert float(row[column]) == 0.0, (column, row[column])
    assert row["recommended tolerance"] == "0.0 (max × 10)"
    assert float(row["run config's tolerance"]) == 0.0
    assert float(row["max loss drift"]) == 0.0
    assert row["recommended loss tolerance"] == "0.0 (max × 10)"
    assert float(row["control on other data (min)"]) > 0.01

    header, *by_segment = table_after(text, "## By segment")
    assert header == SEGMENT_HEADERS
    assert [int(r[0]) for r in by_segment] == list(range(per_window))
    assert sum(int(r[2]) for r in by_segment) == segments
    for r in by_segment:
        assert len(r) == len(SEGMENT_HEADERS)
        assert int(r[3]) == int(r[2]) == windows * miners
        assert float(r[4]) == 0.0 and float(r[5]) == 0.0
    assert "On the CPU the replay is bit-exact" in text
    assert "GPU figures have not been measured yet" in text
    assert "python bench/calibrate_replay.py --device cuda --run.config" in text
    assert "replay_tolerance = " in text
    assert "the tolerance table needs no row for it" in text


def test_quick_calibration_on_cpu_is_bit_exact_in_process_and_across_processes(calibrate_replay_bench):
    run = calibrate_replay_bench.completed()
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    assert run.stdout.count("Replay distances") == 2, "both processes printed their table"
    text = calibrate_replay_bench.report.read_text()
    check_report(text, "same process")
    assert "bench/calibrate_replay.py --quick --save-states" in text
    assert "# old report" not in text
    assert text.endswith(f"{MARKER}\n{KEPT}")
    folder = calibrate_replay_bench.report.parent
    assert (folder / "states" / "index.json").exists()

    fresh = (folder / "fresh.md").read_text()
    check_report(fresh, "another process")
    assert fresh.endswith(MARKER + "\n")


def test_the_tolerance_row_names_the_pair_and_loads_into_a_run_config():
    sys.path.insert(0, str(ROOT / "bench"))
    from calibrate_replay import tolerance_row

    report = SimpleNamespace(
        trained_on={"device": "cuda", "gpu": "NVIDIA H100 80GB HBM3"},
        here={"device": "cuda", "gpu": "NVIDIA H200"},
        recommended=0.022,
        recommended_loss=0.0031,
        date="2026-11-23 21:40 UTC",
        rt=SimpleNamespace(config=SimpleNamespace(model=SimpleNamespace(dtype="bfloat16"))),
    )
    table = tomllib.loads("\n".join(tolerance_row(report)))
    (row,) = table["verification"]["tolerances"]
    parsed = ClassTolerance.model_validate(row)
    assert parsed.devices == ("NVIDIA H100 80GB HBM3", "NVIDIA H200")
    assert (parsed.replay, parsed.loss) == (0.022, 0.0031)
    assert "bench/calibrate_replay.py" in parsed.measured
