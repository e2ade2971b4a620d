"""Pay per unit of checked work, measured with the project's own scoring; writes docs/incentives.md.

In one process (a local network is too slow on 2 shared cores), on `bench/incentives.toml` (the tiny
model, the built-in corpus, 64-token sequences, 16 sequences measured per update as on the GPU
config), through the project's inner loop, codec, `measure_updates`, `score_window`, pay
(`validators/pay.py`) and `outer_step` (`bench/_incentive_windows.py`):

a. honest miners at ¼×, 1× and 4× speed and a miner whose step is split over 2 data-parallel ranks,
   all on their own assigned data, over several windows of the global model: their pay per token,
   target within ±10% of one another;
b. the 4× compute as 1, 2 and 4 hotkeys in the same windows: total pay, target within ±10% of one
   hotkey's;
c. the gates window by window (`useful`, and the gain floor: pay up to the tokens an update's gain
   on the reserve vouches for): honest miner-windows they dock, target at most 1%; what the cheats
   of the windows (a miner claiming 2× and H of what it trains, one training only its last segment,
   a copier of the last aggregate's updates, one publishing its own update scaled to 1e-4) get
   through them, the scaled one at most its size's worth;
d. what those cheats earn over their lives at the GPU config, re-registering at once when caught
   (`validators/deterrence.py`, its arithmetic beside a simulation of the rule): target below the
   same hardware's honest pay, a copier at most 5% of an honest H100's;
e. the held-out loss of the aggregate's rule (weights by each update's measured gain on the
   window's reserve) against the rule before it (by claimed tokens), the same miners with an
   inflater and a copier among them, from the same base;
f. a validator's cost per window at 256 miners on `distrai/configs/gpu-subnet.toml`, by resource,
   from measured parts (`bench/_validator_cost.py`): GPU, CPU and link, each with its target.

    python bench/incentives.py            # about 15 minutes on 2 shared cores
    python bench/incentives.py --quick    # every code path in a few minutes; numbers mean nothing
    python bench/incentives.py --quick --maturity-windows 0   # the rule without maturing pay: MISSED
"""

from __future__ import annotations

import argparse
import dataclasses
import shlex
import sys
import time
from datetime import UTC, datetime
from pathlib import Path

import torch
from _incentive_lives import cheats, gpu_rule, life, maturity_sweep, worst_claim
from _incentive_windows import RULES, Miner, Run, Trainer, WindowRecord, advance, heldout_loss, hotkey
from _incentives_report import Plan, Results, markdown, print_report
from _report import Machine
from _scale_accounting import account
from _validator_cost import (
    ValidatorCost,
    cost_parts,
    measure_update,
    model_shapes,
    time_cosines,
    validator_spec,
)
from rich.console import Console

from distrai.node import linkcheck
from distrai.protocol.globalmodel import GlobalModel
from distrai.protocol.run import RunConfig, load_run_config, shipped_config_path
from distrai.protocol.runtime import Runtime, build_runtime
from distrai.train.outer import OuterState

ROOT = Path(__file__).resolve().parent.parent
DEFAULT_OUTPUT = ROOT / "docs" / "incentives.md"
BENCH_CONFIG = Path(__file__).resolve().parent / "incentives.toml"

FULL = Plan(
    unit_steps=40,
    segment_steps=10,
    pretrain_windows=3,
    pay_windows=8,
    aggregation_windows=4,
    lives_windows=1_000_000,
    lives=50_000,
)
QUICK = Plan(
    unit_steps=4,
    segment_steps=1,
    pretrain_windows=1,
    pay_windows=3,
    aggregation_windows=1,
    lives_windows=400,
    lives=200,
    heldout_fraction=0.02,
    cosine_miners=32,
    quick=True,
)

SHRINK = 1e-4
"""what the shrinking cheat scales its own honest update by"""
GPU_MINERS, GPU_VALIDATORS = 256, 16
GPU_STEPS = 1840
"""an H100 miner's steps per window on the GPU config: 46 segments of 40 at 0.643 s a step, measured
(docs/gpu.md; docs/protocol.md, "How long a miner trains")"""
GPU_STEP_SECONDS = 65_536 / 101_863
"""a step of 32 × 2,048 tokens at the 101,863 tokens/s measured on an H100 (docs/gpu.md)"""


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


def cheat_miners(unit: int, segment: int, inner_steps: int) -> list[Miner]:
    """Claims beyond the work, as `_incentive_lives.cheats` plays them at the GPU config."""
    return [
        Miner("inflater, 2×", hotkey("InflateTwo"), unit, claimed=2 * unit),
        Miner("inflater, H", hotkey("InflateH"), unit, claimed=inner_steps),
        Miner("last segment only", hotkey("LastSegment"), segment, claimed=inner_steps),
        Miner("copier", hotkey("Copier"), 0, claimed=unit, copies=True),
        Miner(f"own update × {SHRINK:g}", hotkey("Shrunk"), unit, scale=SHRINK),
    ]


