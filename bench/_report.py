"""The benchmark's tables: as markdown for docs/benchmarks.md and as a rich table for the terminal.

Targets (from the issue): held-out loss within 2% of DDP; int8 at least 1,000× and top-k at
least 5,000× less traffic than DDP; the project's inner loop at least 95% of a bare loop's
tokens per second; with a peer (`--peer torchft`), the project's DiLoCo fp32 held-out loss within
1% of the peer's DiLoCo. The report has one section per corpus, each opened by a SECTION_MARK line: a
run rewrites the sections of the corpora it ran and keeps the others, and the text after the
NOTES_MARKER line. A real-text section records its corpus's hash, and a run on another corpus does
not replace it unless told to (`recorded_corpus_sha256`).
"""

from __future__ import annotations

import os
import platform
import re
from dataclasses import dataclass
from pathlib import Path

import torch
from _config import CORPORA, BenchConfig, CodecChoice
from _corpus import EXCLUDED_FOLDERS, MAX_FILE_BYTES, PreparedText
from _distill import DistillResult
from _sweep_report import print_sweep, sweep_lines
from _throughput import ThroughputResult
from rich.console import Console
from rich.table import Table

LOSS_TOLERANCE = 0.02
PEER_TOLERANCE = 0.01
"""The project's DiLoCo fp32 against the peer's DiLoCo (a row marked "peer"), when one ran."""
TRAFFIC_TARGETS = {"int8": 1000.0, "topk": 5000.0}
THROUGHPUT_TARGET = 0.95
NOTES_MARKER = "<!-- Notes below this line are kept when the benchmark rewrites this file. -->"
SECTION_MARK = "<!-- corpus: {} -->"
SECTION_TITLES = {
    "templated": "Templated corpus (built-in documents, byte tokenizer)",
    "real": "Real text (the Python standard library's sources, BPE tokenizer)",
}
SECTION_KEYS = (*CORPORA, "device")
"""The report's sections in order: one per corpus, then the device mode's (`_device_report.py`)."""
CORPUS_HASH = re.compile(r"corpus sha256 `([0-9a-f]{64})`")
PIPELINED_TEXT = (
    "; pipelined: round r trains from the model before round r − 1's outer step, which lands one round late "
    "(the shipped `[windows] pipelined`)"
)
HEADERS = (
    "method",
    "H × rounds",
    "held-out loss",
    "nats / byte",
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
    """One corpus's results. `bytes_per_token`: bytes of text per predicted held-out token, which
    turns a loss in nats per token into nats per byte. `prepared`: real text only."""

    command: str
    date: str
    machine: Machine
    config: BenchConfig
    parameters: int
    rows: list[dict]
    distill: DistillResult
    throughput: ThroughputResult | None
    total_seconds: float
    bytes_per_token: float
    heldout_sequences: int
    prepared: PreparedText | None = None
    prepare_seconds: float = 0.0


def _met(ok: bool) -> str:
    return "met" if ok else "MISSED"


def _loss_ratio(report: Report, row: dict) -> float:
    return row["heldout_loss"] / report.rows[0]["heldout_loss"]


def _reduction(report: Report, row: dict) -> float:
    return report.rows[0]["bytes_per_param"] / row["bytes_per_param"]


def _peer(report: Report) -> dict | None:
    """The peer's row, if a peer ran (`bench/_peer_torchft.py`)."""
    return next((row for row in report.rows if "peer" in row), None)


def _traffic_target(report: Report, row: dict) -> float | None:
    codec = next((c.name for c in report.config.codecs if c.label == row["method"]), "")
    return TRAFFIC_TARGETS.get(codec)


def choice_of(config: BenchConfig, row: dict) -> CodecChoice | None:
    """The DiLoCo row's choice (None for DDP and the peer)."""
    return next((c for c in config.codecs if c.label == row["method"]), None)


def main_rows(report: Report) -> list[dict]:
    """The convergence table's rows: every row but the sweep's (`_sweep_report.py`), DDP first."""
    return [row for row in report.rows if not getattr(choice_of(report.config, row), "sweep", False)]


def table_rows(report: Report) -> list[list[str]]:
    """The convergence table's cells, DDP first."""
    cells = []
    for index, row in enumerate(main_rows(report)):
        ratio, reduction = _loss_ratio(report, row), _reduction(report, row)
        peer = "peer" in row
        verdicts = [] if index == 0 or peer else [f"loss ≤ 1.02×: {_met(ratio <= 1 + LOSS_TOLERANCE)}"]
        target = _traffic_target(report, row)
        if target is not None:
            verdicts.append(f"≥ {target:,.0f}×: {_met(reduction >= target)}")
        h = row["inner_steps"]
        cells.append(
            [
                row["method"],
                "1 (every step)" if index == 0 else f"{h} × {report.config.steps // h}",
                f"{row['heldout_loss']:.4f}",
                f"{row['heldout_loss'] / report.bytes_per_token:.4f}",
                f"{ratio:.4f}",
                f"{row['bytes_per_param']:.4g}",
                f"{reduction:,.0f}×",
                f"{row['seconds']:.1f}",
                "; ".join(verdicts) or ("peer (reference)" if peer else "baseline"),
            ]
        )
    return cells


def target_sentences(report: Report) -> list[str]:
    """One sentence per target: met or missed, with the number."""
    sentences = []
    for row in main_rows(report)[1:]:
        if "peer" in row:
            continue
        ratio = _loss_ratio(report, row)
        sentences.append(
            f"Held-out loss, {row['method']}: {ratio:.4f}× DDP's; target ≤ {1 + LOSS_TOLERANCE:.2f}×: "
            f"{_met(ratio <= 1 + LOSS_TOLERANCE)}."
        )
    peer = _peer(report)
    if peer is not None:
        fp32 = next(r for r in report.rows if r["method"] == _fp32_label(report.config))
        ratio = fp32["heldout_loss"] / peer["heldout_loss"]
        sentences.append(
            f"Held-out loss, {fp32['method']}: {ratio:.4f}× the peer's; target ≤ {1 + PEER_TOLERANCE:.2f}×: "
            f"{_met(ratio <= 1 + PEER_TOLERANCE)}."
        )
    for row in main_rows(report)[1:]:
        target = _traffic_target(report, row)
        if target is not None:
            reduction = _reduction(report, row)
            sentences.append(
                f"Traffic, {row['method']}: {reduction:,.0f}× less than DDP; target ≥ {target:,.0f}×: "
                f"{_met(reduction >= target)}."
            )
    t = report.throughput
    for k in t.inner if t is not None else ():
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


def _fp32_label(config: BenchConfig) -> str:
    return next(choice.label for choice in config.codecs if choice.name == "none")


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


def _data_lines(report: Report) -> list[str]:
    c = report.config
    if report.prepared is None:
        return [
            f"- model: preset `{c.preset}`, {report.parameters:,} parameters, byte tokenizer; data: the built-in "
            f"corpus, {c.documents} documents, {c.heldout_fraction:.0%} held out, seq_len {c.seq_len}; "
            f"{report.bytes_per_token:.3f} bytes of text per held-out token"
        ]
    p = report.prepared
    m, corpus = p.manifest, p.corpus
    excluded = ", ".join(EXCLUDED_FOLDERS)
    return [
        f'- corpus: the Python {corpus.python} standard library\'s `.py` sources (`sysconfig` "stdlib"), one '
        f"document per file: {len(corpus.files)} files, {corpus.bytes:,} bytes, taken in the order of their "
        f"paths' SHA-256 up to {corpus.max_bytes:,} bytes, then sorted (tests and {excluded} left out, and "
        f"files over {MAX_FILE_BYTES // 1024} kB); corpus sha256 `{corpus.sha256}` (of every file's relative "
        "path and bytes; the files are listed below)",
        f"- tokenizer: byte-level BPE with {p.vocab_size:,} tokens (EOS included), trained with `tokenizers` on "
        f"the {p.training_documents} training documents only, saved with `save_pretrained` and loaded back with "
        f"`AutoTokenizer.from_pretrained`; tokenizer sha256 `{p.tokenizer_sha256}`",
        f"- data: prepared with `distrai.data.prepare` into a file store ({report.prepare_seconds:.0f} s with "
        f"the tokenizer's training): {m.train_tokens:,} training tokens in {len(m.train)} shards of "
        f"{m.shard_tokens:,} tokens ({c.shard_sequences} sequences, the data assignment's unit); held out: "
        f"{m.heldout_documents} whole documents (evenly spaced, a share of {c.heldout_fraction:g}), "
        f"{m.heldout_tokens:,} tokens (at most {c.heldout_sequences * c.seq_len:,}), "
        f"{report.heldout_sequences:,} sequences; manifest sha256 "
        f"`{p.manifest_sha256}`; every process opens it with `distrai.data.access.open_prepared` and fetches, "
        "checks and caches the shards its batches reach",
        f"- model: preset `{c.preset}` sized to the tokenizer, {report.parameters:,} parameters; seq_len "
        f"{c.seq_len}; {report.bytes_per_token:.3f} bytes of text per held-out token",
    ]


def _setup_lines(report: Report) -> list[str]:
    c, m = report.config, report.machine
    codecs = [
        f"  - {choice.label}: codec `{choice.name}`{_options_text(choice.options)}, H = {choice.inner_steps}, "
        f"outer {_outer_text(choice)}{', updates clipped to the median norm' if choice.outer.clip_to_median_norm else ''}"
        f"{PIPELINED_TEXT if choice.pipelined else ''}"
        for choice in c.codecs
        if not choice.sweep
    ]
    return [
        f"- date: {report.date}; wall time of this section's runs: {report.total_seconds:.0f} s",
        f"- machine: {m.cpu}, {m.cores} cores (shared); torch {m.torch}; Python {m.python}",
        *_data_lines(report),
        f"- {c.workers} workers, batch {c.batch_size} per worker, {c.steps} steps per worker for every method; "
        f"token budget {c.workers} × {c.steps} × {c.batch_size} × {c.seq_len} = {c.tokens:,} tokens",
        f"- inner AdamW (also DDP's): lr {c.lr}, betas (0.9, 0.95), weight decay {c.weight_decay}, "
        f"grad-norm clip 1.0, linear warm-up over {c.warmup_steps} steps (per window for DiLoCo, "
        f"once for DDP); committed boundary every {c.segment_steps} inner steps",
        "- DiLoCo rows:",
        *codecs,
        *_peer_setup(report),
    ]


def _peer_setup(report: Report) -> list[str]:
    peer = _peer(report)
    if peer is None:
        return []
    fp32 = next(choice for choice in report.config.codecs if choice.name == "none")
    return [
        f"- peer: `torchft.local_sgd.DiLoCo` of {peer['peer']}, fp32, sync_every "
        f"H = {peer['inner_steps']}, outer `torch.optim.SGD` ({_outer_text(fp32)}, no clip); one inner AdamW "
        "(the same settings and `train_step`) kept across rounds, its warm-up once, at the first steps"
    ]


def _peer_paragraph(report: Report) -> list[str]:
    peer = _peer(report)
    if peer is None:
        return []
    return [
        "",
        f"The peer row ({peer['method']}) is another implementation of DiLoCo, torchft's, as its authors "
        "designed it, on the same model, data and batches: each worker is one torchft replica group (a "
        "`Manager` over `ProcessGroupGloo`, quorum from a `LighthouseServer` on 127.0.0.1), its inner step the "
        "project's `train_step` with one AdamW kept across rounds and the warm-up once (the project's loop "
        "starts each round with a fresh AdamW and warm-up, and clips updates to the median norm). Its bytes are "
        "the ring all-reduce formula of its fp32 pseudo-gradient, 2·(N−1)/N fp32 values per parameter per "
        "round, not a measurement of what gloo sent. Its target line compares the project's DiLoCo fp32 with it.",
    ]


def _distill_table(d: DistillResult, bytes_per_token: float) -> str:
    rows = [
        ("teacher (the DDP model above)", d.teacher_loss),
        (f"student, plain pre-training, {d.steps} steps", d.plain_loss),
        (f"student, distillation, {d.steps} steps", d.distilled_loss),
    ]
    return _markdown_table(
        ["model", "held-out cross-entropy", "nats / byte"],
        [[label, f"{loss:.4f}", f"{loss / bytes_per_token:.4f}"] for label, loss in rows],
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


def _files_lines(prepared: PreparedText) -> list[str]:
    corpus = prepared.corpus
    return [
        f"<details><summary>The {len(corpus.files)} files of the corpus, relative to the standard library's "
        "folder</summary>",
        "",
        ", ".join(corpus.files),
        "",
        "</details>",
    ]


def section(report: Report) -> str:
    """One corpus's section of the report, opened by its SECTION_MARK line."""
    d, t, c = report.distill, report.throughput, report.config
    header_counts = "; ".join(
        f"{row['method']} {row['file_bytes_per_param']:.4g} bytes / param, "
        f"{report.rows[0]['bytes_per_param'] / row['file_bytes_per_param']:,.0f}× less than DDP"
        for row in main_rows(report)[1:]
        if "peer" not in row
    )
    data_sentence = (
        "Every process builds the same templated corpus in memory."
        if report.prepared is None
        else "Every process reads the prepared shards from the store into a cache of its own, as a node does."
    )
    lines = [
        SECTION_MARK.format(c.corpus),
        f"## {SECTION_TITLES[c.corpus]}",
        "",
        "The command that produced these numbers:",
        "",
        "```",
        report.command,
        "```",
        "",
        *_setup_lines(report),
        *([""] + _files_lines(report.prepared) if report.prepared is not None else []),
        "",
        "### Convergence and traffic",
        "",
        _markdown_table(HEADERS, table_rows(report)),
        "",
        "Every method starts from the same initial model and trains on the same batches in the same order "
        f"(each worker its own share, from the project's data assignment). {data_sentence} The workers are "
        "separate processes (torch.multiprocessing, gloo, one thread each) sharing the cores. DDP all-reduces "
        "(averages) gradients every step through `DistributedDataParallel` around the project's `train_step`; "
        "its bytes are the ring all-reduce formula, 2·(N−1)/N fp32 values per parameter per step, not a "
        "measurement of what gloo sent. DiLoCo workers run the project's `inner_loop`, encode the "
        "pseudo-gradient (error feedback carried per worker), all-gather the encoded bytes and apply the "
        "project's `outer_step`; their bytes are the measured payload tensor bytes (`wire_bytes`) of every "
        "round's actual upload. Counted as the safetensors files that would be uploaded (header included): "
        f"{header_counts}. Wall time is each method's training between barriers (no start-up, no evaluation); "
        "the machine is shared with other work, so wall times are noisy, losses and bytes are not. Held-out "
        "loss: the project's `evaluate` over the whole held-out split, the same sequences for every method, in "
        "nats per token; nats / byte divides it by the bytes of text per predicted token.",
        *_peer_paragraph(report),
        "",
        *sweep_lines(report.config, report.rows),
        "### Distillation versus plain pre-training",
        "",
        _distill_table(d, report.bytes_per_token),
        "",
        f"Both students start from the same initialization (seed 1, the teacher's is 0) and take {d.steps} "
        f"project `train_step`s on the same batches with the same AdamW; distillation loss α = "
        f"{d.config.alpha}, T = {d.config.temperature}, over the teacher's top-{d.config.top_k} logits.",
        "",
    ]
    if t is not None:
        lines += [
            "### Inner-loop throughput",
            "",
            _throughput_table(t),
            "",
            f"One window of {t.steps} steps per repeat, one thread, same batches; the loops take turns after "
            "an untimed warm-up.",
            "",
        ]
    lines += ["### Targets", "", *[f"- {sentence}" for sentence in target_sentences(report)], ""]
    return "\n".join(lines)


INTRO = """# Benchmarks

Written by `bench/convergence.py`, one section per corpus, each with the command that produced it:

- **Templated corpus** (`--corpus templated`, the default): generated documents from the built-in
  templates under the byte tokenizer; built in seconds, and what the tests run. A small model learns
  its templates well, so its parity numbers say little about real text.
- **Real text** (`--corpus real`): the Python standard library's sources, a fixed list of files whose
  hash the section records, under a BPE tokenizer trained on them, prepared into token shards with the
  project's `distrai data prepare` machinery.
- **Device mode** (`--device cuda`): one accelerator, DDP as one large batch against DiLoCo's workers
  run in turn, a ~10M-parameter model on the running Python's installed sources, a cosine schedule,
  DiLoCo from DDP's model after half the steps (as the DiLoCo paper's main runs start from a
  pretrained checkpoint), and as many tokens per parameter (up to 20) as fit in under 8 minutes.

A run rewrites the sections of the corpora it ran and keeps the others and the notes at the end. It
does not replace a real-text section measured on another corpus (another hash, as another Python's
standard library gives) unless run with `--new-corpus`: numbers on two corpora are not compared.
"""


def sections(path: Path) -> dict[str, str]:
    """The corpus sections of an existing report, by corpus (none if there is no report)."""
    if not path.exists():
        return {}
    head = path.read_text().partition(NOTES_MARKER)[0]
    marks = [(head.find(SECTION_MARK.format(c)), c) for c in SECTION_KEYS]
    starts = sorted((start, corpus) for start, corpus in marks if start >= 0)
    bounds = [start for start, _ in starts] + [len(head)]
    return {
        corpus: head[start : bounds[i + 1]].rstrip("\n") + "\n" for i, (start, corpus) in enumerate(starts)
    }


def recorded_corpus_sha256(path: Path) -> str | None:
    """The corpus hash the real-text section of the report at `path` records, if it has one."""
    match = CORPUS_HASH.search(sections(path).get("real", ""))
    return match.group(1) if match else None


def markdown(new: dict[str, str], path: Path) -> str:
    """The whole report: the `new` sections, the existing report's other sections, then its notes."""
    merged = {**sections(path), **new}
    body = "\n".join(merged[c] for c in SECTION_KEYS if c in merged)
    return INTRO + "\n" + body + "\n" + NOTES_MARKER + "\n" + kept_notes(path)


def kept_notes(path: Path) -> str:
    """The text after NOTES_MARKER in an existing report (empty if none)."""
    if not path.exists():
        return ""
    _, marker, rest = path.read_text().partition(NOTES_MARKER + "\n")
    return rest if marker else ""


def print_tables(report: Report, console: Console) -> None:
    title = SECTION_TITLES[report.config.corpus]
    table = Table(title=f"{title}: convergence and traffic ({report.config.tokens:,} tokens per method)")
    for header in HEADERS:
        table.add_column(header, justify="left" if header in ("method", "targets") else "right")
    for row in table_rows(report):
        table.add_row(*row)
    console.print(table)
    for sentence in target_sentences(report):
        console.print(f"• {sentence}")
    print_sweep(report.config, report.rows, console)
