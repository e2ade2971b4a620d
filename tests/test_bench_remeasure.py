"""Smoke test of bench/remeasure.py: a `--quick --output` run (the shipped CPU run with its miners at
H = 15, 64 held-out sequences and 200 windows' samples; the tiny preset in place of the 150m shape)
writes its CPU section of docs/remeasure.md to another path and keeps the other device's section.

The numbers of a quick run mean little, but what docs/protocol.md draws from the page holds in it: the
honest aggregate lowers the held-out loss and no sample refuses it, the colluding leader's raises it
past the tolerance in every sample, and the losses two nodes compare differ by far less than the
tolerance across precisions and thread counts."""

from __future__ import annotations

import math
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.e2e

ROOT = Path(__file__).resolve().parent.parent
GPU_SECTION = "<!-- section: cuda -->\n## GPU: a device of an earlier run\n\nIts numbers, kept."


def tables(text: str) -> list[list[list[str]]]:
    """Every markdown table of `text`, each its rows of cells (the header first, no separator row)."""
    found: list[list[list[str]]] = []
    previous = ""
    for line in text.splitlines():
        if line.startswith("|"):
            if not previous.startswith("|"):
                found.append([])
            if not set(line) <= set("|-"):
                found[-1].append([cell.strip() for cell in line.strip("|").split("|")])
        previous = line
    return found


def percent(cell: str) -> float:
    return float(cell.rstrip("%")) / 100


def test_a_quick_run_writes_its_section_and_keeps_the_other(tmp_path):
    output = tmp_path / "remeasure.md"
    output.write_text(f"# an old header\n\n{GPU_SECTION}\n")
    run = subprocess.run(
        [sys.executable, "bench/remeasure.py", "--quick", "--output", str(output)],
        cwd=ROOT,
        # its rows at 2 threads wait at OpenMP barriers: sleeping there, not spinning, spares the
        # session's other processes (about 3 CPU-s on 2 busy cores)
        env=dict(os.environ, OMP_WAIT_POLICY="PASSIVE"),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    text = output.read_text()
    assert text.startswith("# The held-out re-measurement: cost and numerics\n")
    assert "# an old header" not in text and text.endswith(f"{GPU_SECTION}\n")
    cpu = text.split("<!-- section: cpu -->\n", 1)[1].split("<!-- section: cuda -->", 1)[0]
    assert f"```\npython bench/remeasure.py --quick --output {output}\n```" in cpu
    run_line = re.search(r"`follow.heldout_tolerance` = ([\d.]+); 200 windows' samples", cpu)
    assert run_line, cpu
    tolerance = float(run_line[1])
    assert "- `--quick`: the miners train H = 15 steps (the run's H is 90)" in cpu

    aggregates, numerics, shape = tables(cpu)
    assert aggregates[0][1] == "loss on 64 held-out sequences: base → result"
    assert [row[0] for row in aggregates[1:]] == ["honest (3 miners)", "colluding leader (1 poisoned update)"]
    losses, spreads = {}, {}
    for name, loss, rise, sigma, refused in aggregates[1:]:
        before, after = (float(x) for x in loss.split(" → "))
        low, median, high = (percent(x) for x in rise.split(" / "))
        assert all(math.isfinite(x) for x in (before, after, low, median, high, float(sigma))), name
        assert low <= median <= high and float(sigma) >= 0, name
        losses[name], spreads[name] = (before, after), (low, high, refused)
    (base, honest), (same_base, poisoned) = losses.values()
    assert base == same_base and honest < base < poisoned
    (_, honest_high, honest_refused), (poison_low, _, poison_refused) = spreads.values()
    assert honest_high < tolerance and honest_refused == "0 / 200"
    assert poison_low > tolerance and poison_refused == "200 / 200"

    assert numerics[0] == ["what", "base", "honest result"] and len(numerics) == 3
    for row in numerics[1:]:
        assert all(0 <= float(cell) < tolerance / 1000 for cell in row[1:]), row
    cost = re.search(r"one evaluation of the sample \(16 × 64 tokens, 1 thread\): ([\d.]+) ms", cpu)
    assert cost and float(cost[1]) > 0, cpu

    assert "### A tiny shape (`--quick`): cost of one evaluation" in cpu
    assert "preset tiny with a vocabulary of 512 tokens" in cpu
    assert [row[:2] for row in shape[1:]] == [["CPU", "1"], ["CPU", "2"]]
    for row in shape[1:]:
        tokens_per_s, flops = float(row[4].replace(",", "")), float(row[5])
        assert math.isfinite(tokens_per_s) and tokens_per_s > 0 and math.isfinite(flops) and flops > 0, row
