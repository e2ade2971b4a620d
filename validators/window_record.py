"""A validator's metrics record of a window (`distrai.node.metrics_records.ValidatorWindowRecord`):
what it checked, accepted and published, what it settled of the window before, how long it took,
its weights, scores and moving averages. Pure; the validator saves it with its state and writes it
to its metrics file."""

from __future__ import annotations

from dataclasses import dataclass

from distrai.node.metrics_records import ValidatorWindowRecord
from distrai.wire.verdicts import Number
from distrai.wire.window_documents import Recheck, Refusal
from validators.checks import MinerVerdict
from validators.findings import ADOPTED, REFUTED
from validators.receipts import ReplayAudit
from validators.window_report import Found


@dataclass(frozen=True)
class LastWindow:
    """What a window settles of the one before: the other validators' findings and receipts as
    re-checked here, the aggregates refused, and whether the followed aggregate agreed with this
    validator's (None: nothing to compare)."""

    rechecks: list[Recheck]
    audit: ReplayAudit
    refused: list[Refusal]
    agreement: float | None


@dataclass(frozen=True)
class Published:
    """What a validator published of a window: its findings and receipts (how many) and the updates
    its aggregate accepted."""

    findings: int
    receipts: int
    accepted: list[MinerVerdict]


@dataclass(frozen=True)
class Took:
    """What a window cost and paid: the seconds it was checked in, the idle seconds before, the bytes
    of models synced so far, the validator's emission and the weights it set (empty: none)."""

    seconds: float
    idle: float
    bytes_synced: int
    emission: float
    weights: list[float]


def window_record(
    found: Found, agreement: float | None, published: Published, took: Took, averages: list[float]
) -> ValidatorWindowRecord:
    """The record of the window `found` describes, with the moving `averages` after it."""
    verdicts, rechecks = found.verdicts, found.rechecks
    return ValidatorWindowRecord(
        updates=len(verdicts),
        accepted=len(published.accepted),
        validate_seconds=took.seconds,
        idle_seconds=took.idle,
        utilization=took.seconds / max(took.seconds + took.idle, 1e-9),
        leader_agreed_last_window=agreement,
        aggregates_refused=len(found.refused),
        findings_published=published.findings,
        findings_adopted=sum(r.outcome == ADOPTED for r in rechecks),
        findings_refuted=sum(r.outcome == REFUTED for r in rechecks),
        receipts_published=published.receipts,
        receipts_refuted=len(found.audit.refuted),
        bytes_received=took.bytes_synced + sum(int(v.numbers.get(Number.UPDATE_BYTES, 0)) for v in verdicts),
        emission=took.emission,
        weights=list(took.weights),
        scores={v.uid: v.score for v in verdicts if not v.unmeasured},
        unmeasured=sorted(v.uid for v in verdicts if v.unmeasured),
        averages=list(averages),
    )


def time_spent(parts: list[tuple[str, float]]) -> str:
    """Where a window's validation spent its time, the longest part first."""
    ranked = sorted(parts, key=lambda part: -part[1])
    return "; ".join(f"{what}: {seconds:.1f} s" for what, seconds in ranked)
