"""The fast path benchmark: how close the project's training step comes to the best PyTorch loop,
what repeats bit for bit, and what a miner on several data-parallel ranks costs a one-process replay;
writes docs/gpu.md.

    python bench/gpu.py                      # a GPU: presets 150m and 1b, 32 x 2048 tokens in 4 micro-batches
    python bench/gpu.py --device cpu --presets tiny --rows 8 --seq-len 128 --micro-batches 2 --steps 8
    python bench/gpu.py --quick              # seconds on a CPU; every code path, for the smoke test
    python bench/gpu.py --presets 150m --throughput-only --profile   # where the step's time goes
    python bench/gpu.py --presets 150m --step-table   # the step that replays against the target (issue 33)

Four parts, each on the same device in one run:

1. Throughput of the loops in `_gpu_loops.py`: the project's step in the previous GPU config and in
   the fast one (plain and with the model under `torch.compile`, and compiled with the atomic-free
   kernels of `distrai.train.kernels`), against a bare loop with the fast
   config's settings, plain and compiled, and against the target: the compiled bare loop with a
   PyTorch user's fastest settings (no deterministic algorithms), run in the same process. Tokens per
   second from the median step time after two warm-up steps (compilation happens there); MFU against
   the card's dense bf16 peak (`--peak-tflops`, known for H100 and H200); peak memory on a GPU, beside
   the estimate of `distrai.train.memory` for the fast config. With `--profile`, one more step of the
   GPU config's step, the deterministic compiled loops and the target under `torch.profiler`: time by
   kind of kernel and the longest kernels (`_gpu_profile.py`); `--profiled-only` times only those.
2. Which pieces repeat bit for bit: each trains `--replay-steps` steps twice from the same start;
   and whether each gives the reference's bits.
3. Data-parallel ranks: torchrun runs `_gpu_ranks.py` on W processes (NCCL over W GPUs, gloo on a
   CPU), under DDP and with the model sharded (FSDP2), one after the other in one launch per W, and
   one process replays the same steps with the same split (`ranks` = W, `sharded` for FSDP2); the
   table gives whether the two agree bit for bit, the relative distance ‖replay − ranks‖ /
   ‖ranks − start‖ and the largest per-step loss drift |loss_replay − loss_ranks| / |loss_ranks| (as
   validators compare them), the ranks' tokens per second against W times one process's (scaling
   efficiency), and on a GPU rank 0's peak memory.
4. The step table (`--step-table` alone, or at the end of `--quick`; `_gpu_steps.py`): the GPU
   config's step beside its atomic-free forms and the target, each repeated, each compiled one
   compiled again in a fresh process.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import statistics
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

import torch
from _gpu_loops import (
    BEST,
    EVERY_LOOP,
    FAST,
    FAST_COMPILED,
    PIECES,
    PROFILED,
    REFERENCE,
    SHIPPED,
    STEPS,
    THROUGHPUT,
    Loop,
    batches,
    build,
    flops_per_token,
    settings_of,
    sized_tokenizer,
    step_of,
    step_seconds,
    token_vocab,
)
from _gpu_profile import Profile, profile_section, profile_step
from _gpu_steps import fresh_compiles, measure, steps_section
from _report import NOTES_MARKER, Machine, kept_notes
from rich.console import Console
from rich.markdown import Markdown
from safetensors.torch import load_file
from transformers import LlamaForCausalLM

from distrai.train.determinism import configure_determinism
from distrai.train.loss import causal_lm_loss
from distrai.train.memory import GIB, ModelShape, plan_memory
from distrai.train.model import preset_config
from distrai.train.step import StepConfig, step_with
from distrai.train.train_state import capture_state, state_hash

ROOT = Path(__file__).resolve().parent.parent
PEAK_TFLOPS = {"H100": 989.0, "H200": 989.0}
"""Dense bf16 tensor-core peak of the SXM parts, TFLOP/s."""
TARGET = 0.90
"""The GPU config's step must reach this share of the target loop's tokens per second."""
FRESH_TIMEOUT_S = 600.0
"""How long the step table waits for its fresh processes' compiles and steps."""


@dataclass(frozen=True)
class Speed:
    loop: Loop
    tokens_per_s: float | None
    peak_gib: float | None
    note: str = ""
    profile: Profile | None = None


