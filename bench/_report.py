"""The benchmark's tables: as markdown for docs/benchmarks.md and as a rich table for the terminal.

Targets (from the issue): held-out loss within 2% of DDP; int8 at least 1,000× and top-k at
least 5,000× less traffic than DDP; the project's inner loop at least 95% of a bare loop's
tokens per second. Text after the NOTES_MARKER line of an existing report is kept on rewrite.
"""

from __future__ import annotations

import os
import platform
from dataclasses import dataclass
from pathlib import Path

import torch
from _config import BenchConfig, CodecChoice
from _distill import DistillResult
from _throughput import ThroughputResult
from rich.console import Console
from rich.table import Table

LOSS_TOLERANCE = 0.02
TRAFFIC_TARGETS = {"int8": 1000.0, "topk": 5000.0}
THROUGHPUT_TARGET = 0.95
NOTES_MARKER = "<!-- Notes below this line are kept when the benchmark rewrites this file. -->"
HEADERS = (
    "method",
    "H × rounds",
    "held-out loss",
    "ratio to DDP",
    "bytes / param / worker (run)",
    "reduction vs DDP",
    "wall time (s)",
    "targets",
)


@dataclass(frozen=True)
class Machine:
    cpu: str
    cores: int
    torch: str
    python: str

    @staticmethod
    def here() -> Machine:
        cpuinfo = Path("/proc/cpuinfo")
        lines = cpuinfo.read_text().splitlines() if cpuinfo.exists() else []
        names = [line.split(":", 1)[1].strip() for line in lines if line.startswith("model name")]
        return Machine(
            cpu=names[0] if names else platform.processor() or "unknown CPU",
            cores=len(os.sched_getaffinity(0)),
            torch=torch.__version__,
            python=platform.python_version(),
        )


@dataclass(frozen=True)
class Report:
    command: str
    date: str
    machine: Machine
    config: BenchConfig
    parameters: int
    rows: list[dict]
    distill: DistillResult
    throughput: ThroughputResult
    total_seconds: float


def _met(ok: bool) -> str:
    return "met" if ok else "MISSED"


def _loss_ratio(report: Report, row: dict) -> float:
    return row["heldout_loss"] / report.rows[0]["heldout_loss"]


def _reduction(report: Report, row: dict) -> float:
    return report.rows[0]["bytes_per_param"] / row["bytes_per_param"]


def _traffic_target(report: Report, row: dict) -> float | None:
    codec = next((c.name for c in report.config.codecs if c.label == row["method"]), "")
    return TRAFFIC_TARGETS.get(codec)


def table_rows(report: Report) -> list[list[str]]:
    """The convergence table's cells, DDP first."""
    cells = []
    for index, row in enumerate(report.rows):
        ratio, reduction = _loss_ratio(report, row), _reduction(report, row)
        verdicts = [] if index == 0 else [f"loss ≤ 1.02×: {_met(ratio <= 1 + LOSS_TOLERANCE)}"]
        target = _traffic_target(report, row)
        if target is not None:
            verdicts.append(f"≥ {target:,.0f}×: {_met(reduction >= target)}")
        h = row["inner_steps"]
        cells.append(
            [
                row["method"],
                "1 (every step)" if index == 0 else f"{h} × {report.config.steps // h}",
                f"{row['heldout_loss']:.4f}",
                f"{ratio:.4f}",
                f"{row['bytes_per_param']:.4g}",
                f"{reduction:,.0f}×",
                f"{row['seconds']:.1f}",
                "; ".join(verdicts) or "baseline",
            ]
        )
    return cells


