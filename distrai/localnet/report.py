"""A finished local network in numbers, as markdown (`distrai localnet --report WORK`; written to
`report.md` in the network's folder at the end of every run): for docs/gpu.md's smoke window.

What it reads: each node's metrics (`metrics.jsonl`: the miners' train and reveal records, the
validators' window records, every record's peak memory, `distrai.node.metrics_records`), the
validators' signed window reports in the network's store (`WindowReport`) (each challenged miner's replay: seconds, steps, distance and
tolerance), and what the run measured at its end (`summary.json`: the held-out losses, the device,
the model's size).

- Miners, per window: steps trained and their seconds (the inner loop with its boundary states,
  hashes and sketches), tokens per second, the seconds from the end of training to the next window
  (encoding the update, signing and anchoring the manifest), the update's bytes, and the reveal's
  seconds and bytes (the challenged states and the trajectory sample, update excluded).
- Replays, per window and challenged miner: the validator's seconds for the whole challenge
  (fetching and hashing the revealed states, the replayed steps, the trajectory check), the steps
  replayed, its seconds per replayed step over the miner's seconds per trained step, and whether the
  replay was bit-exact (the same replay class: end state hash and every loss equal).
- Validators, per window: seconds to check, replay, score and aggregate the window.
- Every process's peak memory: GPU (`torch.cuda.max_memory_allocated`) and resident set.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

from pydantic import BaseModel, ConfigDict, ValidationError

from distrai.node.metrics import node_records
from distrai.node.metrics_records import MetricsLine, RevealRecord, TrainRecord, ValidatorWindowRecord
from distrai.wire.verdicts import PASS, Check, Number
from distrai.wire.window_documents import MinerEntry, WindowReport

SUMMARY = "summary.json"
REPORT = "report.md"
GIB = 1 << 30

R = TypeVar("R", TrainRecord, RevealRecord, ValidatorWindowRecord)


@dataclass(frozen=True)
class NodeRecords:
    name: str
    role: str
    hotkey: str | None
    records: list[MetricsLine]


def node_metrics(neurons) -> list[NodeRecords]:
    """Each node's metrics records (a node that wrote none has an empty list)."""
    found = []
    for neuron in neurons:
        records = node_records(neuron.work_dir / "metrics.jsonl")
        hotkey = records[0].hotkey if records else None
        found.append(NodeRecords(neuron.name, neuron.role, hotkey, records))
    return found


def _events(node: NodeRecords, kind: type[R]) -> dict[int, R]:
    """The node's last record of `kind` by window."""
    return {line.window: line.record for line in node.records if isinstance(line.record, kind)}


def replay_verdict(entry: MinerEntry) -> str:
    """Whether a report's line for a miner says its replay was bit-exact."""
    verdict = entry.verdicts.get(Check.REPLAY)
    numbers = entry.numbers
    if verdict is None:
        return entry.reason or "not replayed"
    if verdict != PASS:
        return f"failed: {verdict[:80]}"
    if numbers.get(Number.REPLAY_TOLERANCE, 0.0) == 0.0:
        return "yes"
    return f"no: {numbers.get(Number.REPLAY_DISTANCE, float('nan')):.2e} within {numbers[Number.REPLAY_TOLERANCE]}"


def _bytes(value: float | None) -> str:
    return "–" if value is None else f"{value:,.0f}"


def _gib(value: float | None) -> str:
    return "–" if value is None else f"{value / GIB:,.2f} GiB"


def _s(value: float | None) -> str:
    return "–" if value is None else f"{value:,.2f}"


