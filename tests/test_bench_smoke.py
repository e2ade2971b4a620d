"""Smoke test of bench/convergence.py: a `--quick` run writes a well-formed, self-consistent report.

The numbers of a quick run mean nothing; what is checked is the report's shape and the accounting
that follows from first principles: a ring all-reduce sends 2·(N−1)/N fp32 values per parameter
per step, and an uncompressed DiLoCo upload is 4 bytes per parameter per round.
"""

from __future__ import annotations

import math
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
SCRIPT = ROOT / "bench" / "convergence.py"
MARKER = "<!-- Notes below this line are kept when the benchmark rewrites this file. -->"
KEPT = "Hand-written notes that a rerun must keep.\n"


def table_after(text: str, heading: str) -> list[list[str]]:
    """The cells of the markdown table in the section under `heading`, header row first."""
    section = text.split(heading, 1)[1].split("\n## ", 1)[0]
    rows = [line for line in section.splitlines() if line.startswith("|")]
    cells = [[cell.strip() for cell in row.strip("|").split("|")] for row in rows]
    return [cells[0], *cells[2:]]


def number(cell: str) -> float:
    return float(cell.replace(",", "").rstrip("×%"))


@pytest.fixture(scope="module")
def report(tmp_path_factory) -> tuple[str, subprocess.CompletedProcess]:
    output = tmp_path_factory.mktemp("bench") / "benchmarks.md"
    output.write_text(f"# old report\n{MARKER}\n{KEPT}")
    run = subprocess.run(
        [sys.executable, str(SCRIPT), "--quick", "--output", str(output)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    return output.read_text(), run


def test_report_names_the_command_and_keeps_notes(report):
    text, _ = report
    assert "bench/convergence.py --quick --output" in text
    assert "# old report" not in text
    assert text.endswith(f"{MARKER}\n{KEPT}")


def test_convergence_table_is_complete_and_consistent(report):
    text, _ = report
    header, *rows = table_after(text, "## Convergence and traffic")
    assert header[:7] == [
        "method",
        "H × rounds",
        "held-out loss",
        "ratio to DDP",
        "bytes / param / worker (run)",
        "reduction vs DDP",
        "wall time (s)",
    ]
    methods = [row[0] for row in rows]
    assert methods == ["DDP (all-reduce every step)", "DiLoCo fp32", "DiLoCo + int8", "DiLoCo + top-k"]
    ddp, fp32, int8, topk = rows
    for row in rows:
        assert len(row) == len(header)
        loss, ratio, sent, reduction, seconds = (number(row[i]) for i in range(2, 7))
        assert math.isfinite(loss) and loss > 0 and seconds >= 0
        assert ratio == pytest.approx(loss / number(ddp[2]), abs=1e-3)
        assert reduction == pytest.approx(number(ddp[4]) / sent, rel=0.01, abs=0.6)
    workers = int(text.split(" workers, batch")[0].rsplit("- ", 1)[1])
    steps = int(text.split(" steps per worker")[0].rsplit(", ", 1)[1])
    assert number(ddp[4]) == pytest.approx(2 * (workers - 1) / workers * 4 * steps)
    h, rounds = (int(part) for part in fp32[1].split(" × "))
    assert h * rounds == steps
    assert number(fp32[4]) == pytest.approx(4.0 * rounds)
    int8_rounds = int(int8[1].split(" × ")[1])
    assert int8_rounds <= number(int8[4]) < 1.1 * int8_rounds
    assert number(topk[4]) < number(int8[4])
    for line in ("Traffic, DiLoCo + int8", "Traffic, DiLoCo + top-k", "Held-out loss, DiLoCo fp32"):
        assert line in text


def test_distillation_and_throughput_tables(report):
    text, run = report
    _, teacher, plain, distilled = table_after(text, "## Distillation versus plain pre-training")
    for row in (teacher, plain, distilled):
        assert math.isfinite(number(row[1])) and number(row[1]) > 0
    _, bare, *inner = table_after(text, "## Inner-loop throughput")
    assert bare[0] == "bare PyTorch loop" and inner
    for row in inner:
        assert number(row[2]) == pytest.approx(100 * number(row[1]) / number(bare[1]), abs=0.1)
    assert "Convergence and traffic" in run.stdout