def target_sentences(report: Report) -> list[str]:
    """One sentence per target: met or missed, with the number."""
    sentences = []
    for row in report.rows[1:]:
        ratio = _loss_ratio(report, row)
        sentences.append(
            f"Held-out loss, {row['method']}: {ratio:.4f}× DDP's; target ≤ {1 + LOSS_TOLERANCE:.2f}×: "
            f"{_met(ratio <= 1 + LOSS_TOLERANCE)}."
        )
    for row in report.rows[1:]:
        target = _traffic_target(report, row)
        if target is not None:
            reduction = _reduction(report, row)
            sentences.append(
                f"Traffic, {row['method']}: {reduction:,.0f}× less than DDP; target ≥ {target:,.0f}×: "
                f"{_met(reduction >= target)}."
            )
    t = report.throughput
    for k in t.inner:
        sentences.append(
            f"Inner-loop throughput with a boundary every {k} steps: {t.ratio(k):.1%} of the bare loop; "
            f"target ≥ {THROUGHPUT_TARGET:.0%}: {_met(t.ratio(k) >= THROUGHPUT_TARGET)}."
        )
    d = report.distill
    verdict = "better" if d.distilled_loss < d.plain_loss else "not better"
    sentences.append(
        f"Distillation: held-out cross-entropy {d.distilled_loss:.4f} against {d.plain_loss:.4f} for plain "
        f"pre-training at {d.steps} steps ({verdict})."
    )
    return sentences


def _markdown_table(headers: tuple[str, ...] | list[str], rows: list[list[str]]) -> str:
    lines = ["| " + " | ".join(headers) + " |", "|" + "---|" * len(headers)]
    return "\n".join(lines + ["| " + " | ".join(row) + " |" for row in rows])


def _options_text(options: dict[str, object]) -> str:
    return " (" + ", ".join(f"{k} {v}" for k, v in options.items()) + ")" if options else ""


def _outer_text(choice: CodecChoice) -> str:
    o = choice.outer
    kind = "Nesterov SGD" if o.nesterov and o.momentum > 0 else "SGD"
    momentum = f", momentum {o.momentum}" if o.momentum > 0 else ", no momentum"
    return f"{kind} lr {o.lr}{momentum}"


def _setup_lines(report: Report) -> list[str]:
    c, m = report.config, report.machine
    codecs = [
        f"  - {choice.label}: codec `{choice.name}`{_options_text(choice.options)}, H = {choice.inner_steps}, "
        f"outer {_outer_text(choice)}{', updates clipped to the median norm' if choice.outer.clip_to_median_norm else ''}"
        for choice in c.codecs
    ]
    return [
        f"- date: {report.date}; total wall time of the command: {report.total_seconds:.0f} s",
        f"- machine: {m.cpu}, {m.cores} cores (shared); torch {m.torch}; Python {m.python}",
        f"- model: preset `{c.preset}`, {report.parameters:,} parameters, byte tokenizer; data: the built-in "
        f"corpus, {c.documents} documents, {c.heldout_fraction:.0%} held out, seq_len {c.seq_len}",
        f"- {c.workers} workers, batch {c.batch_size} per worker, {c.steps} steps per worker for every method; "
        f"token budget {c.workers} × {c.steps} × {c.batch_size} × {c.seq_len} = {c.tokens:,} tokens",
        f"- inner AdamW (also DDP's): lr {c.lr}, betas (0.9, 0.95), weight decay {c.weight_decay}, "
        f"grad-norm clip 1.0, linear warm-up over {c.warmup_steps} steps (per window for DiLoCo, "
        f"once for DDP); committed boundary every {c.segment_steps} inner steps",
        "- DiLoCo rows:",
        *codecs,
    ]


def _distill_table(d: DistillResult) -> str:
    return _markdown_table(
        ["model", "held-out cross-entropy"],
        [
            ["teacher (the DDP model above)", f"{d.teacher_loss:.4f}"],
            [f"student, plain pre-training, {d.steps} steps", f"{d.plain_loss:.4f}"],
            [f"student, distillation, {d.steps} steps", f"{d.distilled_loss:.4f}"],
        ],
    )


