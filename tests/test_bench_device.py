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

from distrai.data.byte_tokenizer import byte_tokenizer
from distrai.train.loss import causal_lm_loss
from distrai.train.optimizer import make_inner_optimizer, set_lr
from distrai.train.step import train_step

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "bench"))
import convergence  # noqa: E402
from _device import (  # noqa: E402
    Batches,
    DeviceConfig,
    cosine_lr,
    new_model,
    plan_steps,
    quick_device,
    save_initial_model,
    train_ddp,
    warm_steps,
)
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
    # from the initial model: 3 methods x 4 workers x 0.1 s x ROUND_OVERHEAD 1.1 = 1.32 s a step, so
    # 660 s fit 500 steps
    cold = replace(config, warm_start=0.0)
    steps, target, bound = plan_steps(cold, parameters, 0.1, 660)
    assert (steps, target) == (500, 6250) and bound.startswith("time: 660 s")
    assert plan_steps(cold, parameters, 0.1, 659)[0] == 450, "a multiple of H"
    assert plan_steps(cold, parameters, 0.1, 1)[0] == 50, "at least one round"
    # DiLoCo from DDP's model after half the steps: DDP's whole run and two halves, 0.88 s a step
    assert plan_steps(config, parameters, 0.1, 660)[0] == 750
    with pytest.raises(ValueError, match="multiple of H"):
        replace(config, steps=75)


def test_diloco_starts_where_ddp_stood_after_the_warm_start(tmp_path):
    """The warm start is a multiple of H that leaves DiLoCo a round; every method loads the same saved
    initial model (the preset's width, `layers` layers); DDP hands over its model after the warm start,
    the same bits as a DDP run of the same schedule stopped there."""
    config = replace(
        quick_device(DeviceConfig(device="cpu")), inner_steps=2, steps=8, warm_start=0.4, layers=1
    )
    assert [warm_steps(replace(config, warm_start=w), 8) for w in (0.0, 0.3, 0.4, 0.9)] == [0, 2, 4, 6]
    assert warm_steps(config, 2) == 0, "DiLoCo keeps at least one round"
    tokenizer = byte_tokenizer()
    folder = save_initial_model(config, tokenizer, tmp_path / "initial")
    models = [new_model(config, folder, tokenizer, torch.device("cpu")) for _ in range(2)]
    assert models[0].config.num_hidden_layers == 1
    assert all(torch.equal(a, b) for a, b in zip(models[0].parameters(), models[1].parameters(), strict=True))
    batches = Batches(torch.randint(0, 256, (200, config.seq_len)), config, torch.device("cpu"))
    handed_over = train_ddp(config, models[0], batches, 8, 4)
    stopped = models[1]
    optimizer = make_inner_optimizer(stopped, config.optimizer())
    for step in range(4):
        set_lr(optimizer, cosine_lr(config, step, 8))
        train_step(
            stopped, optimizer, batches.step(step), loss_fn=causal_lm_loss, micro_batches=config.workers
        )
    assert all(torch.equal(handed_over[n], p.detach()) for n, p in stopped.named_parameters())
    assert not all(torch.equal(handed_over[n], p.detach()) for n, p in models[0].named_parameters())


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
    warm = warm_steps(config, config.steps)
    assert warm > 0
    rounds = (config.steps - warm) // config.inner_steps
    assert rows[1][1] == rows[2][1] == f"{config.inner_steps} × {rounds}, from step {warm}"
    assert f"DiLoCo starts from DDP's model after {warm} of the {config.steps} steps" in section
    tokens = config.steps * config.workers * config.worker_batch * config.seq_len
    assert f"{config.steps:,} steps per worker for every method: {tokens:,} tokens" in section
    assert "bound: set by --steps" in section and "corpus sha256 `" in section
