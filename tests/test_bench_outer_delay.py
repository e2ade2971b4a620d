"""Smoke test of bench/outer_delay.py: `--help` parses (in this process), and a `--quick --output` run
(H = 15, two pipelined windows, a background job of the session, `support.bench_jobs`) prints the curve and writes a page with one row per window whose numbers parse,
keeping the notes below the marker."""

from __future__ import annotations

import json
import math
import re
import sys
from pathlib import Path

import pytest
from support.bench_jobs import KEPT, MARKER

ROOT = Path(__file__).resolve().parent.parent


def test_help_parses_flags(capsys):
    sys.path.insert(0, str(ROOT / "bench"))
    from outer_delay import parse_args

    with pytest.raises(SystemExit) as done:
        parse_args(["--help"])
    assert done.value.code == 0
    shown = capsys.readouterr().out
    assert "--quick" in shown and "--output" in shown
    args = parse_args(["pipe", "0.7", "0.3", "--quick", "--output", "page.md"])
    assert args.quick and args.output == Path("page.md")


def test_a_quick_run_writes_the_curve_and_keeps_the_notes(outer_delay_bench):
    run = outer_delay_bench.completed()
    output = outer_delay_bench.report
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    last = json.loads([line for line in run.stdout.splitlines() if line.startswith('{"mode"')][-1])
    assert last["mode"] == "pipe" and last["H"] == 15 and len(last["curve"]) == 3
    text = output.read_text()
    assert text.startswith("# The outer step under delay\n") and "# old report" not in text
    assert text.endswith(f"{MARKER}\n{KEPT}")
    assert "python bench/outer_delay.py pipe 0.7 0.3 --quick --output" in text
    assert "| window | held-out loss | seconds |" in text
    rows = [line for line in text.splitlines() if re.match(r"\| \d+ \| ", line)]
    assert [int(row.split("|")[1]) for row in rows] == [0, 1, 2]
    losses = [float(row.split("|")[2]) for row in rows]
    assert all(math.isfinite(loss) and loss > 0 for loss in losses)
    assert losses == pytest.approx(last["curve"], abs=1e-4)
