"""The inner recipe's cost at long windows: a fresh AdamW every window against one kept across windows.

Each window of the project starts a fresh AdamW (zero moments, step 0) from the window's base, and the
GPU config runs it with no warm-up (`warmup_steps = 0`) for about 1,840 inner steps a window on an H100;
torchft's DiLoCo keeps one AdamW across rounds. This trains both on the convergence benchmark's harness
(`_ranks.run_rank`, DDP off: the same worker processes over gloo, the same `train_step`, data assignment,
codec exchange and `outer_step`) at a long H and at a short one, every row from the same initial model on
the same batches in the same order:

- fresh: the project's `inner_loop`, a fresh AdamW at step 0 every window;
- kept: each worker's one AdamW across windows (`CodecChoice.keep_adamw`), the same steps through
  `run_steps`, the core of `inner_loop`, at the global step's learning rate (its warm-up once).

Both at the GPU config's inner warm-up (none: the learning rate is the same at every step of both, and
the first window of the two is the same) and outer step (its `[outer]`: plain SGD lr 1.5, no momentum,
clipped to the median norm) over fp32 pseudo-gradients (codec `none`), windows sequential. Real text:
the whole standard library the real-text corpus is drawn from (`_corpus.stdlib_corpus`), under the
benchmark's 4,096-token BPE and `tiny` preset. Writes its page (docs/inner-recipe.md; the notes below
its marker are kept).

    python bench/inner_recipe.py                 # H = 1,840 × 3 windows and H = 184 × 30, 2 workers (2,396 s on 2 shared cores)
    python bench/inner_recipe.py --inner-steps 1600 200 --rounds 3
    python bench/inner_recipe.py --quick --output FILE.md   # seconds: every code path, meaningless numbers
"""

from __future__ import annotations

import argparse
import json
import math
import shlex
import sys
import tempfile
import time
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from pathlib import Path

import torch
import torch.multiprocessing as mp
from _config import (
    BenchConfig,
    CodecChoice,
    PreparedSource,
    for_corpus,
    load_data,
    new_model,
    prepare_text,
    quick,
    shipped_choice,
)
from _corpus import Corpus, PreparedText, stdlib_corpus
from _ranks import RESULTS_FILE, run_rank
from _report import NOTES_MARKER, Machine, kept_notes
from convergence import free_port
from rich.console import Console
from rich.table import Table

from distrai.train.evaluate import evaluate
from distrai.train.model import count_parameters

DEFAULT_OUTPUT = Path(__file__).resolve().parent.parent / "docs" / "inner-recipe.md"
INNER_STEPS = (1840, 184)
"""The GPU config's window on an H100 (docs/gpu.md), and a tenth of it"""
ROUNDS = 3
"""windows at the longest H; every H runs the same steps"""
WORKERS = 2
CORPUS_BYTES = 10_000_000
"""more than the eligible standard library (8.8 MB on Python 3.11.7): all of it, so that the long run
passes over its training tokens fewer times than over the benchmark's 6 MB"""
QUICK_INNER_STEPS, QUICK_ROUNDS = (8, 4), 1
"""the quick run's longest H has one window, where the two recipes must agree (they differ from the
second window on), the shorter two"""
FRESH, KEPT = "fresh AdamW every window", "AdamW kept across windows"
HEADERS = (
    "H × windows",
    f"{FRESH} (the project's)",
    f"{KEPT} (torchft's)",
    "fresh / kept",
    "wall time fresh / kept (s)",
)


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--inner-steps",
        type=int,
        nargs="+",
        help=f"the H to compare at, each dividing the longest (default {' '.join(map(str, INNER_STEPS))})",
    )
    parser.add_argument("--rounds", type=int, help=f"windows at the longest H (default {ROUNDS})")
    parser.add_argument("--workers", type=int, default=WORKERS, help="worker processes (default %(default)s)")
    parser.add_argument(
        "--quick",
        action="store_true",
        help=f"tiny sizes, H {' and '.join(map(str, QUICK_INNER_STEPS))}: every code path, meaningless numbers",
    )
    parser.add_argument("--output", type=Path, default=DEFAULT_OUTPUT, help="markdown page to write")
    args = parser.parse_args(argv)
    if args.inner_steps is None:
        args.inner_steps = QUICK_INNER_STEPS if args.quick else INNER_STEPS
    if args.rounds is None:
        args.rounds = QUICK_ROUNDS if args.quick else ROUNDS
    return args


def label(h: int, keep: bool) -> str:
    return f"{KEPT if keep else FRESH}, H = {h}"


