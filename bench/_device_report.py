"""The device mode's section of docs/benchmarks.md, and its table on the console."""

from __future__ import annotations

from pathlib import Path

import torch
from _device import METHOD_LABELS, DeviceRun
from _report import HEADERS as CORPUS_HEADERS
from rich.console import Console
from rich.table import Table

DEVICE_TITLE = "Device mode: parity where it is fair (one accelerator, DiLoCo's workers in turn)"
HEADERS = (*CORPUS_HEADERS[:5], "training time (s)", "tokens / s")
"""The corpus tables' first five columns, then the device run's time and pace."""


def table_rows(run: DeviceRun) -> list[list[str]]:
    ddp = run.results[0].heldout_loss
    rows = []
    for result in run.results:
        trained = run.steps if result.method == "ddp" else run.steps - run.warm
        tokens = trained * run.config.tokens_per_step
        shape = (
            "1 (every step)"
            if result.method == "ddp"
            else f"{run.config.inner_steps} × {result.rounds}"
            + (f", from step {run.warm:,}" if run.warm else "")
        )
        rows.append(
            [
                METHOD_LABELS[result.method],
                shape,
                f"{result.heldout_loss:.4f}",
                f"{result.heldout_loss / run.bytes_per_token:.4f}",
                f"{result.heldout_loss / ddp:.4f}",
                f"{result.seconds:.1f}",
                f"{tokens / result.seconds:,.0f}" if result.seconds > 0 else "–",
            ]
        )
    return rows


def _pairs(run: DeviceRun) -> list[str]:
    losses = {r.method: r.heldout_loss for r in run.results}
    lines = []
    if "diloco" in losses:
        lines.append(f"- The project's DiLoCo: {losses['diloco'] / losses['ddp']:.4f}× DDP's held-out loss.")
    if "diloco" in losses and "diloco-kept" in losses:
        lines.append(
            f"- A fresh AdamW every round against one kept across rounds: {losses['diloco'] / losses['diloco-kept']:.4f}× "
            "(above 1: keeping the inner optimizer's state helps by that much at this H)."
        )
    return lines


def device_section(run: DeviceRun, command: str, date: str) -> str:
    c, t, corpus = run.config, run.tokens, run.corpus
    tokens = run.steps * c.tokens_per_step
    available = t.train.numel()
    schedule = (
        f"inner AdamW lr {c.lr:g} (betas (0.9, 0.95), weight decay {c.weight_decay:g}, grad-norm clip 1.0), "
        f"linear warm-up over {c.warmup_steps} global steps, then cosine to {c.final_lr_fraction:g}× at the "
        f"last step; DiLoCo's inner step s of round r at the schedule's step r·H + s"
    )
    lines = [
        "<!-- corpus: device -->",
        f"## {DEVICE_TITLE}",
        "",
        "The command that produced these numbers:",
        "",
        "```",
        command,
        "```",
        "",
        f"- date: {date}; wall time of the command's run: {run.total_seconds:.0f} s",
        f"- device: {run.device_name}; torch {torch.__version__}",
        (
            f"- corpus: the running Python's installed `.py` sources (Python {corpus.python}: its standard library, "
            f"as in the real-text section, and its site-packages; tests and files over 256 kB left out), one "
            if corpus.root == Path("/")
            else f"- corpus: the running Python's standard library (Python {corpus.python}; the quick run's, the "
            f"same whatever else is installed; tests and files over 256 kB left out), one "
        )
        + f"document per file: {len(corpus.files):,} files, {corpus.bytes:,} bytes (at most {corpus.max_bytes:,}); "
        f"corpus sha256 `{corpus.sha256}`",
        f"- tokenizer: byte-level BPE with {len(t.tokenizer):,} tokens, trained on the first training documents up "
        f"to {c.tokenizer_bytes:,} bytes ({t.tokenizer_seconds:.0f} s; tokenizing the corpus {t.tokenize_seconds:.0f} s); "
        f"held out: every document `is_heldout_document` picks at a share of {c.heldout_fraction:g} "
        f"({t.heldout_documents:,} of {t.heldout_documents + t.training_documents:,}), the first "
        f"{t.heldout.shape[0]:,} sequences of them; {run.bytes_per_token:.3f} bytes of text per held-out token",
        f"- model: preset `{c.preset}`"
        + (f"'s width with {c.layers} layers" if c.layers is not None else "")
        + f", sized to the tokenizer, seeded, saved with `save_pretrained` and loaded from that folder for every "
        f"method; {run.parameters:,} parameters; seq_len {c.seq_len}; "
        f"bf16 autocast over fp32 weights, {c.attention} attention, {c.adamw} AdamW (the GPU run config's step); "
        "deterministic algorithms off, TF32 on",
        f"- {c.workers} workers, batch {c.worker_batch} per worker ({c.worker_batch * c.seq_len:,} tokens; DDP's "
        f"step takes all {c.workers} as micro-batches: {c.tokens_per_step:,} tokens); {run.steps:,} steps per "
        f"worker for every method: {tokens:,} tokens, {tokens / run.parameters:.1f} per parameter, "
        f"{tokens / available:.2f} passes over the {available:,} training tokens",
        f"- the steps: {c.tokens_per_param:g} tokens per parameter would take {run.target_steps:,}; a worker step "
        f"took {run.step_seconds * 1000:.1f} ms in calibration (median of {c.calibration_steps}); bound: {run.bound}",
        f"- {schedule}",
        (
            f"- DiLoCo starts from DDP's model after {run.warm:,} of the {run.steps:,} steps (a share of "
            f"{c.warm_start:g}, as the DiLoCo paper's main runs start from a pretrained checkpoint) and trains the "
            f"other {run.steps - run.warm:,}, with the schedule where DDP had it; its training time and tokens / s "
            "count those steps"
            if run.warm
            else "- every method from the initial model"
        ),
        f"- DiLoCo: H = {c.inner_steps}, outer Nesterov SGD lr {c.outer.lr:g}, momentum {c.outer.momentum:g}"
        f"{', updates clipped to the median norm' if c.outer.clip_to_median_norm else ''} (the project's "
        f"`outer_step`, fp32 pseudo-gradients); fresh-AdamW rounds warm up again over their first "
        f"{c.round_warmup_steps} steps",
        "",
        "| " + " | ".join(HEADERS) + " |",
        "|" + "---|" * len(HEADERS),
        *("| " + " | ".join(row) + " |" for row in table_rows(run)),
        "",
        *_pairs(run),
        "",
    ]
    return "\n".join(lines)


def print_device(run: DeviceRun, console: Console) -> None:
    table = Table(title=f"{DEVICE_TITLE} — {run.device_name}")
    for header in HEADERS:
        table.add_column(header, justify="left" if header == "method" else "right")
    for row in table_rows(run):
        table.add_row(*row)
    console.print(table)
