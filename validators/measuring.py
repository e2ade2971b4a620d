"""A validator's part in the shared scoring of one window (the rules are `shared_scoring.py`'s):
measure its share of the passed updates and publish the measurements at once, take the other
validators' until the score patience, re-check a drawn few, measure what nobody else measured while
its time lasts, and pool them."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass

from distrai.chain.base import Chain
from distrai.protocol.layout import measurements_key
from distrai.protocol.runtime import Runtime
from distrai.protocol.sync import StoreCache, peer_view
from distrai.protocol.windows import WindowConfig, aggregate_deadline, reveal_seed, score_patience
from distrai.wire.signed import Signer
from distrai.wire.window_documents import Measurement, Measurements
from validators.checks import MinerVerdict
from validators.own_store import Publish
from validators.published import OthersWindow
from validators.shared_scoring import (
    CONFIRMED,
    MEASUREMENT_TOLERANCE,
    Pooled,
    as_measurement,
    pool,
    read_measurements,
    recheck_draw,
    recheck_measurement,
    signed_measurements,
)
from validators.usefulness import measure_updates
from validators.window import WindowBasis

log = logging.getLogger("distrai.validator")


def rest_limit(windows: WindowConfig, w: int) -> int:
    """The block until which a validator measures the updates nobody else measured in time: half
    of what the score patience leaves before the aggregate deadline, the other half left to score,
    report and aggregate."""
    patience = score_patience(windows, w)
    return patience + (aggregate_deadline(windows, w) - patience) // 2


@dataclass(frozen=True)
class Measurer:
    """The validator as its measuring of a window sees it."""

    runtime: Runtime
    hotkey: str
    signer: Signer
    chain: Chain
    windows: WindowConfig
    stores: StoreCache
    publish: Publish
    """puts one object in its own store"""
    block_now: Callable[[], int]
    distrusted: set[str]
    """the validators whose measurements of the window it does not take (`ValidatorState.distrusted`)"""
    measured: Callable[[dict[str, Measurement]], dict[str, Measurement]]
    """what it publishes, and scores with, of what it measured (its leader behaviour's `measured`)"""


class WindowMeasuring:
    """The measuring of window `basis.number` by one validator, whose share is `shares[its hotkey]`."""

    def __init__(self, validator: Measurer, basis: WindowBasis, shares: dict[str, list[str]]):
        self.validator = validator
        self.rt = validator.runtime
        self.basis = basis
        self.shares = shares
        self.seed = reveal_seed(basis.inputs.block_hash, basis.inputs.run_id, basis.number)
        self.own: dict[str, Measurement] = {}

    def measure_share(self, verdicts: list[MinerVerdict]) -> None:
        """Measure the updates of this validator's share (`windows.score_shares`) that have passed
        their checks so far and are not yet measured, and publish every measurement of the share, so
        the other validators can take them early (outside the sharing validators, with no permit
        yet, it measures every passed update itself and publishes nothing)."""
        me, w = self.validator.hotkey, self.basis.number
        passed = {v.hotkey: v for v in verdicts if v.passed}
        share = [hk for hk in self.shares.get(me, passed) if hk in passed and hk not in self.own]
        if self.own and not share:
            return
        measured = self.measure({hk: passed[hk] for hk in share})
        self.own |= self.validator.measured(measured)
        if me in self.shares:  # published even when empty: nobody waits for a share with nothing in it
            document = signed_measurements(self.validator.signer, self.rt.run_id, w, self.own)
            self.validator.publish(measurements_key(self.rt.run_id, w, me), document)

    def pool(self, verdicts: list[MinerVerdict], stop: threading.Event) -> Pooled:
        """Take the other validators' measurements as they come until the score patience runs out,
        re-check a drawn few, and pool them with this validator's own (`shared_scoring.pool`)."""
        me, w, scoring = self.validator.hotkey, self.basis.number, self.rt.config.scoring
        passed = {v.hotkey: v for v in verdicts if v.passed}
        published = self.collect([v for v in self.shares if v != me], stop)
        distrusted = self.validator.distrusted
        pairs = recheck_draw(
            self.seed,
            me,
            {v: doc for v, doc in published.items() if v not in distrusted},
            set(passed) - set(self.own),
            scoring.score_rechecks,
        )
        again = self.measure({miner: passed[miner] for _, miner in pairs})
        tolerance = max(self.rt.config.verification.loss_tolerance, MEASUREMENT_TOLERANCE)
        rechecks = [
            recheck_measurement(v, m, w, again[m], published[v].miners[m], tolerance) for v, m in pairs
        ]
        for r in rechecks:
            (log.info if r.outcome == CONFIRMED else log.warning)(
                "window %d: %s's measurement of %s %s: %s",
                w,
                r.validator[:10],
                r.miner[:10],
                r.outcome,
                r.reason,
            )
        pooled = pool(me, self.shares, self.own, published, rechecks, set(passed), distrusted)
        unmeasured = sorted(set(passed) - set(pooled.measurements))
        if unmeasured:
            extra = self.measure_the_rest({hk: passed[hk] for hk in unmeasured})
            pooled = pool(me, self.shares, self.own | extra, published, rechecks, set(passed), distrusted)
            unmeasured = sorted(set(passed) - set(pooled.measurements))
        if unmeasured:
            log.warning(
                "window %d: %d passed updates were measured by nobody in time, so they are not scored: %s",
                w,
                len(unmeasured),
                ", ".join(hk[:10] for hk in unmeasured),
            )
        return pooled

    def measure_the_rest(self, verdicts: dict[str, MinerVerdict]) -> dict[str, Measurement]:
        """Measure here, in hotkey order, the passed updates that nobody measured in time (their validator
        down, late or refuted), while the first half of what the score patience leaves before the
        aggregate deadline lasts (`rest_limit`); what is left then is not scored. Nothing of it is
        published, and it makes no worker of anyone: the absent validator's share is still not done."""
        v, w = self.validator, self.basis.number
        limit = rest_limit(v.windows, w)
        if v.block_now() >= limit:
            return {}
        log.warning(
            "window %d: measuring here %d passed updates nobody else measured in time (until block %d): %s",
            w,
            len(verdicts),
            limit,
            ", ".join(hk[:10] for hk in sorted(verdicts)),
        )
        return self.measure(verdicts, keep_going=lambda: v.block_now() < limit)

    def measure(
        self, verdicts: dict[str, MinerVerdict], keep_going: Callable[[], bool] = lambda: True
    ) -> dict[str, Measurement]:
        updates = {}
        for hk, v in verdicts.items():
            assert v.manifest is not None and v.update is not None, "only passed updates are measured"
            updates[hk] = (v.manifest.steps, v.update)
        measured = measure_updates(self.basis, self.seed, updates, keep_going)
        return {hk: as_measurement(result) for hk, result in measured.items()}

    def collect(self, validators: list[str], stop: threading.Event) -> dict[str, Measurements]:
        """The other validators' measurements of the window, read until all are there or the score
        patience (`windows.score_patience`) runs out."""
        v, w = self.validator, self.basis.number
        found: dict[str, Measurements] = {}
        patience = score_patience(v.windows, w)
        while not stop.is_set():
            announced = peer_view(v.chain).announcements
            urls = {h: announced[h].store_url for h in validators if h not in found and h in announced}
            limit = self.rt.config.limits.max_manifest_bytes
            found |= read_measurements(
                OthersWindow(v.stores, urls, self.rt.run_id, w, limit, lambda hk: True)
            )
            if len(found) == len(validators) or v.block_now() >= patience:
                break
            stop.wait(v.chain.block_time())
        late = sorted(set(validators) - set(found))
        if late:
            log.warning(
                "window %d: no measurements from %s by block %d; their shares are measured here while time allows",
                w,
                ", ".join(h[:10] for h in late),
                patience,
            )
        return found
