"""Smoke test of bench/startup.py: a `--quick --output` run (one run of each command, none unrecorded
before it) writes docs/startup.md's table to another path, one row per command the page quotes, and
keeps the notes below the marker. What the page concludes from its CPU seconds holds in the run: a
node's imports cost more than `--help`, `import distrai.node.build`, or the same imports forked by a
warm server."""

from __future__ import annotations

import math
import subprocess
import sys
from pathlib import Path

import pytest
from support.bench_jobs import KEPT, MARKER, OLD_REPORT
from test_bench_smoke import table_after

pytestmark = pytest.mark.e2e

ROOT = Path(__file__).resolve().parent.parent
ROWS = [
    "miner --help",
    "validator --help",
    "import distrai.node.build",
    "a running node's imports",
    "the same, forked by a warm server",
]


def test_a_quick_run_writes_every_row_and_keeps_the_notes(tmp_path):
    output = tmp_path / "startup.md"
    output.write_text(OLD_REPORT)
    run = subprocess.run(
        [sys.executable, "bench/startup.py", "--quick", "--output", str(output)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    text = output.read_text()
    assert text.startswith("# Node start-up\n") and "# old report" not in text
    assert text.endswith(f"{MARKER}\n{KEPT}")
    assert f"    python bench/startup.py --quick --output {output}\n" in text
    assert "Medians of 1 run(s) per command (no unrecorded run before them), " in text
    header, *rows = table_after(text, "# Node start-up")
    label = header[1].removesuffix(": CPU s")
    assert header == ["command", f"{label}: CPU s", f"{label}: wall s"]
    assert [row[0] for row in rows] == ROWS
    cpu = {}
    for name, cpu_s, wall_s in rows:
        assert math.isfinite(float(cpu_s)) and math.isfinite(float(wall_s)), name
        assert float(cpu_s) > 0 and float(wall_s) > 0, name
        cpu[name] = float(cpu_s)
    imports = cpu["a running node's imports"]
    assert all(cpu[name] < imports for name in ROWS if name != "a running node's imports"), cpu