@dataclass(frozen=True)
class RanksRow:
    world: int
    mode: str
    exact: bool | None
    distance: float | None
    loss_drift: float | None
    tokens_per_s: float | None
    peak_gib: float | None
    note: str = ""


GPU_CONFIG_VOCAB = 50257
"""`data.vocab_size` of `distrai/configs/gpu-subnet.toml` (GPT-2's BPE)."""
MODES = {"ddp": "DDP", "fsdp": "FSDP2 (sharded)"}


def release(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats(device)


def time_loop(loop: Loop, preset: str, device: torch.device, args: argparse.Namespace) -> Speed:
    """Median step time of `loop` over `args.steps` steps after two warm-up steps, under the loop's
    settings; with `args.profile`, one more step of a `PROFILED` loop under the profiler."""
    release(device)
    try:
        with settings_of(loop):
            model, optimizer = build(loop, preset, device, args.vocab)
            step = step_of(loop, args.micro_batches)
            work = batches(token_vocab(model), args.rows, args.seq_len, args.steps + 2)
            times = step_seconds(step, model, optimizer, work, device, warmup=2)
            peak = torch.cuda.max_memory_allocated(device) / GIB if device.type == "cuda" else None
            profiled = None
            if args.profile and loop in PROFILED:
                profiled = profile_step(step, model, optimizer, work[-1], device)
    except Exception as exc:  # a loop that cannot run here (no compiler, out of memory) is a row, not a crash
        return Speed(loop, None, None, f"failed: {type(exc).__name__}: {str(exc).splitlines()[0][:160]}")
    del model, optimizer
    return Speed(loop, args.rows * args.seq_len / statistics.median(times), peak, profile=profiled)


def end_hash(loop: Loop, preset: str, device: torch.device, args: argparse.Namespace) -> str:
    with settings_of(loop):
        model, optimizer = build(loop, preset, device, args.vocab)
        step = step_of(loop, args.micro_batches)
        work = batches(token_vocab(model), args.rows, args.seq_len, args.replay_steps)
        for batch in work:
            step(model, optimizer, batch)
    return state_hash(capture_state(model, optimizer, len(work)))


def pieces(preset: str, device: torch.device, args: argparse.Namespace) -> list[tuple[str, str, str, str]]:
    """(piece, repeats bit for bit, the reference's bits, the fast config's bits) for every piece, and
    for the compiled step compiled again in a fresh process, as a validator compiles the miner's step."""
    reference, fast = end_hash(REFERENCE, preset, device, args), end_hash(FAST, preset, device, args)
    rows = []
    for loop in PIECES:
        try:
            first, second = end_hash(loop, preset, device, args), end_hash(loop, preset, device, args)
        except Exception as exc:  # a piece that cannot run here is a row, not a crash
            rows.append((loop.name, f"failed: {type(exc).__name__}", "–", "–"))
            continue
        same = ("yes" if first == reference else "no", "yes" if first == fast else "no")
        rows.append((loop.name, "yes" if first == second else "**no**", *same))
        if loop == FAST_COMPILED:
            rows.append(fresh_process_row(loop, first, reference, fast, preset, args))
    return rows


def fresh_process_row(
    loop: Loop, here: str, reference: str, fast: str, preset: str, args: argparse.Namespace
) -> tuple[str, str, str, str]:
    """`loop` compiled and trained in another process that reuses none of this one's compile
    decisions (`--end-hash` turns inductor's graph, autograd and autotuning caches off there; only a
    kernel whose source comes out the same is not compiled again); "repeats bit for bit" compares
    its end with this process's."""
    name = f"{loop.name}, compiled again in a fresh process"
    command = [sys.executable, str(Path(__file__).resolve()), "--end-hash", str(EVERY_LOOP.index(loop))]
    command += ["--presets", preset, "--device", args.device, "--rows", str(args.rows)]
    command += ["--seq-len", str(args.seq_len), "--micro-batches", str(args.micro_batches)]
    command += ["--replay-steps", str(args.replay_steps)]
    command += ["--vocab", str(args.vocab)] if args.vocab else []
    command += ["--nondeterministic"] if args.nondeterministic else []
    done = subprocess.run(command, capture_output=True, text=True, timeout=1800)
    if done.returncode != 0:
        return name, failure(done), "–", "–"
    there = done.stdout.split()[-1]
    same = ("yes" if there == reference else "no", "yes" if there == fast else "no")
    return name, "yes" if there == here else "**no**", *same


def failure(done: subprocess.CompletedProcess) -> str:
    """A table cell for a benchmark process that failed: its first line naming an error."""
    errors = [line for line in (done.stdout + done.stderr).splitlines() if "Error" in line]
    return f"failed: {(errors or ['no output'])[0][:160]}"


def compile_afresh() -> None:
    """Turn off the caches through which a compile reuses an earlier process's decisions: traced and
    lowered graphs, and the configurations autotuning chose."""
    torch._inductor.config.fx_graph_cache = False
    torch._inductor.config.autotune_local_cache = False
    torch._functorch.config.enable_autograd_cache = False


def ranks_rows(
    world: int, modes: list[str], preset: str, device: torch.device, args: argparse.Namespace
) -> list[RanksRow]:
    """`world` data-parallel processes, one torchrun launch running each of `modes` (ddp, fsdp) in
    turn (`_gpu_ranks.py`), against one process replaying their split: a row per mode."""
    if device.type == "cuda" and torch.cuda.device_count() < world:
        note = f"not measured: {torch.cuda.device_count()} GPU(s) here"
        return [RanksRow(world, mode, None, None, None, None, None, note) for mode in modes]
    with tempfile.TemporaryDirectory() as folder:
        out = Path(folder)
        command = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc-per-node={world}"]
        command += [
            str(ROOT / "bench" / "_gpu_ranks.py"),
            str(out),
            preset,
            str(args.rows),
            str(args.seq_len),
        ]
        command += [str(args.micro_batches), str(args.replay_steps), device.type, ",".join(modes)]
        command += [str(args.vocab or 0)]
        env = {
            **os.environ,
            "PYTHONPATH": os.pathsep.join([str(ROOT / "bench"), os.environ.get("PYTHONPATH", "")]),
        }
        done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=1800)
        rows = []
        for mode in modes:
            results = out / mode / "result.json"
            if not results.exists():  # the launch failed before this mode was done
                rows.append(RanksRow(world, mode, None, None, None, None, None, failure(done)))
                continue
            ranks = load_file(str(out / mode / "params.safetensors"))
            rows.append(replay_row(world, mode, ranks, json.loads(results.read_text()), preset, device, args))
    return rows


