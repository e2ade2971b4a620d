"""Smoke test of bench/gpu.py: a `--quick` run on the CPU writes every table, every loop runs, every
piece repeats bit for bit, and two gloo ranks, under DDP and sharded (FSDP2), agree with a one-process
replay of their split."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from test_bench_smoke import MARKER, table_after

ROOT = Path(__file__).resolve().parent.parent


def test_quick_run_writes_every_table(tmp_path):
    output = tmp_path / "gpu.md"
    output.write_text(f"# old\n{MARKER}\nnotes kept\n")
    run = subprocess.run(
        [sys.executable, "bench/gpu.py", "--quick", "--device", "cpu", "--output", str(output)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    text = output.read_text()
    assert "`python bench/gpu.py --quick --device cpu --output" in text and text.endswith("notes kept\n")

    speeds = table_after(text, "## Throughput: preset tiny")
    assert len(speeds) == 1 + 7
    for loop, tokens, ratio, *_ in speeds[1:]:
        assert float(tokens.replace(",", "")) > 0, (loop, tokens)
        assert ratio.endswith("×")
    assert dict((row[0], row[2]) for row in speeds[1:])["bare loop under torch.compile"] == "1.00×"

    pieces = table_after(text, "## What repeats bit for bit")
    assert len(pieces) == 1 + 8 and all(row[1] == "yes" for row in pieces[1:]), pieces
    by_piece = {row[0]: row for row in pieces[1:]}
    assert by_piece["reference: fp32, eager, AdamW"][2] == "yes"
    assert by_piece["foreach AdamW"][2] == "yes", "foreach AdamW gives the single-tensor bits"

    ranks = table_after(text, "## Data-parallel ranks")
    assert [row[:5] for row in ranks[1:]] == [
        ["2", "DDP", "yes", "0.00e+00", "0.00e+00"],
        ["2", "FSDP2 (sharded)", "yes", "0.00e+00", "0.00e+00"],
    ], ranks
