"""Smoke test of bench/data_memory.py: a `--quick --output` run (two small prepared datasets, a node
process each with H = 30) rewrites the section between its markers with one row per size whose
numbers parse and add up, keeping the rest of the file."""

from __future__ import annotations

import re

import pytest
from support.bench_jobs import DATA_AFTER, DATA_BEFORE, DATA_BEGIN, DATA_END

pytestmark = pytest.mark.e2e  # runs bench/data_memory.py and its node processes


def number(cell: str) -> float:
    return float(cell.replace(",", ""))


def test_a_quick_run_rewrites_its_section_and_keeps_the_rest(data_memory_bench):
    run = data_memory_bench.completed()
    output = data_memory_bench.report
    before, after = DATA_BEFORE, DATA_AFTER
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    text = output.read_text()
    assert text.startswith(before + DATA_BEGIN) and text.endswith(DATA_END + after)
    assert "stale" not in text
    section = text[len(before) : -len(after)]
    assert f"`python bench/data_memory.py --quick --output {output}`" in section
    assert "H 30)" in section
    header = next(line for line in section.splitlines() if line.startswith("| dataset |"))
    assert len(header.strip("|").split("|")) == 10
    rows = [line for line in section.splitlines() if re.match(r"\| (small|large) \|", line)]
    assert [row.split("|")[1].strip() for row in rows] == ["small", "large"]
    cells = [[c.strip() for c in row.strip("|").split("|")] for row in rows]
    for row in cells:
        tokens, shards, _, _, built, peak, fetched, mib_fetched, mib_disk = map(number, row[1:])
        assert tokens > 0 and 0 < fetched <= shards
        assert 0 < built <= peak
        assert 0 < mib_fetched <= mib_disk
    assert number(cells[1][1]) > 5 * number(cells[0][1])
    assert re.search(
        r"The dataset grew [\d,]+×; the node's peak RSS went from [\d.,]+ to [\d.,]+ MiB", section
    )