def recipe_config(inner_steps: tuple[int, ...], rounds: int, workers: int, quick_run: bool) -> BenchConfig:
    """The real-text benchmark's model and data, `workers` workers, no DDP, no warm-up, rounds × the longest
    H steps per worker, and two rows per H: fresh and kept AdamW, at the GPU config's outer step."""
    longest = max(inner_steps)
    if rounds < 1 or any(h < 1 or longest % h for h in inner_steps):
        raise ValueError(f"every H must divide the longest, {longest}, and rounds be positive: {inner_steps}")
    outer = shipped_choice(longest).outer
    choices = tuple(
        CodecChoice(label(h, keep), "none", {}, h, outer, keep_adamw=keep)
        for h in inner_steps
        for keep in (False, True)
    )
    base = quick(for_corpus("real")) if quick_run else replace(for_corpus("real"), corpus_bytes=CORPUS_BYTES)
    return replace(
        base,
        workers=workers,
        steps=rounds * longest,
        warmup_steps=0,
        segment_steps=math.gcd(*inner_steps),
        codecs=choices,
        ddp=False,
        throughput_segments=(),
    )


@dataclass(frozen=True)
class RecipeRun:
    config: BenchConfig
    prepared: PreparedText
    parameters: int
    initial_loss: float
    heldout_sequences: int
    rows: list[dict]
    prepare_seconds: float
    total_seconds: float
    date: str

    def row(self, h: int, keep: bool) -> dict:
        return next(r for r in self.rows if r["method"] == label(h, keep))

    @property
    def inner_steps(self) -> list[int]:
        return sorted({c.inner_steps for c in self.config.codecs}, reverse=True)


def run(config: BenchConfig, corpus: Corpus, console: Console) -> RecipeRun:
    started = time.perf_counter()
    date = datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC")
    with tempfile.TemporaryDirectory() as workdir:
        prepared = prepare_text(config, corpus, Path(workdir), console)
        source = PreparedSource(prepared.store, prepared.manifest_sha256)
        prepare_seconds = time.perf_counter() - started
        console.print(
            f"training {len(config.codecs)} rows of {config.steps} steps on {config.workers} worker processes …"
        )
        mp.spawn(run_rank, args=(config, workdir, free_port(), source), nprocs=config.workers, join=True)
        rows = json.loads((Path(workdir) / RESULTS_FILE).read_text())["rows"]
        tokenizer, data = load_data(config, source, Path(workdir) / "cache-main")
        model = new_model(config, tokenizer)
        initial_loss = evaluate(model, data.heldout, cpu_threads=1)
        heldout_sequences = data.heldout.shape[0]
    return RecipeRun(
        config,
        prepared,
        count_parameters(model),
        initial_loss,
        heldout_sequences,
        rows,
        prepare_seconds,
        time.perf_counter() - started,
        date,
    )


def table_rows(result: RecipeRun) -> list[list[str]]:
    """One row per H, longest first: the held-out loss of each recipe, their ratio, their wall times."""
    cells = []
    for h in result.inner_steps:
        fresh, kept = result.row(h, False), result.row(h, True)
        cells.append(
            [
                f"{h:,} × {result.config.steps // h}",
                f"{fresh['heldout_loss']:.4f}",
                f"{kept['heldout_loss']:.4f}",
                f"{fresh['heldout_loss'] / kept['heldout_loss']:.4f}",
                f"{fresh['seconds']:.0f} / {kept['seconds']:.0f}",
            ]
        )
    return cells


