"""Metrics records and lines for tests, each field at a plain value unless a test gives its own."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from distrai.node.metrics_records import (
    MetricsLine,
    MetricsRecord,
    RevealRecord,
    TrainRecord,
    ValidatorWindowRecord,
)


def train_record(**fields: Any) -> TrainRecord:
    train, idle, other = fields.get("train_seconds", 8.0), fields.get("idle_seconds", 1.0), 1.0
    wall = fields.get("wall_seconds", train + idle + other)
    plain = dict(
        loss_first=5.5,
        loss_last=5.25,
        tokens_per_s=1000.0,
        bytes_sent=4096,
        bytes_received=8192,
        emission=0.0,
        train_seconds=train,
        idle_seconds=idle,
        other_seconds=wall - train - idle,
        wall_seconds=wall,
        utilization=train / wall,
        uploads_pending=0,
        steps_trained=80,
        aggregates_refused=0,
        behaviour="honest",
    )
    return TrainRecord(**{**plain, **fields})


def reveal_record(**fields: Any) -> RevealRecord:
    plain = dict(
        upload_seconds=2.0,
        uploaded_bytes=12_000,
        revealed_bytes=8_000,
        states_revealed=2,
        upload_rate=6_000.0,
        upload_rate_needed=1_000.0,
        reveal_late=False,
    )
    return RevealRecord(**{**plain, **fields})


def validator_record(**fields: Any) -> ValidatorWindowRecord:
    plain = dict(
        updates=2,
        accepted=2,
        validate_seconds=4.0,
        idle_seconds=1.0,
        utilization=0.8,
        leader_agreed_last_window=None,
        aggregates_refused=0,
        findings_published=0,
        findings_adopted=0,
        findings_refuted=0,
        receipts_published=0,
        receipts_refuted=0,
        bytes_received=16_384,
        emission=0.0,
        weights=[0.0, 0.5, 0.5],
        scores={1: 1000.0, 2: 800.0},
        unmeasured=[],
        averages=[0.0, 100.0, 80.0],
    )
    return ValidatorWindowRecord(**{**plain, **fields})


def line(window: int, record: MetricsRecord, hotkey: str = "5hotkey", time: float = 0.0) -> MetricsLine:
    role = "validator" if isinstance(record, ValidatorWindowRecord) else "miner"
    return MetricsLine(
        time=time, window=window, role=role, hotkey=hotkey, run_id="r", peak_rss_bytes=1 << 20, record=record
    )


def write_lines(path: Path, lines: list[MetricsLine]) -> None:
    """`lines` as a metrics file at `path` (its folder made)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(x.to_json() + "\n" for x in lines))
