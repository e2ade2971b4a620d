"""Validators share the scoring as they share the replays.

Measuring an update (`usefulness.py`: the update alone on G_w, on the miner's trained sequences
and on the window's reserve) costs three forward passes over `usefulness_sequences` sequences; at
256 miners that is more than a validator should spend on every update. So the window's seed deals
the miners out to the validators taking part (`windows.score_shares`, `score_replicas` each), and
each validator:

1. measures the updates of its share that passed its checks and publishes them, signed
   (`Measurements`, at `layout.measurements_key`);
2. reads the other validators' measurements until all are there or its score patience runs out
   (`score_patience`: two thirds into the validate phase);
3. measures again `score_rechecks` of each other validator's, drawn by the seed and its own hotkey,
   and compares: a validator whose measurement it cannot reproduce (within the run's loss
   tolerance) is refuted, named in the report, and none of its measurements are taken, nor is it
   paid as a worker here, for `scoring.ban_windows` windows (`ValidatorState.refuted_until`);
4. measures itself the passed updates nobody else measured in time (their validator down, late or
   refuted), while half of what the score patience leaves before the aggregate deadline lasts
   (`measuring.rest_limit`), and scores every miner from the pooled measurements (its own first): a
   miner whose update is still unmeasured then is not scored this window (its moving average is left
   as it was), never zeroed.

The validators that published the measurements of their whole share in time, none refuted here now
or within `ban_windows`, are the window's workers; `scoring.validator_share` of each honest validator's weight pays them
(`scoring.weights_from_averages`). A validator that skips its share and copies the others' scores
sets the same weights on the miners, and so earns the same dividends, but no share of the workers'
pay: under Yuma Consensus only a payment for the work itself tells a worker from a copier, since a
copier's weights agree with the consensus by construction.

What an invented measurement costs. Every validator re-checks `score_rechecks` (r) of each other
validator's published measurements every window. A validator that makes up f of the s measurements
of its share (the rest measured) escapes one re-checker with probability (1 − f)^r at most (exactly
that when drawing with replacement; a draw without replacement from s catches more), and all V − 1
with (1 − f)^(r(V − 1)). Each one that catches it stops taking its measurements and stops paying it
as a worker for `ban_windows` windows. At the GPU config (r = 1, ban_windows = 144, V = 16 sharing
256 miners, s = 16): inventing the whole share is refuted by all 15 others in its first window and
costs 144 windows of worker pay at each; inventing one measurement of 16 is caught by each re-checker
with probability 1/16 a window, so it costs 15 × 1/16 × 144 = 135 windows of worker pay in
expectation for each window it is done, against one sixteenth of a window's measuring saved.
Skipping the share outright is not refuted: it forgoes the window's worker pay, 0.16 of a miner's
window at the GPU config against 0.0085 of measuring saved (docs/protocol.md, "What skipping or
inventing gains"; the replays are paid the same way, `validators/receipts.py`).
"""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Final, Literal

from distrai.protocol.layout import measurements_key
from distrai.wire import sign_document
from distrai.wire.signed import Signer
from distrai.wire.window_documents import (
    REASON_CHARS,
    Measurement,
    MeasurementRecheck,
    Measurements,
)
from validators.published import OthersWindow, read_published
from validators.usefulness import Usefulness

log = logging.getLogger("distrai.validator")

CONFIRMED: Final = "confirmed"
REFUTED: Final = "refuted"
MEASUREMENT_TOLERANCE = 1e-4
"""The least relative difference of two measurements of one update that refutes one of them: on a
CPU the same evaluation repeats bit for bit, but other CPUs may sum in another order; a lie this
small changes no score. Between GPU classes the run's loss tolerance applies when it is larger."""


def as_measurement(result: Usefulness) -> Measurement:
    return Measurement(
        drop_trained=result.trained.mean,
        drop_unseen=result.unseen.mean,
        mark=result.mark,
        mark_z=result.mark_z,
    )


def signed_measurements(
    keypair: Signer, run_id: str, window: int, measured: Mapping[str, Measurement]
) -> bytes:
    body = Measurements(
        run_id=run_id, window=window, validator=keypair.ss58_address, miners=dict(sorted(measured.items()))
    )
    return sign_document(keypair, body.body())


