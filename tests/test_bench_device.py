"""The convergence benchmark's device mode (`bench/convergence.py --device`), on a CPU with a tiny budget.

What is checked: every method takes exactly the same batches (DDP's step t is the workers' batches of
step t, worker by worker), the schedule is one cosine over the global step, the step plan follows the
token target or the time bound and is a multiple of H, fresh and kept inner AdamW differ only in that,
and a quick run writes a section whose table follows from its own numbers while the report's other
sections and notes stay.
"""

from __future__ import annotations

import math
import re
import sys
from dataclasses import replace
from pathlib import Path

import pytest
import torch
from test_bench_smoke import table_after

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "bench"))
import convergence  # noqa: E402
from _device import Batches, DeviceConfig, cosine_lr, plan_steps, quick_device  # noqa: E402
from _report import NOTES_MARKER  # noqa: E402


def test_every_method_takes_the_same_rows():
    config = DeviceConfig(device="cpu", workers=3, worker_batch=4, seq_len=5)
    rows = torch.arange(70 * 5).view(70, 5)
    batches = Batches(rows, config, torch.device("cpu"))
    for step in (0, 1, 7):
        workers = [batches.worker(step, k) for k in range(3)]
        assert torch.equal(batches.step(step), torch.cat(workers))
    seen = torch.cat([batches.step(s) for s in range(7)])[:, 0] // 5  # 84 rows drawn
    assert sorted(seen[:70].tolist()) == list(range(70)), "the first 70 rows drawn are one pass over the data"
    second = seen[70:].tolist()
    assert len(set(second)) == 14 and second != seen[:14].tolist(), "the next pass is a new permutation"


def test_the_schedule_is_one_cosine_over_the_global_step():
    config = DeviceConfig(device="cpu", lr=1e-3, warmup_steps=10, final_lr_fraction=0.1)
    steps = 110
    assert cosine_lr(config, 0, steps) == pytest.approx(1e-4)
    assert cosine_lr(config, 9, steps) == pytest.approx(1e-3)
    assert cosine_lr(config, 10, steps) == pytest.approx(1e-3)
    assert cosine_lr(config, 60, steps) == pytest.approx(
        1e-3 * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * 50 / 99)))
    )
    assert cosine_lr(config, steps - 1, steps) == pytest.approx(1e-4)
    lrs = [cosine_lr(config, s, steps) for s in range(10, steps)]
    assert all(a >= b for a, b in zip(lrs, lrs[1:], strict=False))


def test_the_step_plan_follows_the_token_target_or_the_time_it_has():
    config = DeviceConfig(
        device="cpu", workers=4, worker_batch=8, seq_len=100, inner_steps=50, tokens_per_param=20
    )
    parameters = 1_000_000  # 20M tokens at 3,200 a step: 6,250 steps, 6,250 as a multiple of 50
    assert plan_steps(config, parameters, 0.01, 1e9) == (
        6250,
        6250,
        "the token target: 20 tokens per parameter",
    )
    # 3 methods x 4 workers x 0.1 s x ROUND_OVERHEAD 1.1 = 1.32 s a step: 660 s fit 500 steps
    steps, target, bound = plan_steps(config, parameters, 0.1, 660)
    assert (steps, target) == (500, 6250) and bound.startswith("time: 660 s")
    assert plan_steps(config, parameters, 0.1, 659)[0] == 450, "a multiple of H"
    assert plan_steps(config, parameters, 0.1, 1)[0] == 50, "at least one round"
    with pytest.raises(ValueError, match="multiple of H"):
        replace(config, steps=75)


def test_bad_settings_are_refused_by_name():
    with pytest.raises(ValueError, match="methods must start with 'ddp'"):
        DeviceConfig(methods=("diloco",))
    with pytest.raises(ValueError, match="at least 2 workers"):
        DeviceConfig(workers=1)


@pytest.fixture(scope="module")
def quick_report(tmp_path_factory) -> str:
    output = tmp_path_factory.mktemp("device") / "benchmarks.md"
    output.write_text(
        "# old report\n\n<!-- corpus: real -->\n## Real text (kept)\n\nrows\n\n"
        + NOTES_MARKER
        + "\nkept notes\n"
    )
    convergence.main(["--device", "cpu", "--quick", "--output", str(output)])
    return output.read_text()


def test_a_quick_run_writes_a_consistent_section_and_keeps_the_rest(quick_report):
    text = quick_report
    assert "## Real text (kept)" in text and text.endswith(NOTES_MARKER + "\nkept notes\n")
    assert (
        text.index("<!-- corpus: real -->") < text.index("<!-- corpus: device -->") < text.index(NOTES_MARKER)
    )
    section = text.split("<!-- corpus: device -->", 1)[1].split(NOTES_MARKER)[0]
    config = quick_device(DeviceConfig(device="cpu"))
    header, *rows = table_after(section, "## Device mode")
    assert header[:5] == ["method", "H × rounds", "held-out loss", "nats / byte", "ratio to DDP"]
    assert [row[0].split(",")[0].split(" (")[0] for row in rows] == ["DDP", "DiLoCo fp32", "DiLoCo fp32"]
    bytes_per_token = float(re.search(r"([\d.]+) bytes of text per held-out token", section).group(1))
    ddp_loss = float(rows[0][2])
    for row in rows:
        loss = float(row[2])
        assert math.isfinite(loss) and 0 < loss < 2 * math.log(config.vocab_size)
        assert float(row[3]) == pytest.approx(loss / bytes_per_token, rel=2e-3)
        assert float(row[4]) == pytest.approx(loss / ddp_loss, abs=1e-3)
    assert rows[1][1] == rows[2][1] == f"{config.inner_steps} × {config.steps // config.inner_steps}"
    tokens = config.steps * config.workers * config.worker_batch * config.seq_len
    assert f"{config.steps:,} steps per worker for every method: {tokens:,} tokens" in section
    assert "bound: set by --steps" in section and "corpus sha256 `" in section
