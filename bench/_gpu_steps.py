"""`bench/gpu.py --step-table`: the GPU config's step beside its forms with the atomic-free kernels
(eager, compiled under deterministic algorithms, compiled without them under inductor's own
deterministic mode) and the target, in one process on one preset: tokens per second, whether each
repeats bit for bit, and whether a validator's compile in a fresh process gives the miner's bits.

Each loop builds its model once (compiling it once): it trains `--replay-steps` steps from the
seeded start twice, the second time from the start's parameters copied back and a fresh AdamW (the
same compiled kernels run twice: "repeats bit for bit"), then times `--steps` steps after a warm-up.
Each compiled project loop that repeated is then compiled and trained again in a fresh process with
inductor's graph, autograd and autotuning caches off (`bench/gpu.py --end-hash`), as a validator's
process compiles the miner's step; those processes run side by side after every loop was timed, so
they time nothing (`--quick` runs the first of them only: every code path, in less time on a CPU). The verdict names the fastest step that repeated and whose fresh compile gave its bits,
against the target's tokens per second: done at 0.8×, the goal 0.9×."""

from __future__ import annotations

import re
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path

import torch
from _gpu_loops import (
    BEST,
    EVERY_LOOP,
    Loop,
    batches,
    build,
    optimizer_of,
    settings_of,
    step_of,
    step_seconds,
    token_vocab,
)

from distrai.train.memory import GIB
from distrai.train.train_state import capture_state, state_hash

DONE = 0.8
GOAL = 0.9


@dataclass(frozen=True)
class StepRow:
    loop: Loop
    tokens_per_s: float | None = None
    peak_gib: float | None = None
    end_hash: str | None = None
    """the state after the replay steps from the seeded start, in this process"""
    repeats: str = "–"
    fresh: str = "–"
    """whether a fresh process's compile and steps reached `end_hash`"""
    note: str = ""


def _restore(model: torch.nn.Module, start: dict[str, torch.Tensor]) -> None:
    with torch.no_grad():
        for name, p in model.named_parameters():
            p.copy_(start[name])


def measure(loop: Loop, preset: str, device: torch.device, args) -> StepRow:
    """Repeat and time `loop` in this process (see the module)."""
    if device.type == "cuda":
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats(device)
    try:
        with settings_of(loop):
            model, optimizer = build(loop, preset, device, args.vocab)
            step = step_of(loop, args.micro_batches)
            start = {n: p.detach().to("cpu", copy=True) for n, p in model.named_parameters()}
            work = batches(token_vocab(model), args.rows, args.seq_len, args.replay_steps)
            hashes = []
            for _ in range(2):
                _restore(model, start)
                optimizer = optimizer_of(loop, model)
                for batch in work:
                    step(model, optimizer, batch)
                hashes.append(state_hash(capture_state(model, optimizer, len(work))))
            timed = batches(token_vocab(model), args.rows, args.seq_len, args.steps + 1, seed=1)
            times = step_seconds(step, model, optimizer, timed, device, warmup=1)
            peak = torch.cuda.max_memory_allocated(device) / GIB if device.type == "cuda" else None
    except Exception as exc:  # a loop that cannot run here (no compiler, out of memory) is a row, not a crash
        return StepRow(loop, note=f"failed: {type(exc).__name__}: {str(exc).splitlines()[0][:160]}")
    del model, optimizer
    tokens = args.rows * args.seq_len / statistics.median(times)
    return StepRow(loop, tokens, peak, hashes[0], "yes" if hashes[0] == hashes[1] else "**no**")


def fresh_command(loop: Loop, preset: str, args) -> list[str]:
    """`bench/gpu.py --end-hash` of `loop` on `preset` with this run's sizes."""
    command = [sys.executable, str(Path(__file__).resolve().parent / "gpu.py"), "--end-hash"]
    command += [str(EVERY_LOOP.index(loop)), "--presets", preset, "--device", args.device]
    command += ["--rows", str(args.rows), "--seq-len", str(args.seq_len)]
    command += ["--micro-batches", str(args.micro_batches), "--replay-steps", str(args.replay_steps)]
    return command + (["--vocab", str(args.vocab)] if args.vocab else [])


