"""Convergence, traffic, distillation and throughput benchmark; writes docs/benchmarks.md.

One model and one token budget, 4 workers: DDP (gradients all-reduced every step over gloo)
against DiLoCo with fp32, int8 and top-k pseudo-gradients, on held-out loss, bytes sent per
parameter per worker, and wall time; then distillation versus plain pre-training at equal steps,
and (on the templated corpus) the project's inner loop against a bare PyTorch loop in tokens per
second. Each corpus has its own section of the report: the templated built-in corpus, or real text
(the Python standard library's sources under a BPE tokenizer, prepared into token shards).

    python bench/convergence.py                  # the templated corpus (about 10 minutes on 2 cores; add one method's time with --peer torchft)
    python bench/convergence.py --corpus real    # real text, with the shipped combination's row
    python bench/convergence.py --corpus real --sweep   # and the sweep around it (outer lr × momentum, decay, delay)
    python bench/convergence.py --quick --corpus templated real   # seconds; every code path, meaningless numbers
    python bench/convergence.py --peer torchft   # also torchft's DiLoCo (pip install -e .[bench])
    python bench/convergence.py --device cuda    # one GPU: DDP against DiLoCo at a fair budget (under 8 minutes on an H100)
    python bench/convergence.py --device cpu --quick              # the device mode's every code path, on a CPU

The device mode (`_device.py`) replaces the corpus runs: one process, DDP as one large batch and DiLoCo's
workers one after another on the same device, on the running Python's installed sources; it writes its
own section of the report.
"""

from __future__ import annotations

import argparse
import json
import shlex
import socket
import sys
import tempfile
import time
from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path

import _peer_torchft
import torch
import torch.multiprocessing as mp
from _config import (
    CORPORA,
    PEERS,
    BenchConfig,
    PreparedSource,
    for_corpus,
    load_data,
    prepare_text,
    quick,
    worker_schedule,
)
from _corpus import Corpus, installed_corpus, stdlib_corpus, token_bytes
from _device import DeviceConfig, quick_device, run_device
from _device_report import device_section, print_device
from _distill import compare_distillation
from _ranks import RESULTS_FILE, TEACHER_FILE, run_rank
from _report import Machine, Report, markdown, print_tables, recorded_corpus_sha256, section
from _throughput import compare_throughput
from rich.console import Console

from distrai.train.model import count_parameters, load_model

DEFAULT_OUTPUT = Path(__file__).resolve().parent.parent / "docs" / "benchmarks.md"


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--quick", action="store_true", help="tiny sizes, for the smoke test")
    parser.add_argument(
        "--corpus",
        nargs="+",
        choices=CORPORA,
        default=["templated"],
        help="the corpora to run, each rewriting its own section of the report (default: templated)",
    )
    parser.add_argument(
        "--new-corpus",
        action="store_true",
        help="replace a real-text section measured on another corpus (another hash) than this machine's",
    )
    parser.add_argument(
        "--peer",
        choices=PEERS,
        help="also train another implementation's DiLoCo (torchft's; needs `pip install -e .[bench]`)",
    )
    parser.add_argument(
        "--sweep",
        action="store_true",
        help="real text: also the sweep around the shipped combination (outer lr × momentum, error-feedback "
        "decay, no delay), its own table",
    )
    parser.add_argument("--output", type=Path, default=DEFAULT_OUTPUT, help="markdown file to write")
    parser.add_argument(
        "--device",
        choices=("cpu", "cuda"),
        help="the device mode on this device instead of the corpus runs (see above)",
    )
    parser.add_argument(
        "--run-seconds",
        type=float,
        help=f"device mode: the most the whole run may take; the steps are cut to fit (default {DeviceConfig().run_seconds:g})",
    )
    parser.add_argument(
        "--inner-steps", type=int, help=f"device mode: DiLoCo's H (default {DeviceConfig().inner_steps})"
    )
    return parser.parse_args(argv)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run_corpus(config: BenchConfig, corpus: Corpus | None, command: str, console: Console) -> Report:
    """Every run on `config.corpus` (`corpus`: the real text's files), in a temporary folder."""
    started = time.perf_counter()
    date = datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC")
    text = source = None
    with tempfile.TemporaryDirectory() as workdir:
        if corpus is not None:
            text = prepare_text(config, corpus, Path(workdir), console)
            source = PreparedSource(text.store, text.manifest_sha256)
        prepare_seconds = time.perf_counter() - started
        methods = len(config.codecs) + 1 + (config.peer is not None)
        console.print(f"training {methods} methods on {config.workers} worker processes …")
        mp.spawn(run_rank, args=(config, workdir, free_port(), source), nprocs=config.workers, join=True)
        rows = json.loads((Path(workdir) / RESULTS_FILE).read_text())["rows"]
        tokenizer, data = load_data(config, source, Path(workdir) / "cache-main")
        schedule = worker_schedule(config, data, 0)
        console.print("distillation versus plain pre-training …")
        distill = compare_distillation(config, tokenizer, data, schedule, Path(workdir) / TEACHER_FILE)
        targets = data.heldout[:, 1:]
        bytes_per_token = float(torch.tensor(token_bytes(tokenizer))[targets].sum()) / targets.numel()
        throughput = None
        if config.throughput_segments:
            console.print("inner-loop throughput …")
            batches = [data.batch(schedule[step % len(schedule)]) for step in range(config.throughput_steps)]
            throughput = compare_throughput(config, tokenizer, batches)
        heldout_sequences = data.heldout.shape[0]
    return Report(
        command=command,
        date=date,
        machine=Machine.here(),
        config=config,
        parameters=count_parameters(load_model(config.model_spec(), tokenizer=tokenizer)),
        rows=rows,
        distill=distill,
        throughput=throughput,
        total_seconds=time.perf_counter() - started,
        bytes_per_token=bytes_per_token,
        heldout_sequences=heldout_sequences,
        prepared=text,
        prepare_seconds=prepare_seconds if text is not None else 0.0,
    )


