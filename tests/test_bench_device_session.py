"""`bench/device_session.sh --dry-run`, the GPU session's plan, with a budget too short for any stage
but the imports: the wheels found installed, the imports stage run, every later stage skipped with the
seconds left and the least it needs, no step-table compiles started for a step table that will not
run, no smoke report of a network that did not run, and the machine under the table. The stages'
own commands are the benches' `--quick` runs, each run by its own test."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.e2e  # runs the session's shell script and the Python processes it starts

ROOT = Path(__file__).resolve().parent.parent
LEAST = {"smoke": 150, "steps": 90, "boundaries": 120, "reveal": 90, "profile": 100, "1b": 180}
"""Each stage after the imports, and the least seconds it needs (at a cap scale of 1)."""


def test_a_short_budget_runs_the_imports_and_skips_every_later_stage(tmp_path):
    out = tmp_path / "out"
    env = {
        **os.environ,
        "BUDGET_S": "80",
        "CAP_SCALE": "1",
        "OUT": str(out),
        "SCRATCH": str(tmp_path),
        "PYTHON": sys.executable,
    }
    run = subprocess.run(
        ["bash", "bench/device_session.sh", "--dry-run"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert run.returncode == 0, run.stdout[-2000:] + run.stderr[-2000:]
    summary = (out / "summary.md").read_text()
    assert summary.startswith("# Device session (dry run on a CPU, ")
    rows = {
        cells[0]: cells[1:]
        for line in summary.splitlines()
        if line.startswith("| ") and not line.startswith("| stage ")
        for cells in [[c.strip() for c in line.strip("|").split("|")]]
    }
    assert list(rows) == ["wheels", "imports", *LEAST]
    assert rows["wheels"][0] == "already installed"
    code, _, cap = rows["imports"]
    assert code == "0" and 0 < int(cap) <= 60
    for name, least in LEAST.items():
        skipped = re.fullmatch(r"skipped: (\d+) s left, it needs (\d+)", rows[name][0])
        assert skipped and int(skipped.group(2)) == least and int(skipped.group(1)) < least, rows[name]
    assert f"torch {__import__('torch').__version__}" in summary, "the machine block"
    assert "imports ok" in (out / "logs.txt").read_text()
    assert not (out / "smoke.md").exists(), "no report of a network that did not run"
    assert not (tmp_path / "distrai-session" / "fresh.pid").exists(), "no compiles for a skipped step table"
