"""Smoke test of bench/gpu.py: a `--quick` run on the CPU writes every table, every loop runs (the
target among them, with its verdict), the profiled loops' time is split by kind (the compiled step
with the atomic-free kernels runs no sort, scatter or index_put under deterministic algorithms, where
the plain compiled loop falls back to them), every piece repeats bit for bit (the compiled step also
in a fresh process that reuses no compile decision), two gloo ranks, under DDP and sharded (FSDP2),
agree with a one-process replay of their split, and the step table repeats every project step and
compiles the compiled one again in a fresh process to the same bits."""

from __future__ import annotations

import re
import sys
from pathlib import Path

from support.bench_jobs import KEPT, MARKER
from test_bench_smoke import table_after

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "bench"))
from _gpu_loops import BEST, KERNELS_COMPILED, STEPS  # noqa: E402


def test_quick_run_writes_every_table(gpu_bench):
    run = gpu_bench.completed()
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    text = gpu_bench.report.read_text()
    assert "`python bench/gpu.py --quick --device cpu --output" in text and text.endswith(f"{MARKER}\n{KEPT}")
    assert "# old report" not in text

    speeds = table_after(text, "## Throughput: preset tiny")
    assert len(speeds) == 1 + 9
    for loop, tokens, ratio, *_ in speeds[1:]:
        assert float(tokens.replace(",", "")) > 0, (loop, tokens)
        assert ratio.endswith("×")
    ratios = dict((row[0], row[2]) for row in speeds[1:])
    assert ratios["target: bare loop under torch.compile, no deterministic algorithms"] == "1.00×"
    shipped = ratios["project, fast config, pulled toward the base on the device (the GPU config's step)"]
    verdict = re.search(r"measured side by side in this process: ([0-9.]+)×, (met|MISSED)\.", text)
    assert verdict and verdict.group(1) + "×" == shipped
    assert (verdict.group(2) == "met") == (float(verdict.group(1)) >= 0.9)

    kinds = profile_by_kind(text)
    assert kinds[0][1:] == ["GPU config's step", "compiled, atomic-free", "compiled, deterministic", "target"]
    by_kind = {row[0]: row[1:] for row in kinds[1:]}
    assert all(float(ms.replace(",", "")) > 0 for ms in by_kind["**sum of kernels**"]), by_kind
    assert all(ms.startswith("0.0 ") for ms in by_kind["compiled (inductor)"][:1]), (
        "the eager step compiles nothing"
    )
    assert all(not ms.startswith("0.0 ") for ms in by_kind["compiled (inductor)"][1:]), by_kind
    assert all(not ms.startswith("0.0 ") for ms in by_kind["matmul"]), by_kind
    # counted, not timed: on a CPU a fallback's time per step is near the table's 0.1-ms resolution
    fallbacks = by_kind["calls of sort, scatter, index_put"]
    assert fallbacks[1] == "0" and int(fallbacks[2]) > 0, (
        "under deterministic algorithms the plain compiled loop falls back to eager scatter and index_put; "
        "the atomic-free one has none left"
    )
    assert by_kind["distinct compiled graphs run"] == ["0", "2", "2", "2"], (
        "forward and backward, no graph break"
    )

    pieces = table_after(text, "## What repeats bit for bit")
    assert len(pieces) == 1 + 10 and all(row[1] == "yes" for row in pieces[1:]), pieces
    by_piece = {row[0]: row for row in pieces[1:]}
    compiled = "project, fast config, model under torch.compile"
    assert by_piece[f"{compiled}, compiled again in a fresh process"][1:] == by_piece[compiled][1:], (
        "a second process compiling afresh makes kernels that give the first one's bits"
    )
    assert by_piece["reference: fp32, eager, AdamW"][2] == "yes"
    assert by_piece["foreach AdamW"][2] == "yes", "foreach AdamW gives the single-tensor bits"

    steps = table_after(text, "## The step side by side: preset tiny")
    assert [row[0] for row in steps[1:]] == [loop.name for loop in STEPS]
    for name, tokens, ratio, repeats, fresh, _ in steps[1:]:
        assert float(tokens.replace(",", "")) > 0 and ratio.endswith("×"), steps
        # the target (no deterministic algorithms) may or may not: its compiled CPU kernels add with atomics
        assert repeats == "yes" or name == BEST.name, (name, repeats)
        assert fresh == ("yes" if name == KERNELS_COMPILED.name else "–"), (name, fresh)
    assert "The fastest step that replays bit for bit" in text.split("## The step side by side", 1)[1]

    ranks = table_after(text, "## Data-parallel ranks")
    assert [row[:5] for row in ranks[1:]] == [
        ["2", "DDP", "yes", "0.00e+00", "0.00e+00"],
        ["2", "FSDP2 (sharded)", "yes", "0.00e+00", "0.00e+00"],
    ], ranks


def profile_by_kind(text: str) -> list[list[str]]:
    """The rows of the profile's first table (time by kind), header first."""
    section = text.split("## Where a step's time goes", 1)[1].split("Longest kernels", 1)[0]
    rows = [line for line in section.splitlines() if line.startswith("|")]
    cells = [[cell.strip() for cell in row.strip("|").split("|")] for row in rows]
    return [cells[0], *cells[2:]]