def run_device_mode(args: argparse.Namespace, console: Console) -> str:
    """The device mode's run and its report section."""
    config = DeviceConfig(device=args.device)
    if args.quick:
        config = quick_device(config)
    if args.run_seconds is not None:
        config = replace(config, run_seconds=args.run_seconds)
    if args.inner_steps is not None:
        config = replace(config, inner_steps=args.inner_steps)
    date = datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC")
    # the quick run reads the standard library alone: its held-out documents then do not depend on
    # what else this Python has installed (with only the [bench] extra, one of 36 bytes filled no sequence)
    corpus = stdlib_corpus(config.corpus_bytes) if args.quick else installed_corpus(config.corpus_bytes)
    with tempfile.TemporaryDirectory() as folder:
        run = run_device(config, corpus, Path(folder), console.print)
    print_device(run, console)
    return device_section(run, shlex.join(["python", *sys.argv]), date)


def main(argv: list[str]) -> None:
    args = parse_args(argv)
    if args.device is not None:
        console = Console(width=180)
        new = {"device": run_device_mode(args, console)}
        args.output.parent.mkdir(parents=True, exist_ok=True)
        args.output.write_text(markdown(new, args.output))
        console.print(f"wrote {args.output}")
        return
    configs = [
        replace(quick(for_corpus(c, args.sweep)) if args.quick else for_corpus(c, args.sweep), peer=args.peer)
        for c in dict.fromkeys(args.corpus)
    ]
    if args.peer is not None and (why := _peer_torchft.missing()) is not None:
        sys.exit(why)
    console = Console(width=180)
    started = time.perf_counter()
    corpus = None
    real = [config for config in configs if config.corpus == "real"]
    if real:
        corpus = stdlib_corpus(real[0].corpus_bytes)
        recorded = recorded_corpus_sha256(args.output)
        if recorded not in (None, corpus.sha256) and not args.new_corpus:
            sys.exit(
                f"{args.output}'s real-text numbers were measured on corpus {recorded}; this machine's standard "
                f"library (Python {corpus.python}) gives {corpus.sha256}. Runs on different corpora are not "
                "compared: pass --new-corpus to replace that section, or --output to write elsewhere."
            )
    command = shlex.join(["python", *sys.argv])
    new = {}
    for config in configs:
        report = run_corpus(config, corpus if config.corpus == "real" else None, command, console)
        print_tables(report, console)
        new[config.corpus] = section(report)
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(markdown(new, args.output))
    console.print(f"wrote {args.output} in {time.perf_counter() - started:.0f} s")


if __name__ == "__main__":
    main(sys.argv[1:])