def miners_table(nodes: list[NodeRecords]) -> list[str]:
    lines = [
        "| window | miner | steps | train s | tokens/s | encode + commit s | update bytes | reveal s "
        "| revealed bytes |",
        "|---:|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for node in (n for n in nodes if n.role == "miner"):
        reveals = _events(node, RevealRecord)
        for w, t in sorted(_events(node, TrainRecord).items()):
            reveal = reveals.get(w)
            update = None if reveal is None else reveal.uploaded_bytes - reveal.revealed_bytes
            lines.append(
                f"| {w} | {node.name} | {t.steps_trained} | {_s(t.train_seconds)} | "
                f"{t.tokens_per_s:,.0f} | {_s(t.other_seconds)} | {_bytes(update)} | "
                f"{_s(None if reveal is None else reveal.upload_seconds)} | "
                f"{_bytes(None if reveal is None else reveal.revealed_bytes)} |"
            )
    return lines


def replays_table(nodes: list[NodeRecords], reports: list[WindowReport]) -> list[str]:
    lines = [
        "| window | validator | miner | replayed steps | replay s | replay s/step ÷ train s/step | bit-exact |",
        "|---:|---|---|---:|---:|---:|---|",
    ]
    names = {n.hotkey: n.name for n in nodes if n.hotkey}
    trained = {
        (w, n.hotkey): t.train_seconds / t.steps_trained
        for n in nodes
        if n.role == "miner"
        for w, t in _events(n, TrainRecord).items()
        if t.steps_trained
    }
    for report in sorted(reports, key=lambda r: (r.window, names.get(r.validator, ""))):
        w = report.window
        for hotkey, entry in sorted(report.miners.items(), key=lambda kv: names.get(kv[0], kv[0])):
            numbers = entry.numbers
            steps = numbers.get(Number.REPLAY_STEPS)
            if not steps:
                continue
            per_step = numbers[Number.REPLAY_SECONDS] / steps
            ratio = per_step / trained[(w, hotkey)] if (w, hotkey) in trained else None
            lines.append(
                f"| {w} | {names.get(report.validator, report.validator[:8])} | "
                f"{names.get(hotkey, hotkey[:8])} | {steps:.0f} | {_s(numbers[Number.REPLAY_SECONDS])} | "
                f"{'–' if ratio is None else f'{ratio:.2f}'} | {replay_verdict(entry)} |"
            )
    return lines


def validators_table(nodes: list[NodeRecords]) -> list[str]:
    lines = ["| window | validator | validate s | updates accepted |", "|---:|---|---:|---:|"]
    for node in (n for n in nodes if n.role == "validator"):
        for w, r in sorted(_events(node, ValidatorWindowRecord).items()):
            lines.append(f"| {w} | {node.name} | {_s(r.validate_seconds)} | {r.accepted}/{r.updates} |")
    return lines


def memory_table(nodes: list[NodeRecords]) -> list[str]:
    lines = ["| process | peak GPU memory | peak resident memory |", "|---|---:|---:|"]
    for node in nodes:
        gpu = max((r.cuda_peak_bytes for r in node.records if r.cuda_peak_bytes is not None), default=None)
        rss = max((r.peak_rss_bytes for r in node.records), default=None)
        lines.append(f"| {node.name} | {_gib(gpu) if gpu is not None else 'no GPU used'} | {_gib(rss)} |")
    return lines


class RunSummary(BaseModel):
    """What a local network's run measured at its end (`summary.json`)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    windows: list[int]
    """the windows validated"""
    losses: list[float]
    """the global model's held-out loss at the first window's start, then after each window"""
    sequences: int
    """held-out sequences evaluated"""
    device: str
    parameters: int
    """the model's parameters"""


def heldout_line(summary: RunSummary | None) -> str:
    if summary is None or not summary.losses:
        return "Held-out loss: not measured (no window was validated)."
    windows, losses = summary.windows, summary.losses
    steps = " → ".join(f"{loss:.3f}" for loss in losses)
    return (
        f"Held-out loss of the global model ({summary.sequences} held-out sequences): {steps} "
        f"(at the start of window {windows[0]}, then after each of windows {', '.join(map(str, windows))})."
    )


def report_markdown(
    title: str, nodes: list[NodeRecords], reports: list[WindowReport], summary: RunSummary | None
) -> str:
    sections = [
        f"## {title}",
        "Miners: steps and seconds of each window's training (the inner loop with its boundary states, "
        "hashes and sketches), then encoding the update and anchoring the manifest, and the reveal "
        "(challenged states and the trajectory sample).",
        "\n".join(miners_table(nodes)),
        "Replays: the validator's seconds for a whole challenge (fetching and hashing the revealed "
        "states, the replayed steps, the trajectory check) against the miner's seconds per trained step.",
        "\n".join(replays_table(nodes, reports)),
        "\n".join(validators_table(nodes)),
        "\n".join(memory_table(nodes)),
        heldout_line(summary),
    ]
    return "\n\n".join(sections) + "\n"


def read_summary(work: Path) -> RunSummary | None:
    """The run's summary in `work`; None when there is none (or it is not one: the report then says
    the loss was not measured)."""
    try:
        return RunSummary.model_validate_json((work / SUMMARY).read_text())
    except (OSError, ValidationError):
        return None


def write_summary(work: Path, summary: RunSummary) -> None:
    (work / SUMMARY).write_text(summary.model_dump_json(indent=1))
