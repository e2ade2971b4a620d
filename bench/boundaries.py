"""A miner's segment boundaries, inline against off the training thread: the training thread's time
per boundary, the worker's, and host memory over a window of many boundaries; writes docs/boundaries.md.

    python bench/boundaries.py                       # preset 150m (the GPU config's model) on this CPU
    python bench/boundaries.py --quick               # the tiny model, seconds; every code path
    python bench/boundaries.py --quick --output FILE
    python bench/boundaries.py --device cuda --boundaries 4 --inline-boundaries 2 --segment-seconds 20

Each mode runs in a fresh process (its memory its own), on one thread, with the model and an AdamW
whose moments exist (one step of zero gradients), and makes `--boundaries` boundaries. Between two,
the process sleeps a segment's time on an H100 (`--segment-seconds`: 40 steps at the measured 0.643
s a step, docs/gpu.md): a GPU trains then, and the host's cores are free.

- `inline`: what the miner did before: at each boundary the training thread copies the state into
  fresh memory (`capture_state`), hashes it, sketches it and writes it to disk, and the window keeps
  every state (`inner_loop`'s `keep_states`).
- `worker`: what it does now (`distrai.train.boundaries`): the training thread waits for a free
  buffer (at most two states in the worker's hands), copies the state into it and goes on; the worker
  hashes, sketches (from the run's table of buckets and signs, `sketch.SketchTable`, built at the first
  boundary) and writes.

The training thread's time per boundary is the median over the boundaries after the first two (the
first captures allocate in both modes); its share of a GPU miner's window is that time over the
segment's time plus it. The worker's time is its hash, sketch and write of one boundary, the median.
Host memory is the process's resident memory after each boundary (`VmRSS`), and its peak (`VmHWM`).
On a GPU the copy runs from device memory into page-locked buffers over the host link, which this
CPU run does not measure.
"""

from __future__ import annotations

import argparse
import json
import shlex
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from _gpu_loops import sized_tokenizer  # noqa: E402
from gpu import GPU_CONFIG_VOCAB  # noqa: E402

from distrai.train.boundaries import BoundaryState, BoundaryWorker  # noqa: E402
from distrai.train.model import ModelSpec, load_model  # noqa: E402
from distrai.train.optimizer import InnerOptimizerConfig, make_inner_optimizer  # noqa: E402
from distrai.train.sketch import sketch  # noqa: E402
from distrai.train.train_state import capture_state, save_state, state_hash  # noqa: E402

DOC = ROOT / "docs" / "boundaries.md"
NOTES = "<!-- Notes below this line are kept when the benchmark rewrites this file. -->"
H100_STEP_SECONDS = 0.643
"""the GPU config's step on an H100, measured (docs/gpu.md)"""
SEGMENT_STEPS = 40
SKETCH_SIZE = 64
SHARE_TARGET = 0.02
"""the boundary's share of a GPU miner's wall time (issue 44)"""


@dataclass(frozen=True)
class Mode:
    name: str
    thread_seconds: list[float]
    """the training thread's time at each boundary"""
    worker_seconds: list[float]
    """hash + sketch + write of each boundary, wherever it ran"""
    rss: list[int]
    """resident bytes after each boundary"""
    peak: int
    state_bytes: int

    @property
    def thread_median(self) -> float:
        return statistics.median(self.thread_seconds[2:] or self.thread_seconds)

    def share(self, segment_seconds: float) -> float:
        return self.thread_median / (segment_seconds + self.thread_median)


def resident(field: str) -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1]) * 1024
    raise RuntimeError(f"no {field} in /proc/self/status: this benchmark measures memory on Linux")


