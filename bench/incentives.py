"""Pay per unit of verified work, measured with the project's own scoring; writes docs/incentives.md.

In one process (a local network is too slow on 2 shared cores), on `bench/incentives.toml` (the tiny
model, the built-in corpus, 64-token sequences, 64 sequences measured per update), through the
project's inner loop, codec, `measure_updates`, `score_window` and `outer_step`
(`bench/_incentive_windows.py`):

a. miners at ¼×, 1× and 4× speed and a miner whose step is split over 2 data-parallel ranks (2× the
   steps: two GPUs' worth), all on their own assigned data, over several windows of the global
   model: their pay per token, target within ±10% of one another;
b. the 4× compute as 1, 2 and 4 hotkeys in the same windows: total pay, target within ±10% of one
   hotkey's;
c. the window-to-window spread of each honest miner's pay per token;
d. the validator's total cost per window at 256 miners on `distrai/configs/gpu-subnet.toml`, from
   measured parts (`bench/_validator_cost.py`), target ≤ 5% of one miner's compute;
e. the aggregation weights (equal, by tokens, by score) with and without the median-norm clip, the
   same ¼×, 1×, 4× miners and windows from the same base: the held-out loss after the last window.

The pay per token is judged only in windows whose marks are measurable (`scoring.marks_judged`), which
they are not from the initial model, so the base is pre-trained for a few windows first.

    python bench/incentives.py            # about 12 minutes on 2 shared cores (726 s measured)
    python bench/incentives.py --quick    # every code path in well under a minute; numbers mean nothing
"""

from __future__ import annotations

import argparse
import shlex
import sys
import time
from datetime import UTC, datetime
from pathlib import Path

import torch
from _incentive_windows import WEIGHTINGS, Miner, Run, Trainer, WindowRecord, advance, heldout_loss, hotkey
from _incentives_report import Plan, Results, markdown, print_report
from _report import Machine
from _scale_accounting import account
from _validator_cost import ValidatorCost, cost_parts, measure_update, model_shapes, time_cosines
from rich.console import Console

from distrai.node import linkcheck
from distrai.protocol.globalmodel import GlobalModel
from distrai.protocol.run import RunConfig, load_run_config, shipped_config_path
from distrai.protocol.runtime import Runtime, build_runtime
from distrai.train.outer import OuterState

ROOT = Path(__file__).resolve().parent.parent
DEFAULT_OUTPUT = ROOT / "docs" / "incentives.md"
BENCH_CONFIG = Path(__file__).resolve().parent / "incentives.toml"

FULL = Plan(unit_steps=40, segment_steps=10, pretrain_windows=3, pay_windows=8, aggregation_windows=4)
QUICK = Plan(
    unit_steps=4,
    segment_steps=1,
    pretrain_windows=1,
    pay_windows=2,
    aggregation_windows=1,
    usefulness_sequences=16,
    heldout_fraction=0.02,
    cosine_miners=32,
    quick=True,
)

GPU_MINERS, GPU_VALIDATORS = 256, 16
GPU_STEPS = 1840
"""an H100 miner's steps per window on the GPU config: 46 segments of 40 at 0.643 s a step, measured
(docs/gpu.md; docs/protocol.md, "How long a miner trains")"""
GPU_STEP_SECONDS = 65_536 / 101_863
"""a step of 32 × 2,048 tokens at the 101,863 tokens/s measured on an H100 (docs/gpu.md)"""
BLOCK_SECONDS = 12.0
LINK_BITS = 100e6