def fresh_compiles(
    rows: list[StepRow],
    preset: str,
    args,
    failure: Callable,
    timeout: float,
    most: int | None = None,
    ahead: Path | None = None,
) -> list[StepRow]:
    """The loop of each compiled project row that repeated (at most `most` of them) compiled and
    trained again in a fresh process, all at once; a row that did not repeat cannot replay anyway.
    A loop whose fresh process already ran (`ahead`/<its `EVERY_LOOP` index>.txt holds that
    process's output, as `bench/device_session.sh` runs them beside the smoke window) is read there."""
    wanted = [i for i, r in enumerate(rows) if r.loop.compiled and r.loop.project and r.repeats == "yes"]
    wanted = wanted[:most]
    done = list(rows)
    for i in list(wanted):
        found = None if ahead is None else ahead / f"{EVERY_LOOP.index(rows[i].loop)}.txt"
        if found is not None and found.exists():
            wanted.remove(i)
            output = found.read_text(errors="replace")
            hashes = re.findall(r"^[0-9a-f]{64}$", output, re.MULTILINE)
            if hashes:
                done[i] = replace(rows[i], fresh="yes" if hashes[-1] == rows[i].end_hash else "**no**")
            else:
                done[i] = replace(rows[i], fresh=failure(subprocess.CompletedProcess([], 1, output, "")))
    running = {
        i: subprocess.Popen(
            fresh_command(rows[i].loop, preset, args),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for i in wanted
    }
    deadline = time.monotonic() + timeout
    for i, process in running.items():
        try:
            out, err = process.communicate(timeout=max(deadline - time.monotonic(), 1.0))
        except subprocess.TimeoutExpired:
            process.kill()
            process.communicate()
            done[i] = replace(rows[i], fresh=f"not measured: over {timeout:.0f} s")
            continue
        finished = subprocess.CompletedProcess(process.args, process.returncode, out, err)
        if process.returncode != 0:
            done[i] = replace(rows[i], fresh=failure(finished))
            continue
        done[i] = replace(rows[i], fresh="yes" if out.split()[-1] == rows[i].end_hash else "**no**")
    return done


def verdict(rows: list[StepRow]) -> str:
    """The fastest step that repeats (and, compiled, gives its bits in a fresh process) against the target."""
    target = next((r.tokens_per_s for r in rows if r.loop == BEST), None)
    replayable = [
        r
        for r in rows
        if r.loop.project
        and r.tokens_per_s
        and r.repeats == "yes"
        and (not r.loop.compiled or r.fresh == "yes")
    ]
    if not target or not replayable:
        return "No step both repeated bit for bit and was timed beside the target: no verdict."
    best = max(replayable, key=lambda r: r.tokens_per_s)
    ratio = best.tokens_per_s / target
    word = "the goal met" if ratio >= GOAL else "done" if ratio >= DONE else "MISSED"
    return (
        f"The fastest step that replays bit for bit (it repeated, and a fresh process's compile gave its "
        f"bits): “{best.loop.name}”, {ratio:.2f}× the target: {word} (done at {DONE}×, goal {GOAL}×)."
    )


def _cell(value: float | None, spec: str, unit: str = "") -> str:
    return "–" if value is None else f"{value:{spec}}{unit}"


def steps_section(preset: str, rows: list[StepRow], device: torch.device, args) -> str:
    target = next((r.tokens_per_s for r in rows if r.loop == BEST), None)
    lines = [
        f"## The step side by side: preset {preset}, {args.rows} × {args.seq_len} tokens in "
        f"{args.micro_batches} micro-batches",
        "",
        "| step | tokens/s (median step) | × target | repeats bit for bit | a fresh process's compile "
        "gives its bits | peak memory |",
        "|---|---:|---:|---|---|---:|",
    ]
    for r in rows:
        ratio = r.tokens_per_s / target if r.tokens_per_s and target else None
        memory = _cell(r.peak_gib, ".1f", " GiB") if device.type == "cuda" else "not measured (CPU)"
        tokens = _cell(r.tokens_per_s, ",.0f") if r.tokens_per_s else r.note
        fresh = r.fresh if r.loop.compiled and r.loop.project and r.fresh != "–" else "–"
        lines.append(
            f"| {r.loop.name} | {tokens} | {_cell(ratio, '.2f', '×')} | {r.repeats} | {fresh} | {memory} |"
        )
    lines += [
        "",
        f"Each step trained {args.replay_steps} steps from the seeded start twice in this process (the second "
        "time from the start's parameters copied back and a fresh AdamW, through the same compiled kernels), "
        f"then {args.steps} timed steps after a warm-up. A fresh process compiled each compiled project step "
        "anew with inductor's graph, autograd and autotuning caches off and trained the same steps: "
        "“gives its bits” compares its end state's hash with this process's.",
        "",
        verdict(rows),
    ]
    return "\n".join(lines)
