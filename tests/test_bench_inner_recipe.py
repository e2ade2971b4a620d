"""bench/inner_recipe.py: a fresh AdamW every window against one kept across windows.

The configuration is the GPU config's inner warm-up and outer step with two rows per H, and a `--quick`
run (two worker processes, seconds) writes its page: one row per H, both recipes trained, the same loss
over a single window (where they may not differ) and different losses over two (where the kept state
carries), the ratio following from the losses, the notes below the marker kept.
"""

from __future__ import annotations

import math

import pytest
from support.bench_jobs import KEPT, MARKER, bench_module
from test_bench_smoke import table_after

from distrai.protocol.run import load_run_config, shipped_config_path


def test_the_config_is_the_gpu_configs_recipe_with_two_rows_per_h():
    recipe = bench_module("inner_recipe")
    config = recipe.recipe_config((1840, 184), 3, 2, quick_run=False)
    gpu = load_run_config(shipped_config_path("gpu-subnet"))
    assert config.steps == 3 * 1840 and config.workers == 2 and not config.ddp
    assert config.warmup_steps == gpu.train.warmup_steps == 0
    assert [(c.inner_steps, c.keep_adamw) for c in config.codecs] == [
        (1840, False),
        (1840, True),
        (184, False),
        (184, True),
    ]
    for choice in config.codecs:
        assert choice.name == "none" and not choice.pipelined
        assert (choice.outer.lr, choice.outer.momentum, choice.outer.nesterov) == (
            gpu.outer.lr,
            gpu.outer.momentum,
            gpu.outer.nesterov,
        )
        assert choice.outer.clip_to_median_norm == gpu.outer.clip_to_median_norm
    with pytest.raises(ValueError, match="divide the longest"):
        recipe.recipe_config((1840, 200), 3, 2, quick_run=False)


def test_a_quick_run_trains_both_recipes_and_writes_its_page(inner_recipe_bench):
    run = inner_recipe_bench.completed()
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    output = inner_recipe_bench.report
    text = output.read_text()
    assert text.startswith("# The inner recipe at long windows\n") and "# old report" not in text
    assert text.endswith(f"{MARKER}\n{KEPT}")
    assert f"```\npython bench/inner_recipe.py --quick --output {output}" in text
    header, *rows = table_after(text, "# The inner recipe at long windows")
    assert header[0] == "H × windows" and header[3] == "fresh / kept"
    assert [row[0] for row in rows] == ["8 × 1", "4 × 2"]
    initial = float(text.split("held-out loss of the initial model ", 1)[1].split()[0])
    for _, fresh, kept, ratio, _ in rows:
        assert math.isfinite(float(fresh)) and math.isfinite(float(kept))
        assert float(fresh) < initial and float(kept) < initial  # both trained
        assert float(ratio) == pytest.approx(float(fresh) / float(kept), abs=2e-4)
    one_window, two_windows = rows
    assert one_window[1] == one_window[2]  # the first window is the same for both
    assert two_windows[1] != two_windows[2]  # from the second on, the kept state carries