def speed_miners(unit: int) -> list[Miner]:
    return [
        Miner("¼×", hotkey("Quarter"), unit // 4),
        Miner("1×", hotkey("One"), unit),
        Miner("4×", hotkey("Four"), 4 * unit),
        Miner("2 ranks", hotkey("TwoRanks"), 2 * unit, ranks=2),
    ]


def split_miners(unit: int) -> dict[str, list[Miner]]:
    """The 4× miner's compute as 2 and as 4 hotkeys (its own is the 1-hotkey row)."""
    return {
        f"{k} hotkeys": [
            Miner(f"4× as {k} hotkeys, #{i + 1}", hotkey(f"Split{k}x{i}"), 4 * unit // k) for i in range(k)
        ]
        for k in (2, 4)
    }


def plan_config(config: RunConfig, plan: Plan) -> RunConfig:
    train = config.train.model_copy(
        update={"inner_steps": 4 * plan.unit_steps, "segment_steps": plan.segment_steps}
    )
    scoring, data = config.scoring, config.data
    if plan.usefulness_sequences is not None:
        scoring = scoring.model_copy(update={"usefulness_sequences": plan.usefulness_sequences})
    if plan.heldout_fraction is not None:
        data = data.model_copy(update={"heldout_fraction": plan.heldout_fraction})
    return config.model_copy(update={"train": train, "scoring": scoring, "data": data})


def run_windows(
    rt: Runtime,
    trainer: Trainer,
    run: Run,
    miners: list[Miner],
    windows: int,
    weighting: str,
    *,
    scored: bool,
    console: Console,
    label: str,
) -> tuple[Run, list[WindowRecord]]:
    """`windows` windows of `miners`, clipped as the run's config says, not evaluated."""
    records = []
    for _ in range(windows):
        run, record = advance(
            rt,
            trainer,
            run,
            miners,
            weighting,
            rt.config.outer.clip_to_median_norm,
            scored=scored,
            evaluated=False,
        )
        records.append(record)
        console.log(f"{label}: window {record.window} done")
    return run, records


def aggregation_runs(
    rt: Runtime, trainer: Trainer, base: Run, miners: list[Miner], windows: int, console: Console
) -> dict[tuple[str, bool], list[WindowRecord]]:
    """Every weighting with and without the clip, window by window in lockstep (so the trainer reuses
    the updates of variants still bit for bit alike)."""
    variants = [(weighting, clip) for weighting in WEIGHTINGS for clip in (True, False)]
    runs = dict.fromkeys(variants, base)
    records: dict[tuple[str, bool], list[WindowRecord]] = {v: [] for v in variants}
    for _ in range(windows):
        for variant in variants:
            runs[variant], record = advance(
                rt, trainer, runs[variant], miners, *variant, scored=False, evaluated=True
            )
            records[variant].append(record)
        console.log(f"aggregation weights: window {record.window} done")
    return records


def pretrained(rt: Runtime, trainer: Trainer, plan: Plan, console: Console) -> Run:
    """The initial model after the pre-training windows of three 1× miners, equal weights."""
    run = Run(GlobalModel(1, rt.initial_params(), OuterState(momentum={})))
    warm = [Miner(f"pre-training miner {i}", hotkey(f"Warm{i}"), plan.unit_steps) for i in range(3)]
    run, _ = run_windows(
        rt,
        trainer,
        run,
        warm,
        plan.pretrain_windows,
        "equal",
        scored=False,
        console=console,
        label="pre-training",
    )
    return run


def validator_cost(plan: Plan, bench_shapes: dict[str, tuple[int, ...]]) -> ValidatorCost:
    """The GPU config at 256 miners and 16 validators; a quick run times an update of the bench's
    model (`bench_shapes`) and scales it."""
    gpu = load_run_config(shipped_config_path("gpu-subnet"))
    params = linkcheck.parameter_count(gpu)
    update = measure_update(gpu, bench_shapes if plan.quick else model_shapes(gpu), params)
    cosine_seconds = time_cosines(plan.cosine_miners, GPU_MINERS, gpu.scoring.duplicate_cosine)
    accounting = account(gpu, GPU_MINERS, GPU_VALIDATORS, GPU_STEPS, params)
    window_seconds = gpu.windows.blocks_per_window * BLOCK_SECONDS
    parts = cost_parts(
        accounting,
        gpu,
        update,
        cosine_seconds,
        plan.cosine_miners,
        GPU_STEP_SECONDS,
        window_seconds,
        LINK_BITS,
    )
    return ValidatorCost(gpu, accounting, update, parts, LINK_BITS, GPU_STEP_SECONDS)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="every code path in well under a minute")
    parser.add_argument("--output", type=Path, default=DEFAULT_OUTPUT)
    args = parser.parse_args(argv)
    command = shlex.join(["python", "bench/incentives.py", *(sys.argv[1:] if argv is None else argv)])
    plan = QUICK if args.quick else FULL
    console = Console()
    started = time.perf_counter()
    torch.set_num_threads(1)

    config = plan_config(load_run_config(BENCH_CONFIG), plan)
    rt = build_runtime(config)
    trainer = Trainer(rt)
    run = pretrained(rt, trainer, plan, console)
    speeds, splits = speed_miners(plan.unit_steps), split_miners(plan.unit_steps)
    pay_miners = speeds + [m for group in splits.values() for m in group]
    _, pay_records = run_windows(
        rt, trainer, run, pay_miners, plan.pay_windows, "score", scored=True, console=console, label="pay"
    )
    aggregation = aggregation_runs(rt, trainer, run, speeds[:3], plan.aggregation_windows, console)
    cost = validator_cost(plan, rt.shapes())
    initial = rt.initial_params()
    results = Results(
        command=command,
        date=f"{datetime.now(UTC):%Y-%m-%d %H:%M} UTC",
        machine=Machine.here(),
        seconds=time.perf_counter() - started,
        plan=plan,
        config=config,
        parameters=sum(p.numel() for p in initial.values()),
        heldout_initial=heldout_loss(rt, initial),
        heldout_base=heldout_loss(rt, run.model.params),
        speeds=speeds,
        splits={"1 hotkey": [speeds[2]], **splits},
        pay_records=pay_records,
        aggregation=aggregation,
        cost=cost,
    )
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(markdown(results, args.output))
    print_report(results, console)
    console.print(f"wrote {args.output}")


if __name__ == "__main__":
    main()
