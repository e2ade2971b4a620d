"""The validator's loop, window after window: wait → list → check → fold → publish → set weights.

For window w: note its miners at its start (`pending.py`; on pipelined windows while w − 1 is still
being checked) and probe their stores through the reveal phase (`reveal_probe.py`); at the reveal
deadline list what they revealed (`inventory.py`: nothing absent then counts) and catch the window's
base and the model its aggregate applies to up with the aggregates the network followed
(`distrai.protocol.sync`); settle window w − 1 (withheld reveals read again, the other validators'
findings and receipts re-checked: `withheld.py`, `findings.py`, `receipts.py`); run the check pass
(`window_check.py`: cheap checks, replays of this validator's share of the challenged miners,
shared usefulness measurements, copies, scores); fold the scores into the state (`fold.py`); publish
findings, receipts, the signed report and the aggregate, anchored on chain before the aggregate
deadline (`publishing.py`); set weights when the chain allows; save the state and the metrics record
(`window_record.py`). The validator with the most stake leads; every aggregate is there for the next
in line if the leader's is missing or refused (docs/architecture.md walks one window through).
"""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path

from distrai.chain.base import ChainError, Metagraph
from distrai.node.participant import Participant
from distrai.node.seat import Seat
from distrai.protocol.announce import committed_by_deadline
from distrai.protocol.globalmodel import GlobalModel, SyncUnavailable, encode_checkpoint
from distrai.protocol.layout import checkpoint_key
from distrai.protocol.sync import StoreCache
from distrai.protocol.windows import (
    aggregate_deadline,
    commit_deadline,
    is_checkpoint_window,
    reveal_deadline,
    skipped_windows,
    window_of,
    window_start,
)
from distrai.store.breaker import PassBreaker
from distrai.store.outage import OutageLog
from distrai.train.inner import window_start_state
from distrai.train.train_state import state_hash
from distrai.wire.window_documents import Recheck
from validators.aggregating import leader_agreement
from validators.checks import MinerVerdict
from validators.findings import ADOPTED, barred_by_findings, recheck_published
from validators.fold import fold_window
from validators.held_window import HeldWindow
from validators.leader_behaviour import LeaderBehaviour
from validators.listing import listing
from validators.measuring import Measurer
from validators.own_store import OwnStore
from validators.pending import PendingWindow, PendingWindows, next_to_check
from validators.publishing import WindowPublication
from validators.receipts import NOT_JUDGED, ReplayAudit, audit_published
from validators.reveal_probe import RevealProbes
from validators.scoring import state_weights
from validators.shared_scoring import Pooled
from validators.validator_state import ValidatorState, load_state, save_state, write_saved_record
from validators.validator_window import ValidatorWindow
from validators.window_check import MinerReads, check_pass, frame_window
from validators.window_record import LastWindow, Published, Took, time_spent, window_record
from validators.window_report import Found
from validators.withheld import reread_due

log = logging.getLogger("distrai.validator")


@dataclass(frozen=True)
class ValidatorOptions:
    work_dir: Path
    behaviour: LeaderBehaviour = field(default_factory=LeaderBehaviour)
    """Honest, or one of the leaders of `adversaries.LEADER_ADVERSARIES` (for demonstrations and tests)."""


MODELS = "the models to check a window against (the validators' aggregates)"
"""What a validator waits for when it cannot sync, as its outage log names it."""