def plan_config(config: RunConfig, plan: Plan) -> RunConfig:
    train = config.train.model_copy(
        update={"inner_steps": 4 * plan.unit_steps, "segment_steps": plan.segment_steps}
    )
    data = config.data
    if plan.heldout_fraction is not None:
        data = data.model_copy(update={"heldout_fraction": plan.heldout_fraction})
    return config.model_copy(update={"train": train, "data": data})


def run_windows(
    rt: Runtime,
    trainer: Trainer,
    run: Run,
    miners: list[Miner],
    windows: int,
    rule: str,
    *,
    evaluated: bool,
    console: Console,
    label: str,
) -> tuple[Run, list[WindowRecord]]:
    records = []
    for _ in range(windows):
        run, record = advance(rt, trainer, run, miners, rule, evaluated=evaluated)
        records.append(record)
        console.log(f"{label}: window {record.window} done")
    return run, records


def pretrained(rt: Runtime, trainer: Trainer, plan: Plan, console: Console) -> Run:
    """The initial model after the pre-training windows of three 1× miners under the run's rule."""
    run = Run(GlobalModel(1, rt.initial_params(), OuterState(momentum={})))
    warm = [Miner(f"pre-training miner {i}", hotkey(f"Warm{i}"), plan.unit_steps) for i in range(3)]
    run, _ = run_windows(
        rt,
        trainer,
        run,
        warm,
        plan.pretrain_windows,
        "gain",
        evaluated=False,
        console=console,
        label="pre-training",
    )
    return run


def aggregation_runs(
    rt: Runtime, trainer: Trainer, base: Run, miners: list[Miner], windows: int, console: Console
) -> dict[str, list[WindowRecord]]:
    """Each rule's windows from the same base, in lockstep (the trainer reuses updates still alike)."""
    runs = dict.fromkeys(RULES, base)
    records: dict[str, list[WindowRecord]] = {rule: [] for rule in RULES}
    for _ in range(windows):
        for rule in RULES:
            runs[rule], record = advance(rt, trainer, runs[rule], miners, rule, evaluated=True)
            records[rule].append(record)
        console.log(f"aggregation rules: window {record.window} done")
    return records


def validator_cost(plan: Plan, bench_shapes: dict[str, tuple[int, ...]]) -> ValidatorCost:
    """The GPU config at 256 miners and 16 validators; a quick run times an update of the bench's
    model (`bench_shapes`) and scales it."""
    gpu = load_run_config(shipped_config_path("gpu-subnet"))
    params = linkcheck.parameter_count(gpu)
    update = measure_update(gpu, bench_shapes if plan.quick else model_shapes(gpu), params)
    cosine_seconds = time_cosines(plan.cosine_miners, GPU_MINERS, gpu.scoring.duplicate_cosine)
    accounting = account(gpu, GPU_MINERS, GPU_VALIDATORS, GPU_STEPS, params)
    window_seconds = gpu.windows.blocks_per_window * 12.0
    spec = validator_spec()
    parts = cost_parts(
        accounting,
        gpu,
        update,
        cosine_seconds,
        plan.cosine_miners,
        GPU_STEP_SECONDS,
        window_seconds,
        spec=spec,
    )
    return ValidatorCost(gpu, accounting, update, parts, spec.download_bits, GPU_STEP_SECONDS, spec)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="every code path in a few minutes")
    parser.add_argument("--output", type=Path, default=DEFAULT_OUTPUT)
    parser.add_argument(
        "--maturity-windows",
        type=int,
        default=None,
        help="row d under another maturity than the GPU config's (0: pay at once), to see a rule fail",
    )
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
    cheaters = cheat_miners(plan.unit_steps, plan.segment_steps, config.train.inner_steps)
    pay_miners = speeds + [m for group in splits.values() for m in group] + cheaters
    _, pay_records = run_windows(
        rt, trainer, run, pay_miners, plan.pay_windows, "gain", evaluated=False, console=console, label="pay"
    )
    together = [*speeds[:3], cheaters[1], cheaters[3]]
    aggregation = aggregation_runs(rt, trainer, run, together, plan.aggregation_windows, console)

    gpu = load_run_config(shipped_config_path("gpu-subnet"))
    rule = gpu_rule(gpu)
    if args.maturity_windows is not None:
        rule = dataclasses.replace(rule, maturity=args.maturity_windows)
    lives = []
    for cheat in cheats(rule):
        lives.append(life(rule, cheat, plan.lives_windows, plan.lives))
        console.log(f"lives: {cheat.label} done")
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
        cheaters=cheaters,
        pay_records=pay_records,
        aggregation=aggregation,
        rule=rule,
        lives=lives,
        worst=worst_claim(rule),
        sweep=maturity_sweep(rule),
        cost=cost,
    )
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(markdown(results, args.output))
    print_report(results, console)
    console.print(f"wrote {args.output}")


if __name__ == "__main__":
    main()