def replay_row(
    world: int,
    mode: str,
    ranks: dict[str, torch.Tensor],
    result: dict,
    preset: str,
    device: torch.device,
    args: argparse.Namespace,
) -> RanksRow:
    """One process replaying the split of `world` ranks in `mode`, against their end parameters
    `ranks` and their `result` (losses, tokens per second, peak memory)."""
    model, optimizer = build(FAST, preset, device, args.vocab)
    start = {name: p.detach().float().cpu().clone() for name, p in model.named_parameters()}
    split = StepConfig(
        micro_batches=args.micro_batches,
        cpu_threads=None,
        autocast=FAST.autocast,
        ranks=world,
        sharded=mode == "fsdp",
    )
    losses = [
        step_with(split, model, optimizer, batch, causal_lm_loss).loss
        for batch in batches(model.config.vocab_size, args.rows, args.seq_len, args.replay_steps)
    ]
    replay = {name: p.detach().float().cpu() for name, p in model.named_parameters()}
    exact = all(torch.equal(replay[name], ranks[name]) for name in start) and losses == result["losses"]
    gap = sum(float((replay[n].double() - ranks[n].double()).pow(2).sum()) for n in start) ** 0.5
    moved = sum(float((ranks[n].double() - start[n].double()).pow(2).sum()) for n in start) ** 0.5
    drift = max(abs(r - t) / max(abs(t), 1e-12) for t, r in zip(result["losses"], losses, strict=True))
    return RanksRow(world, mode, exact, gap / moved, drift, result["tokens_per_s"], result["peak_gib"])


def peak_flops(device: torch.device, args: argparse.Namespace) -> float | None:
    if args.peak_tflops:
        return args.peak_tflops * 1e12
    if device.type == "cuda":
        name = torch.cuda.get_device_name(device)
        for key, tflops in PEAK_TFLOPS.items():
            if key in name:
                return tflops * 1e12
    return None


