"""Smoke test of bench/reveal_size.py: a `--quick` run (the tiny preset, a few steps on a CPU) codes
its boundary states, checks that each decodes to the same bits and state hash (the script exits
otherwise; a background job of the session, `support.bench_jobs`), and writes a section whose parts
add up, keeping the report's notes and other sections."""

from __future__ import annotations

import re

from support.bench_jobs import MARKER

from distrai.protocol.run import load_run_config, shipped_config_path


def test_a_quick_run_writes_a_consistent_section_and_keeps_the_rest(reveal_size_bench):
    run = reveal_size_bench.completed()
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    output = reveal_size_bench.report
    text = output.read_text()
    assert text.endswith(f"{MARKER}\nHand-written notes.\n")
    assert "## an earlier run" in text and "# old" not in text
    assert "`python bench/reveal_size.py --quick --output" in text
    rows = [line for line in text.splitlines() if re.match(r"\| \d+ \| ", line)]
    assert [row.split("|")[1].strip() for row in rows] == ["4", "8"]
    rounded = "AdamW's moments rounded to bfloat16 at every boundary (every 4 steps)" in text
    assert rounded == (
        load_run_config(shipped_config_path("gpu-subnet")).train.boundary_moments == "bfloat16"
    )
    for row in rows:
        cells = [float(c.strip().rstrip("%")) for c in row.strip("|").split("|")]
        parameters, exp_avg, exp_avg_sq, rest, coded, raw = cells[2:8]
        assert abs(parameters + exp_avg + exp_avg_sq + rest - coded) < 0.005
        assert raw == 12.0 and 0 < coded < raw
        # a rounded moment's low 16 bits code to nothing: under 2 of its 4 bytes (3.1-3.3 unrounded)
        assert (max(exp_avg, exp_avg_sq) < 2.0) == rounded, row
    compressors = re.findall(r"^\| (zstd level 1|zlib level 6|lzma preset 1) \|", text, re.MULTILINE)
    assert compressors == ["zstd level 1", "zlib level 6", "lzma preset 1"]