class Validator(Participant):
    def __init__(self, seat: Seat, options: ValidatorOptions):
        super().__init__(seat)
        self.options = options
        self.state_path = options.work_dir / "validator_state.json"
        self.state: ValidatorState = load_state(self.state_path, self.rt.run_id)
        if self.metrics is not None:
            write_saved_record(self.state, self.metrics)
        self.pending = PendingWindows(options.work_dir / "pending")
        self.base: GlobalModel | None = None
        """the model window w's miners trained from (on pipelined windows, the one before `model`)"""
        self.last_end: float | None = None
        self.held: HeldWindow | None = None
        """what the last window checked leaves for re-checking the other validators' findings of it"""
        self.outages = OutageLog(log)
        self.own_store = OwnStore(self.store, self.chain, self.outages)
        self.listing_said: int | None = None
        """the last window whose listing this process took or said it resumes (said once a window)"""
        self.last_tried: int | None = None
        """the last window this process set out to check (None before the first)"""
        self.unreached: int | None = None
        """the window last put off because the models to check it were out of reach"""
        self.probes = RevealProbes(self.rt.run_id, self.stores)
        self.breaker = PassBreaker()
        self.miner_stores = StoreCache(lambda url: self.breaker.guard(self.stores.get(url)))
        """the miners' stores as a window's passes of reads see them: within one pass (the listing at
        the reveal deadline, the first pass of checks, each pass of asking again), a store on which an
        operation gave up in an outage is not waited on again (`distrai.store.breaker`)"""

    def run(self, stop: threading.Event, max_windows: int | None = None) -> None:
        done = 0
        while not stop.is_set() and (max_windows is None or done < max_windows):
            w = self.next_window()
            self.say_skipped(w)
            self.wait_noting_miners(window_start(self.windows, w), stop)
            self.note_miners(w)
            self.wait_noting_miners(reveal_deadline(self.windows, w), stop, probe=w)
            if stop.is_set():
                return
            if self.run_window(w, stop):
                done += 1

    def say_skipped(self, w: int) -> None:
        """Say which windows before `w`, the next one to check, this validator passes over, and why
        (none before the first window a fresh validator checks)."""
        if self.unreached is not None and self.unreached != w:
            self.outages.gave_up(MODELS, f"window {w} is next")
            log.warning(
                "window %d: skipped: the models to check it against stayed out of reach while its "
                "aggregate was due",
                self.unreached,
            )
            self.unreached = None
        after = self.last_tried if self.last_tried is not None else self.state.window
        for skipped in skipped_windows(after if after >= 0 else None, w):
            log.warning("window %d: skipped: its reveals could no longer be listed in time", skipped)
        self.last_tried = w

    def next_window(self) -> int:
        """The next window to check (`validators.pending.next_to_check`)."""
        return next_to_check(self.pending, self.windows, self.chain.block(), self.state.window)

    def note_miners(self, w: int) -> PendingWindow:
        """The miners of window w (`Participant.window_miners`), noted at its start (now if they were not)."""
        pending = self.pending.load(w)
        if pending is None:
            pending = PendingWindow(window=w, miners=self.window_miners(w), noted_block=self.chain.block())
            self.pending.save(pending)
        return pending

    def wait_noting_miners(self, block: int, stop: threading.Event, probe: int | None = None) -> None:
        """Sleep until `block`, noting the miners of every window that starts meanwhile (on
        pipelined windows, the next window starts while this one waits for its reveal deadline), and
        probing window `probe`'s stores once a block from its commit deadline on."""
        probed = -1
        while not stop.is_set():
            now = self.block_now()
            current = window_of(self.windows, now)
            if current > self.state.window and self.pending.load(current) is None:
                self.note_miners(current)
            if now >= block:
                return
            if probe is not None and now != probed and now >= commit_deadline(self.windows, probe):
                self.probe_reveals(probe, now)
                probed = now
            stop.wait(min(0.5, self.chain.block_time() / 4))

    def probe_reveals(self, w: int, block: int) -> None:
        """Ask each store window w's miners announced whether it answers, and note the ones that do
        not in the window's notes (`validators.reveal_probe`); nothing once the window is listed."""
        pending = self.note_miners(w)
        if pending.inventory() is not None:
            return
        noted = self.probes.probe(
            pending, lambda: committed_by_deadline(self.chain, self.windows, w)[0], block
        )
        if noted is not None:
            self.pending.save(noted)

    # -- one window -----------------------------------------------------------------------------

    def run_window(self, w: int, stop: threading.Event) -> bool:
        """Check window w and publish its aggregate; False when the models to check it against
        were out of reach (tried again while the window's aggregate is still due; it does not
        count towards `max_windows`)."""
        started = time.monotonic()
        idle = 0.0 if self.last_end is None else started - self.last_end
        window = self.listed_window(w)
        urls = ", ".join(sorted({a.store_url for a in window.in_time.values()})) or "none"
        parts = [(f"listing the miners' stores ({urls})", time.monotonic() - started)]
        mark = time.monotonic()
        if not self.reach_models(w, stop):
            return False
        parts.append(("reaching the models to check against", time.monotonic() - mark))
        mark = time.monotonic()
        mg = self.chain.metagraph()
        before = self.close_last_window(w - 1, mg)
        assert self.base is not None and self.model is not None, "reach_models caught the models up"
        self.rt.load_params(self.base.params)
        self.start_hash = state_hash(window_start_state(self.rt.model))
        if is_checkpoint_window(self.windows, w):
            self.publish(checkpoint_key(self.rt.run_id, w, self.hotkey), encode_checkpoint(self.model))
        verdicts, pooled = self.check_window(window, mg, stop)
        self.options.behaviour.judge(self, w, verdicts)
        adopted = [r.miner for r in before.rechecks if r.outcome == ADOPTED]
        self.fold_scores(w, mg, verdicts, adopted, pooled, before.audit)
        parts.append((f"checking the miners (reading their stores: {urls})", time.monotonic() - mark))
        mark = time.monotonic()
        found = Found(verdicts, before.refused, before.rechecks, pooled, before.audit)
        published = self.publish_window(w, found, window.inventory.block, stop)
        parts.append((f"publishing to {self.store.url}", time.monotonic() - mark))
        seconds = time.monotonic() - started
        if self.chain.block() >= aggregate_deadline(self.windows, w):
            log.warning(
                "window %d: validation finished after the aggregate deadline (block %d); the time went to %s",
                w,
                aggregate_deadline(self.windows, w),
                time_spent(parts),
            )
        weights = self.set_weights(mg)
        self.last_end = time.monotonic()
        log.info(
            "window %d: %d updates checked, %d accepted, in %.1fs; scores %s",
            w,
            len(verdicts),
            len(published.accepted),
            seconds,
            {v.uid: round(v.score, 3) for v in verdicts},
        )
        me = mg.neuron(self.hotkey)
        took = Took(seconds, idle, self.syncer.bytes_received, me.total_emission if me else 0.0, weights)
        record = window_record(found, before.agreement, published, took, self.state.averages)
        self.state = self.state.model_copy(update={"record": record})
        save_state(self.state, self.state_path)
        self.pending.clear_through(w)
        if self.metrics:
            self.metrics.log(w, record)
        return True

    def listed_window(self, w: int) -> ValidatorWindow:
        """Window w as listed at its reveal deadline: its miners, its commitments and what their stores
        held then, listed now or as listed before a restart (`validators.listing`)."""
        pending = self.note_miners(w)
        in_time, commitments = committed_by_deadline(self.chain, self.windows, w)
        inventory, now = listing(
            self.rt, self.pending, pending, in_time, self.miner_stores, self.breaker, self.chain.block
        )
        if not now and self.listing_said != w:
            log.info("window %d: resuming with the listing taken at block %d", w, inventory.block)
        self.listing_said = w
        return ValidatorWindow(
            pending, in_time, commitments, inventory, self.hotkey, reveal_deadline(self.windows, w)
        )

    def reach_models(self, w: int, stop: threading.Event) -> bool:
        """Catch the window's base and the model its aggregate applies to up with the network; False,
        after a block's wait, when they are out of reach."""
        try:
            self.base = self.syncer.catch_up(self.model, self.base_index(w))
            self.model = self.syncer.catch_up(self.base, w)
        except SyncUnavailable as exc:
            self.outages.failed(MODELS, f"window {w} waits for them: {exc}")
            self.unreached = w
            stop.wait(self.chain.block_time())
            return False
        self.outages.answered(MODELS)
        self.unreached = None
        return True

    def close_last_window(self, w: int, mg: Metagraph) -> LastWindow:
        """What the next window settles of window w: the withheld reveals read again, the other
        validators' findings and receipts re-checked, the aggregates refused and whether the
        followed one agrees with this validator's."""
        self.reread_withheld(w, mg)
        rechecks = recheck_published(self.rt, self.stores, mg, w, self.hotkey, self.held)
        banned = barred_by_findings(self.state.banned_until, rechecks, w, self.rt.config.scoring.ban_windows)
        self.state = self.state.model_copy(update={"banned_until": banned})
        audit = self.audit_replays(w, mg, rechecks)
        followed = self.syncer.followed.get(w)
        agreement = leader_agreement(self.hotkey, w, self.state.own_aggregate, followed)
        return LastWindow(rechecks, audit, self.syncer.take_refusals(), agreement)

    def publish_window(self, w: int, found: Found, observed_block: int, stop: threading.Event) -> Published:
        """Publish window w's findings, receipts, report and aggregate (`validators.publishing`),
        through an outage of the store while they still count (`OwnStore.until_aggregate`)."""
        assert self.held is not None and self.model is not None, "the window is checked against its model"
        put = self.own_store.until_aggregate(self.windows, w, stop)
        publication = WindowPublication(self.rt, self.wallet, self.chain, self.store_url, self.held, put)
        behaviour = self.options.behaviour
        receipted, tamper = partial(behaviour.receipted, self, w), partial(behaviour.tamper, self, w)
        published, own = publication.publish(found, self.state, self.model, observed_block, receipted, tamper)
        if own is not None:
            self.state = self.state.model_copy(update={"own_aggregate": own})
        return published

    def check_window(
        self, listed: ValidatorWindow, mg: Metagraph, stop: threading.Event
    ) -> tuple[list[MinerVerdict], Pooled]:
        """Every miner's verdicts, and the window's measurements as pooled here
        (`validators.window_check.check_pass`). Keeps what the next window needs to re-check the
        other validators' findings of this one and to re-read what was withheld (`held`)."""
        assert self.base is not None, "run_window caught the base up before checking"
        w = listed.number
        reads = MinerReads(
            self.rt, self.chain, self.state, self.miner_stores, self.breaker, self.pending, self.block_now
        )
        reads.start(w)
        window = frame_window(
            self.rt, self.chain, listed, mg, self.base, self.start_hash, self.syncer.behind()
        )
        measurer = Measurer(
            self.rt,
            self.hotkey,
            self.wallet.hotkey,
            self.chain,
            self.windows,
            self.stores,
            self.publish,
            self.block_now,
            self.state.distrusted(w),
            partial(self.options.behaviour.measured, self, w),
        )
        verdicts, pooled, self.held = check_pass(reads, window, measurer, stop)
        return verdicts, pooled

    def audit_replays(self, w: int, mg: Metagraph, rechecks: list[Recheck]) -> ReplayAudit:
        """Judge the other validators' replays of window w (`validators.receipts.audit_published`),
        those distrusted here left out; `rechecks`: the findings of window w, as re-checked here."""
        distrusted = self.state.distrusted(w + 1)
        return audit_published(self.rt, self.stores, mg, w, self.hotkey, self.held, distrusted, rechecks)

    def publish(self, key: str, data: bytes) -> bool:
        """Put `key` in this validator's store, one try (`OwnStore.put`)."""
        return self.own_store.put(key, data)

    # -- scores and weights ---------------------------------------------------------------------

    def fold_scores(
        self,
        w: int,
        mg: Metagraph,
        verdicts: list[MinerVerdict],
        adopted: list[str],
        pooled: Pooled,
        audit: ReplayAudit = NOT_JUDGED,
    ) -> None:
        """Fold window w into the state in memory (`validators.fold.fold_window`): `run_window` saves
        it once the window's weights and metrics record are added."""
        self.state = fold_window(
            self.state, w, mg.hotkeys, verdicts, adopted, pooled, audit, self.rt.config.scoring
        )

    def reread_withheld(self, w: int, mg: Metagraph) -> None:
        """Read again what miners withheld in window w and settle their holds
        (`validators.withheld.reread_due`); the state is saved at once."""
        if not any(s.window <= w for s in self.state.suspended.values()):
            return
        self.state = reread_due(
            self.rt, self.stores, self.state.aligned(mg.hotkeys), self.held, mg.hotkeys, w
        )
        save_state(self.state, self.state_path)

    def set_weights(self, mg: Metagraph) -> list[float]:
        """Set weights from the averages when allowed; returns the weights set (empty if none). The
        block they were set at is noted in the state in memory (`run_window` saves it)."""
        me = mg.neuron(self.hotkey)
        if me is None or not me.validator_permit:
            log.info("no validator permit yet; weights not set")
            return []
        if self.chain.block() - me.last_update < self.chain.hyperparameters().weights_rate_limit:
            return []  # the chain's rule, at the block the weights would be set (mg is as old as the check)
        weights = state_weights(
            self.state, mg, self.hotkey, self.chain.subnet_owner_hotkey(), self.rt.config.scoring
        )
        if sum(weights) <= 0:
            return []
        try:
            self.chain.set_weights(self.wallet, list(range(len(weights))), weights)
        except ChainError as exc:
            log.warning("setting weights refused: %s", exc)
            return []
        self.state = self.state.model_copy(update={"last_weights_block": mg.block})
        log.info("weights set: %s", {uid: round(x, 3) for uid, x in enumerate(weights) if x > 0})
        return weights