def fmt(value: float | None, spec: str, unit: str = "") -> str:
    return "–" if value is None else f"{value:{spec}}{unit}"


def throughput_section(
    preset: str, speeds: list[Speed], device: torch.device, args: argparse.Namespace
) -> str:
    with torch.device("meta"):  # the shape without the memory or the time of building the model
        model = LlamaForCausalLM(preset_config(preset, sized_tokenizer(args.vocab), attention=FAST.attention))
    shape = ModelShape.of(model, FAST.autocast)
    fpt = flops_per_token(shape.params, shape.layers, args.seq_len, shape.hidden)
    estimate = shape.state_bytes() + shape.activation_bytes(
        args.rows // args.micro_batches, args.seq_len, False
    )
    peak = peak_flops(device, args)
    best = next((s.tokens_per_s for s in speeds if s.loop == BEST), None)
    lines = [
        f"## Throughput: preset {preset} ({shape.params:,} parameters), {args.rows} × {args.seq_len} tokens "
        f"in {args.micro_batches} micro-batches",
        "",
        "| loop | tokens/s (median step) | × target | MFU | peak memory |",
        "|---|---:|---:|---:|---:|",
    ]
    for s in speeds:
        ratio = s.tokens_per_s / best if s.tokens_per_s and best else None
        mfu = s.tokens_per_s * fpt / peak if s.tokens_per_s and peak else None
        memory = fmt(s.peak_gib, ".1f", " GiB") if device.type == "cuda" else "not measured (CPU)"
        tokens = fmt(s.tokens_per_s, ",.0f") if s.tokens_per_s else s.note
        lines.append(
            f"| {s.loop.name} | {tokens} | {fmt(ratio, '.2f', '×')} | {fmt(mfu, '.1%')} | {memory} |"
        )
    plan = plan_memory(shape, args.rows, args.seq_len, args.micro_batches, 10**15)
    shipped = next((s.tokens_per_s for s in speeds if s.loop == SHIPPED), None)
    if shipped and best:
        verdict = "met" if shipped / best >= TARGET else "MISSED"
        lines += [
            "",
            f'Target: the GPU config\'s step (the "{SHIPPED.name}" row) at ≥ {TARGET:.0%} of the target '
            f"row's tokens/s, measured side by side in this process: {shipped / best:.2f}×, {verdict}.",
        ]
    lines += [
        "",
        f"FLOPs per token 6N + 6·L·T·d = {fpt / 1e9:.3f} GFLOP. The estimate of `distrai.train.memory` for the "
        f"fast config at this split: {estimate / GIB:.2f} GiB ({plan.describe().split(':')[0]}), with the "
        f"window's base on the device as the GPU config's step holds it; "
        f"{(estimate - shape.state_bytes() + shape.state_bytes(base_on_host=True)) / GIB:.2f} GiB with it in "
        "host memory. The other loops do not hold it.",
    ]
    return "\n".join(lines)


def pieces_section(preset: str, rows: list[tuple[str, str, str, str]], args: argparse.Namespace) -> str:
    lines = [
        f"## What repeats bit for bit: preset {preset}, {args.replay_steps} steps from one start, twice",
        "",
        "| piece | repeats bit for bit | the reference's bits | the fast config's bits |",
        "|---|---|---|---|",
    ]
    lines += [f"| {name} | {repeats} | {reference} | {fast} |" for name, repeats, reference, fast in rows]
    return "\n".join(lines)