def _throughput_table(t: ThroughputResult) -> str:
    def runs(values: list[float]) -> str:
        return ", ".join(f"{x:,.0f}" for x in values)

    rows = [["bare PyTorch loop", f"{t.bare_median:,.0f}", "100%", runs(t.bare)]]
    rows += [
        [
            f"project `inner_loop`, boundary every {k} steps",
            f"{t.inner_median(k):,.0f}",
            f"{t.ratio(k):.1%}",
            runs(v),
        ]
        for k, v in t.inner.items()
    ]
    return _markdown_table(["loop", "median tokens / s", "ratio to bare", "repeats"], rows)


def markdown(report: Report, kept_notes: str = "") -> str:
    """The whole report; `kept_notes` goes after the notes marker."""
    d, t = report.distill, report.throughput
    header_counts = "; ".join(
        f"{row['method']} {row['file_bytes_per_param']:.4g} bytes / param, "
        f"{report.rows[0]['bytes_per_param'] / row['file_bytes_per_param']:,.0f}× less than DDP"
        for row in report.rows[1:]
    )
    lines = [
        "# Benchmarks",
        "",
        "Written by `bench/convergence.py`. The command that produced these numbers:",
        "",
        "```",
        report.command,
        "```",
        "",
        *_setup_lines(report),
        "",
        "## Convergence and traffic",
        "",
        _markdown_table(HEADERS, table_rows(report)),
        "",
        "Every method starts from the same initial model and trains on the same batches in the same order "
        "(each worker its own shard, from the project's data assignment). The workers are separate processes "
        "(torch.multiprocessing, gloo, one thread each) sharing the cores. DDP all-reduces (averages) gradients "
        "every step through `DistributedDataParallel` around the project's `train_step`; its bytes are the "
        "ring all-reduce formula, 2·(N−1)/N fp32 values per parameter per step, not a measurement of what "
        "gloo sent. DiLoCo workers run the project's `inner_loop`, encode the pseudo-gradient (error feedback "
        "carried per worker), all-gather the encoded bytes and apply the project's `outer_step`; their bytes "
        "are the measured payload tensor bytes (`wire_bytes`) of every round's actual upload. Counted as the "
        f"safetensors files that would be uploaded (header included): {header_counts}. Wall time is each "
        "method's training between barriers (no start-up, no evaluation); the machine is shared with other "
        "work, so wall times are noisy, losses and bytes are not. Held-out loss: the project's `evaluate` "
        "over the whole held-out split, the same sequences for every method.",
        "",
        "## Distillation versus plain pre-training",
        "",
        _distill_table(d),
        "",
        f"Both students start from the same initialization (seed 1, the teacher's is 0) and take {d.steps} "
        f"project `train_step`s on the same batches with the same AdamW; distillation loss α = "
        f"{d.config.alpha}, T = {d.config.temperature}, over the teacher's top-{d.config.top_k} logits.",
        "",
        "## Inner-loop throughput",
        "",
        _throughput_table(t),
        "",
        f"One window of {t.steps} steps per repeat, one thread, same batches; the loops take turns after "
        "an untimed warm-up.",
        "",
        "## Targets",
        "",
        *[f"- {sentence}" for sentence in target_sentences(report)],
        "",
        NOTES_MARKER,
    ]
    return "\n".join(lines) + "\n" + kept_notes


def kept_notes(path: Path) -> str:
    """The text after NOTES_MARKER in an existing report (empty if none)."""
    if not path.exists():
        return ""
    _, marker, rest = path.read_text().partition(NOTES_MARKER + "\n")
    return rest if marker else ""


def print_tables(report: Report, console: Console) -> None:
    table = Table(title=f"Convergence and traffic ({report.config.tokens:,} tokens per method)")
    for header in HEADERS:
        table.add_column(header, justify="left" if header in ("method", "targets") else "right")
    for row in table_rows(report):
        table.add_row(*row)
    console.print(table)
    for sentence in target_sentences(report):
        console.print(f"• {sentence}")