def read_measurements(others: OthersWindow) -> dict[str, Measurements]:
    """The measurements of the window each validator of `others` has published so far; a missing,
    unreadable or forged document is left out."""
    return read_published(
        others, lambda validator: measurements_key(others.run_id, others.window, validator), Measurements
    )


def recheck_draw(
    seed: bytes, me: str, published: Mapping[str, Measurements], eligible: set[str], count: int
) -> list[tuple[str, str]]:
    """The (validator, miner) measurements this validator measures again: `count` of each other
    validator's published measurements of `eligible` miners, drawn by the window's seed and this
    validator's hotkey, so every published share is re-checked by every other validator in every
    window (module docstring, "What an invented measurement costs")."""
    drawn = []
    for validator in sorted(v for v in published if v != me):
        pairs = sorted((validator, miner) for miner in published[validator].miners if miner in eligible)
        ranked = sorted(
            pairs,
            key=lambda pair: hashlib.sha256(
                b"|".join([seed, me.encode(), *(p.encode() for p in pair)])
            ).digest(),
        )
        drawn += ranked[:count]
    return drawn


def agrees(mine: Measurement, theirs: Measurement, tolerance: float) -> bool:
    """Whether two measurements of one update are the same within `tolerance` (relative)."""
    return all(
        abs(a - b) <= tolerance * max(abs(a), abs(b)) + 1e-12
        for a, b in ((mine.drop_trained, theirs.drop_trained), (mine.drop_unseen, theirs.drop_unseen))
    )


def recheck_measurement(
    validator: str, miner: str, window: int, mine: Measurement, theirs: Measurement, tolerance: float
) -> MeasurementRecheck:
    """The re-check of one published measurement against this validator's own."""
    outcome: Literal["confirmed", "refuted"]
    if agrees(mine, theirs, tolerance):
        outcome, why = CONFIRMED, "measured here to the same drops"
    else:
        outcome = REFUTED
        why = (
            f"measured here: drops {mine.drop_trained:.6g} (trained) and {mine.drop_unseen:.6g} (unseen); "
            f"it published {theirs.drop_trained:.6g} and {theirs.drop_unseen:.6g} (tolerance {tolerance:g})"
        )
    return MeasurementRecheck(
        validator=validator, miner=miner, window=window, outcome=outcome, reason=why[:REASON_CHARS]
    )


@dataclass(frozen=True)
class Pooled:
    """The window's measurements as this validator takes them."""

    measurements: dict[str, Measurement]
    measured_by: dict[str, str]
    rechecks: list[MeasurementRecheck] = field(default_factory=list)
    workers: list[str] = field(default_factory=list)


def pool(
    me: str,
    shares: Mapping[str, Sequence[str]],
    own: Mapping[str, Measurement],
    published: Mapping[str, Measurements],
    rechecks: Sequence[MeasurementRecheck],
    scored: set[str],
    distrusted: Collection[str] = (),
) -> Pooled:
    """Every measurement to score `scored` (the miners that passed this validator's checks) with:
    this validator's own first, then those of the validators whose share holds the miner, in share
    order, unless refuted now or `distrusted` (refuted in a window before, within `ban_windows`).
    Workers: the validators (this one included) that measured every scored miner of their share,
    neither refuted nor distrusted."""
    refuted = {r.validator for r in rechecks if r.outcome == REFUTED} | set(distrusted)
    taken = {me: dict(own)} | {
        v: dict(doc.miners) for v, doc in published.items() if v != me and v not in refuted
    }
    measurements, measured_by = {}, {}
    for miner in sorted(scored):
        holders = [me] + [v for v, miners in shares.items() if miner in miners and v != me]
        for validator in holders:
            if miner in taken.get(validator, {}):
                measurements[miner] = taken[validator][miner]
                measured_by[miner] = validator
                break
    workers = sorted(
        v for v, miners in shares.items() if v in taken and all(m in taken[v] for m in miners if m in scored)
    )
    return Pooled(measurements, measured_by, list(rechecks), workers)