def section_lines(result: RecipeRun, command: str) -> list[str]:
    c, p, m = result.config, result.prepared, Machine.here()
    corpus, manifest = p.corpus, p.manifest
    tokens = c.workers * c.steps * c.batch_size * c.seq_len
    outer = c.codecs[0].outer
    outer_text = (
        f"{'Nesterov ' if outer.nesterov else 'plain '}SGD lr {outer.lr:g}, momentum {outer.momentum:g}"
        f"{', clipped to the median norm' if outer.clip_to_median_norm else ''}"
    )
    lines = [
        "# The inner recipe at long windows",
        "",
        "The project's inner recipe, a fresh AdamW every window, against one AdamW kept across windows (torchft's "
        'DiLoCo), at each H of the table; docs/training.md ("The inner recipe: nothing '
        'carries across windows") reads it. Written by `bench/inner_recipe.py`. The command that produced these '
        "numbers:",
        "",
        f"```\n{command}\n```",
        "",
        f"- date: {result.date}; wall time of the command's run: {result.total_seconds:.0f} s "
        f"(preparing the data {result.prepare_seconds:.0f} s)",
        f"- machine: {m.cpu}, {m.cores} cores (shared); torch {m.torch}; Python {m.python}; one thread per "
        "worker process; the machine is shared with other work, so wall times are noisy, losses are not",
        f"- corpus: the Python {corpus.python} standard library's `.py` sources as `bench/convergence.py "
        f"--corpus real` reads them, up to {corpus.max_bytes:,} bytes: {len(corpus.files)} files, "
        f"{corpus.bytes:,} bytes; corpus sha256 `{corpus.sha256}`",
        f"- tokenizer: byte-level BPE with {p.vocab_size:,} tokens, trained on the {p.training_documents} training "
        f"documents; data prepared with `distrai.data.prepare`: {manifest.train_tokens:,} training tokens in "
        f"{len(manifest.train)} shards; held out: {manifest.heldout_documents} whole documents, "
        f"{result.heldout_sequences:,} sequences; manifest sha256 `{p.manifest_sha256}`",
        f"- model: preset `{c.preset}` sized to the tokenizer, {result.parameters:,} parameters, seq_len {c.seq_len}; "
        f"held-out loss of the initial model {result.initial_loss:.4f}",
        f"- {c.workers} workers, batch {c.batch_size} per worker, {c.steps:,} steps per worker for every row: "
        f"{c.workers} × {c.steps:,} × {c.batch_size} × {c.seq_len} = {tokens:,} tokens, "
        f"{tokens / manifest.train_tokens:.2f} passes over the training tokens",
        f"- inner AdamW: lr {c.lr:g}, betas (0.9, 0.95), weight decay {c.weight_decay:g}, grad-norm clip 1.0, "
        f"warm-up over {c.warmup_steps} steps (the GPU config's `warmup_steps`), the project's `train_step`; "
        f"fresh: the project's `inner_loop`, a new AdamW at step 0 every window; kept: each worker's one AdamW, "
        f"its moments and step count carried from window to window (`run_steps` at the global step's learning "
        f"rate). At warm-up {c.warmup_steps} every step of both runs at the same learning rate, and the first "
        "window of the two is the same: they differ in the AdamW state alone, from the second window on",
        f"- outer step: the GPU config's (`distrai/configs/gpu-subnet.toml` `[outer]`), {outer_text}, over fp32 "
        "pseudo-gradients (codec `none`); windows sequential (the GPU config's are pipelined, one window late: "
        "left out here, so that the two recipes differ in nothing else)",
        "",
        "Held-out loss (the project's `evaluate` over the whole held-out split, nats per token) after the "
        "last window:",
        "",
        "| " + " | ".join(HEADERS) + " |",
        "|" + "---|" * len(HEADERS),
        *("| " + " | ".join(row) + " |" for row in table_rows(result)),
        "",
    ]
    for h in result.inner_steps:
        fresh, kept = result.row(h, False)["heldout_loss"], result.row(h, True)["heldout_loss"]
        lines.append(
            f"- H = {h:,}, {c.steps // h} windows: the fresh AdamW's held-out loss is {fresh / kept:.4f}× the "
            f"kept one's ({'the fresh one costs' if fresh > kept else 'the kept one costs'} "
            f"{abs(fresh / kept - 1):.2%})."
        )
    return [*lines, ""]


def write_page(path: Path, result: RecipeRun, command: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    text = "\n".join(section_lines(result, command)) + "\n" + NOTES_MARKER + "\n"
    path.write_text(text + kept_notes(path))


def print_table(result: RecipeRun, console: Console) -> None:
    table = Table(title=f"The inner recipe: held-out loss after {result.config.steps:,} steps per worker")
    for header in HEADERS:
        table.add_column(header, justify="right")
    for row in table_rows(result):
        table.add_row(*row)
    console.print(table)
    console.print(f"initial model: {result.initial_loss:.4f}; wall time {result.total_seconds:.0f} s")


def main(argv: list[str]) -> None:
    args = parse_args(argv)
    torch.set_num_threads(1)
    config = recipe_config(tuple(args.inner_steps), args.rounds, args.workers, args.quick)
    console = Console(width=160)
    result = run(config, stdlib_corpus(config.corpus_bytes), console)
    print_table(result, console)
    write_page(args.output, result, shlex.join(["python", "bench/inner_recipe.py", *argv]))
    console.print(f"wrote {args.output}")


if __name__ == "__main__":
    main(sys.argv[1:])