def ranks_section(
    preset: str, rows: list[RanksRow], single: float | None, device: torch.device, args: argparse.Namespace
) -> str:
    lines = [
        f"## Data-parallel ranks against a one-process replay: preset {preset}, fast config, "
        f"{args.replay_steps} steps",
        "",
        "| ranks W | ranks | bit-exact | distance | loss drift | tokens/s, W ranks | scaling efficiency "
        "| peak memory, rank 0 |",
        "|---:|---|---|---:|---:|---:|---:|---:|",
    ]
    for r in rows:
        if r.exact is None:
            lines.append(f"| {r.world} | {MODES[r.mode]} | {r.note} | – | – | – | – | – |")
            continue
        efficiency = r.tokens_per_s / (r.world * single) if single and r.tokens_per_s else None
        memory = fmt(r.peak_gib, ".1f", " GiB") if device.type == "cuda" else "not measured (CPU)"
        lines.append(
            f"| {r.world} | {MODES[r.mode]} | {'yes' if r.exact else 'no'} | {r.distance:.2e} "
            f"| {r.loss_drift:.2e} | {fmt(r.tokens_per_s, ',.0f')} | {fmt(efficiency, '.2f')} | {memory} |"
        )
    lines += [
        "",
        "Distance: ‖replay − ranks‖ / ‖ranks − start‖ over the parameters; loss drift: the largest "
        "|loss_replay − loss_ranks| / |loss_ranks| over the steps; bit-exact: parameters and losses equal. "
        "Scaling efficiency: the W ranks' tokens per second over W × one process's (the fast config's row "
        "above). On a CPU every rank runs one thread (torchrun's default) against the one process's "
        f"{torch.get_num_threads()}, and the ranks share the cores, so only the distances mean anything there.",
    ]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--presets", nargs="+", default=["150m", "1b"])
    parser.add_argument("--rows", type=int, default=32, help="sequences per step")
    parser.add_argument("--seq-len", type=int, default=2048)
    parser.add_argument("--micro-batches", type=int, default=4)
    parser.add_argument("--steps", type=int, default=10, help="timed steps per loop, after two warm-up steps")
    parser.add_argument("--replay-steps", type=int, default=4, help="steps of each determinism and ranks run")
    parser.add_argument("--ranks", type=int, nargs="*", default=[2, 4], help="data-parallel widths to replay")
    parser.add_argument(
        "--modes", nargs="+", default=list(MODES), choices=list(MODES), help="DDP, sharded (FSDP2), or both"
    )
    parser.add_argument(
        "--vocab",
        type=int,
        default=None,
        help=f"the models' vocabulary (default: {GPU_CONFIG_VOCAB:,}, the GPU config's, on a GPU; the byte "
        "tokenizer's on a CPU)",
    )
    parser.add_argument("--peak-tflops", type=float, default=None, help="the device's dense bf16 peak")
    parser.add_argument("--output", type=Path, default=ROOT / "docs" / "gpu.md")
    parser.add_argument(
        "--throughput-only", action="store_true", help="time the loops only: no replays and no ranks"
    )
    parser.add_argument(
        "--nondeterministic",
        action="store_true",
        help="a PyTorch user's fastest settings instead of the project's deterministic ones (TF32, cuDNN "
        "autotuning, no deterministic algorithms): what the loops give up for bit-exact replay",
    )
    parser.add_argument(
        "--profile",
        action="store_true",
        help="profile one step of the GPU config's step, the deterministic compiled loop and the target",
    )
    parser.add_argument(
        "--quick", action="store_true", help="tiny preset, few steps: every code path in seconds"
    )
    parser.add_argument(
        "--end-hash",
        type=int,
        default=None,
        metavar="LOOP",
        help="print the end state's hash of the LOOP-th loop (`_gpu_loops.EVERY_LOOP`) on the first preset, "
        "compiled without inductor's caches, and stop (what the pieces and step tables run in a fresh process)",
    )
    parser.add_argument(
        "--fresh-hashes",
        type=Path,
        default=None,
        metavar="DIR",
        help="the step table reads a compiled step's fresh-process output from DIR/<loop index>.txt when there "
        "(`--end-hash` run ahead, as bench/device_session.sh does) instead of starting the process",
    )
    parser.add_argument(
        "--profiled-only",
        action="store_true",
        help="time only the loops --profile profiles (the GPU config's step, the compiled loops, the target)",
    )
    parser.add_argument(
        "--step-table",
        action="store_true",
        help="only the step table on the first preset: the GPU config's step beside its atomic-free forms, "
        "eager and compiled with and without deterministic algorithms, and the target; each repeated, and "
        "each compiled one compiled again in a fresh process",
    )
    args = parser.parse_args(argv)
    if args.quick:
        args.presets, args.rows, args.seq_len, args.micro_batches = ["tiny"], 4, 32, 2
        args.steps, args.replay_steps, args.ranks, args.profile = 2, 2, [2], True
    device = torch.device(args.device)
    if args.vocab is None and device.type == "cuda":
        args.vocab = GPU_CONFIG_VOCAB
    if args.nondeterministic:
        torch.set_float32_matmul_precision("high")
        torch.backends.cudnn.benchmark = True
    else:
        configure_determinism(device)
    if args.end_hash is not None:
        compile_afresh()
        print(end_hash(EVERY_LOOP[args.end_hash], args.presets[0], device, args))
        return 0
    console = Console()
    machine = Machine.here()
    name = torch.cuda.get_device_name(device) if device.type == "cuda" else machine.cpu
    command = shlex.join(["python", "bench/gpu.py", *(argv if argv is not None else sys.argv[1:])])
    vocab = f"vocabulary {args.vocab:,}" if args.vocab else "the byte tokenizer's vocabulary"
    header = [
        "# The fast path: throughput, determinism and data-parallel replay (`bench/gpu.py`)",
        "",
        f"Command: `{command}`. Device: {name}; torch {machine.torch}; "
        f"{datetime.now(UTC).strftime('%Y-%m-%d')}; models with {vocab}"
        f"{'; nondeterministic settings (TF32, cuDNN autotuning, no deterministic algorithms)' if args.nondeterministic else ''}. One run: ratios between rows are "
        "what counts.",
    ]
    notes = kept_notes(args.output)
    sections: list[str] = []

    def add(section: str, replacing: bool = False, show: bool = True) -> None:
        """Print a section and rewrite the page with it, so a run cut short keeps what it measured; a
        section `replacing` the last one is a later form of it."""
        if replacing:
            sections[-1] = section
        else:
            sections.append(section)
        if show:
            console.print(Markdown(section))
        args.output.write_text("\n\n".join(["\n".join(header), *sections]) + f"\n\n{NOTES_MARKER}\n{notes}")

    if args.step_table:
        step_table(args.presets[0], device, args, add, console)
        console.print(f"wrote {args.output}")
        return 0
    for i, preset in enumerate(args.presets):
        with console.status(f"timing the loops on preset {preset}"):
            loops = [loop for loop in THROUGHPUT if loop in PROFILED or not args.profiled_only]
            speeds = [time_loop(loop, preset, device, args) for loop in loops]
        add(throughput_section(preset, speeds, device, args))
        profiles = {PROFILED[s.loop]: s.profile for s in speeds if s.profile is not None}
        if profiles:
            add(profile_section(preset, profiles, device))
        if i > 0 or args.throughput_only:
            continue
        with console.status(f"replaying each piece twice on preset {preset}"):
            add(pieces_section(preset, pieces(preset, device, args), args))
        if not args.ranks:
            continue
        with console.status(f"data-parallel ranks on preset {preset}"):
            by_world = [ranks_rows(w, args.modes, preset, device, args) for w in args.ranks]
            rows = [row for mode in args.modes for rows_of in by_world for row in rows_of if row.mode == mode]
        single = next(s.tokens_per_s for s in speeds if s.loop == FAST)
        add(ranks_section(preset, rows, single, device, args))
    if args.quick and not args.throughput_only:
        step_table(args.presets[0], device, args, add, console)
    console.print(f"wrote {args.output}")
    return 0


def step_table(preset: str, device: torch.device, args: argparse.Namespace, add, console: Console) -> None:
    """The step table (`_gpu_steps.py`), its section rewritten after every row, so a run cut short
    keeps the rows it measured."""
    rows = []
    for loop in STEPS:
        with console.status(f"repeating and timing “{loop.name}” on preset {preset}"):
            rows.append(measure(loop, preset, device, args))
        add(steps_section(preset, rows, device, args), replacing=len(rows) > 1, show=False)
        r = rows[-1]
        console.print(f"{loop.name}: {fmt(r.tokens_per_s, ',.0f') if r.tokens_per_s else r.note} tokens/s")
    release(device)
    with console.status("compiling the compiled steps again in fresh processes"):
        rows = fresh_compiles(
            rows,
            preset,
            args,
            failure,
            FRESH_TIMEOUT_S,
            most=1 if args.quick else None,
            ahead=args.fresh_hashes,
        )
    add(steps_section(preset, rows, device, args), replacing=True)


if __name__ == "__main__":
    sys.exit(main())
