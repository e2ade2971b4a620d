"""Smoke test of bench/boundaries.py: a `--quick --output` run (the tiny model, six boundaries in
each mode, each mode in its own process; a background job of the session, `support.bench_jobs`)
writes its table with both modes, a resident-memory reading per boundary, shares that follow from
the times, three verdicts, and keeps the notes under its marker. Which mode's training thread is
faster is the table's finding, not this test's: the tiny model's copy and its hash take about the
same milliseconds, so a busy machine decides their order. That the worker mode's training thread
only copies is `tests/test_boundaries.py`'s (the trainer goes on while the worker is held)."""

from __future__ import annotations

import re

import pytest
from support.bench_jobs import KEPT, MARKER


def test_a_quick_run_writes_both_modes_and_keeps_the_notes(boundaries_bench):
    run = boundaries_bench.completed()
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    output = boundaries_bench.report
    text = output.read_text()
    assert text.endswith(f"{MARKER}\n{KEPT}") and "# old" not in text
    assert f"`python bench/boundaries.py --quick --output {output}`" in text
    rows = {
        cells[0]: cells
        for line in text.splitlines()
        if line.startswith(("| inline |", "| worker |"))
        for cells in [[c.strip() for c in line.strip("|").split("|")]]
    }
    assert set(rows) == {"inline", "worker"}
    for name, cells in rows.items():
        thread, share = float(cells[1]), float(cells[3].rstrip("%")) / 100
        assert share == pytest.approx(thread / (0.5 + thread), abs=1.5e-3), name  # the time is rounded to ms
        assert len(cells[4].split(", ")) == 6, "a resident reading per boundary"
        assert float(cells[5]) >= max(float(x) for x in cells[4].split(", ")) - 0.01
    assert rows["inline"][2].endswith("(on the training thread)") and not rows["worker"][2].endswith(")")
    verdicts = re.findall(r"\((MET|MISSED)", text)
    assert len(verdicts) == 3, verdicts