def run_mode(
    name: str, preset: str, boundaries: int, segment_seconds: float, folder: Path, device: str
) -> dict:
    """One mode in this process; what it measured, as JSON-ready numbers."""
    torch.set_num_threads(1)
    vocab = None if preset == "tiny" else GPU_CONFIG_VOCAB
    model = load_model(ModelSpec(preset=preset), tokenizer=sized_tokenizer(vocab), device=device)
    optimizer = make_inner_optimizer(model, InnerOptimizerConfig())
    for p in model.parameters():
        p.grad = torch.zeros_like(p)
    optimizer.step()
    for p in model.parameters():
        p.grad = None
    worker_seconds: list[float] = []
    thread_seconds: list[float] = []
    rss: list[int] = []
    kept = []

    def write(b: BoundaryState) -> None:
        assert b.state is not None
        path = folder / f"{b.step:06d}.safetensors"
        save_state(b.state, path)
        path.unlink()  # the write is measured; the disk need not hold the run

    worker = BoundaryWorker("bench", SKETCH_SIZE, write, keep_states=False) if name == "worker" else None
    state_bytes = 0
    try:
        for index in range(boundaries):
            if index:
                time.sleep(segment_seconds)  # the GPU trains the segment; the host's cores are free
            step = index * SEGMENT_STEPS
            started = time.perf_counter()
            if worker is None:
                state = capture_state(model, optimizer, step)
                work_started = time.perf_counter()
                numbers = sketch(
                    state.params, "bench", SKETCH_SIZE
                ).tolist()  # hashed at every boundary, as before
                write(BoundaryState(step, state_hash(state), numbers, state))
                worker_seconds.append(time.perf_counter() - work_started)
                kept.append(state)
            else:
                state = capture_state(model, optimizer, step, worker.buffer())
                worker.submit(state)
            thread_seconds.append(time.perf_counter() - started)
            state_bytes = sum(
                t.numel() * t.element_size() for t in [*state.params.values(), *state.optimizer.values()]
            )
            rss.append(resident("VmRSS"))
        if worker is not None:
            worker.finish()
            worker_seconds = worker.seconds
    finally:
        if worker is not None:
            worker.close()
    return {
        "name": name,
        "thread_seconds": thread_seconds,
        "worker_seconds": worker_seconds,
        "rss": rss,
        "peak": resident("VmHWM"),
        "state_bytes": state_bytes,
    }


def measure_one(name: str, preset: str, boundaries: int, segment_seconds: float, device: str) -> Mode:
    """One mode in a fresh process: its memory is its own."""
    with tempfile.TemporaryDirectory(prefix="distrai-boundaries-") as folder:
        command = [
            sys.executable,
            __file__,
            "--mode",
            name,
            "--presets",
            preset,
            "--boundaries",
            str(boundaries),
            "--segment-seconds",
            str(segment_seconds),
            "--folder",
            folder,
            "--device",
            device,
        ]
        done = subprocess.run(command, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"the {name} run failed:\n{done.stdout[-2000:]}{done.stderr[-3000:]}")
    return Mode(**json.loads(done.stdout.strip().splitlines()[-1]))


def gb(n: float) -> str:
    return f"{n / 1e9:.2f}"


