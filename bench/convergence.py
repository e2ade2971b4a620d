"""Convergence, traffic, distillation and throughput benchmark; writes docs/benchmarks.md.

One model and one token budget, 4 workers: DDP (gradients all-reduced every step over gloo)
against DiLoCo with fp32, int8 and top-k pseudo-gradients, on held-out loss, bytes sent per
parameter per worker, and wall time; then distillation versus plain pre-training at equal steps,
and the project's inner loop against a bare PyTorch loop in tokens per second.

    python bench/convergence.py            # the full run (about 10 minutes on 2 cores)
    python bench/convergence.py --quick    # seconds; every code path, meaningless numbers
"""

from __future__ import annotations

import argparse
import json
import shlex
import socket
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path

import torch.multiprocessing as mp
from _config import BenchConfig, load_data, quick, worker_schedule
from _distill import compare_distillation
from _ranks import RESULTS_FILE, TEACHER_FILE, run_rank
from _report import Machine, Report, kept_notes, markdown, print_tables
from _throughput import compare_throughput
from rich.console import Console

from distrai.train.model import count_parameters, load_model

DEFAULT_OUTPUT = Path(__file__).resolve().parent.parent / "docs" / "benchmarks.md"


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--quick", action="store_true", help="tiny sizes, for the smoke test")
    parser.add_argument("--output", type=Path, default=DEFAULT_OUTPUT, help="markdown file to write")
    return parser.parse_args(argv)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def main(argv: list[str]) -> None:
    args = parse_args(argv)
    config = quick(BenchConfig()) if args.quick else BenchConfig()
    console = Console(width=180)
    started = time.perf_counter()
    with tempfile.TemporaryDirectory() as workdir:
        console.print(f"training {len(config.codecs) + 1} methods on {config.workers} worker processes …")
        mp.spawn(run_rank, args=(config, workdir, free_port()), nprocs=config.workers, join=True)
        rows = json.loads((Path(workdir) / RESULTS_FILE).read_text())["rows"]
        tokenizer, data = load_data(config)
        schedule = worker_schedule(config, data, 0)
        console.print("distillation versus plain pre-training …")
        distill = compare_distillation(config, tokenizer, data, schedule, Path(workdir) / TEACHER_FILE)
    console.print("inner-loop throughput …")
    batches = [data.batch(schedule[step % len(schedule)]) for step in range(config.throughput_steps)]
    throughput = compare_throughput(config, tokenizer, batches)
    report = Report(
        command=shlex.join(["python", *sys.argv]),
        date=datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC"),
        machine=Machine.here(),
        config=config,
        parameters=count_parameters(load_model(config.model_spec(), tokenizer=tokenizer)),
        rows=rows,
        distill=distill,
        throughput=throughput,
        total_seconds=time.perf_counter() - started,
    )
    print_tables(report, console)
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(markdown(report, kept_notes(args.output)))
    console.print(f"wrote {args.output} in {report.total_seconds:.0f} s")


if __name__ == "__main__":
    main(sys.argv[1:])