def report(preset: str, modes: list[Mode], segment_seconds: float, command: str, device: str) -> str:
    inline, worker = modes
    lines = [
        "# A miner's segment boundaries: inline and off the training thread",
        "",
        f"- command: `{command}`",
        f"- date: {datetime.now(UTC).strftime('%Y-%m-%d %H:%M UTC')}",
        f"- machine: the model on {device}{' (' + torch.cuda.get_device_name() + ')' if device.startswith('cuda') else ''}, "
        f"one host thread each for training and the worker, torch {torch.__version__}; preset {preset}, "
        f"a state of {gb(inline.state_bytes)} GB (parameters and AdamW moments, fp32)",
        f"- between boundaries: {segment_seconds:g} s, a segment of {SEGMENT_STEPS} steps at an H100's "
        f"{H100_STEP_SECONDS} s a step (docs/gpu.md), as sleep: the GPU trains then",
        "",
        "| mode | training thread per boundary (median, s) | worker per boundary: hash + sketch + write (median, s) "
        "| share of a GPU miner's wall time | resident after each boundary (GB) | peak resident (GB) |",
        "|---|---|---|---|---|---|",
    ]
    for m in modes:
        lines.append(
            f"| {m.name} | {m.thread_median:.3f} | "
            f"{statistics.median(m.worker_seconds):.3f}{' (on the training thread)' if m.name == 'inline' else ''} | "
            f"{m.share(segment_seconds):.2%} | {', '.join(gb(r) for r in m.rss)} | {gb(m.peak)} |"
        )
    growth = (worker.rss[-1] - worker.rss[min(2, len(worker.rss) - 1)]) / max(worker.state_bytes, 1)
    inline_growth = (
        (inline.rss[-1] - inline.rss[0]) / max(len(inline.rss) - 1, 1) / max(inline.state_bytes, 1)
    )
    share_met = worker.share(segment_seconds) <= SHARE_TARGET
    keeps_up = statistics.median(worker.worker_seconds) <= segment_seconds
    lines += [
        "",
        "## Targets",
        "",
        f"- The boundary's share of a GPU miner's wall time ≤ {SHARE_TARGET:.0%}: {worker.share(segment_seconds):.2%} "
        f"({'MET' if share_met else 'MISSED'}; inline it was {inline.share(segment_seconds):.2%}). "
        + (
            "The copy ran from the GPU into page-locked host memory."
            if device.startswith("cuda")
            else "On a CPU the copy is a host memory copy; on a GPU it is a device-to-host copy into page-locked "
            "memory, which this run does not measure."
        ),
        f"- Host memory flat in the number of boundaries: after the third boundary it moved by {growth:+.2f} states "
        f"over {len(worker.rss) - 3} more boundaries ({'MET' if abs(growth) < 0.5 else 'MISSED'}); inline it grew by "
        f"{inline_growth:.2f} of a state per boundary.",
        f"- The worker keeps up with the trainer: {statistics.median(worker.worker_seconds):.2f} s per boundary against "
        f"{segment_seconds:g} s of a segment ({'MET' if keeps_up else 'MISSED'}; when it does not, the trainer waits "
        "for a buffer and the share above grows).",
        "",
        NOTES,
    ]
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--presets", default="150m", help="the model preset (150m: the GPU config's)")
    parser.add_argument("--boundaries", type=int, default=8)
    parser.add_argument(
        "--inline-boundaries", type=int, default=4, help="the inline mode keeps every state: fewer"
    )
    parser.add_argument("--segment-seconds", type=float, default=SEGMENT_STEPS * H100_STEP_SECONDS)
    parser.add_argument("--quick", action="store_true", help="the tiny model, 6 boundaries 0.5 s apart")
    parser.add_argument("--output", type=Path, default=DOC)
    parser.add_argument(
        "--device", default="cpu", help="where the model trains: cpu, or cuda (copies to pinned host memory)"
    )
    parser.add_argument("--mode", choices=("inline", "worker"), help=argparse.SUPPRESS)
    parser.add_argument("--folder", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.mode:
        print(
            json.dumps(
                run_mode(
                    args.mode, args.presets, args.boundaries, args.segment_seconds, args.folder, args.device
                )
            )
        )
        return
    if args.quick:
        args.presets, args.boundaries, args.inline_boundaries, args.segment_seconds = "tiny", 6, 6, 0.5
    modes = [
        measure_one("inline", args.presets, args.inline_boundaries, args.segment_seconds, args.device),
        measure_one("worker", args.presets, args.boundaries, args.segment_seconds, args.device),
    ]
    command = "python bench/boundaries.py " + shlex.join(sys.argv[1:])
    text = report(args.presets, modes, args.segment_seconds, command.strip(), args.device)
    kept = ""
    if args.output.exists() and NOTES in (old := args.output.read_text()):
        kept = old.split(NOTES, 1)[1].lstrip("\n")
    args.output.write_text(text + kept)
    print(text)


if __name__ == "__main__":
    main()
