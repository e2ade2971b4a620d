"""A window's check pass: the listed window framed against its base model (`frame_window`), its miners read
(`MinerReads`: a barred miner not read, a store that did not answer asked again until the read
patience, the verdicts then settled, and every miner's codec residual chain followed), its share
replayed and measured, copies flagged, the measurements pooled and every miner scored
(`check_pass`)."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

from distrai.chain.base import Chain, Metagraph
from distrai.protocol.announce import claims, sharing_validators
from distrai.protocol.globalmodel import GlobalModel
from distrai.protocol.run import challenge_inputs
from distrai.protocol.runtime import Runtime
from distrai.protocol.sync import StoreCache
from distrai.protocol.windows import (
    challenged,
    commit_deadline,
    read_patience,
    replay_shares,
    score_shares,
)
from distrai.store.breaker import PassBreaker
from distrai.wire.verdicts import Check
from validators.checks import MinerVerdict, flag_copies
from validators.held_window import HeldWindow, held_window
from validators.inventory import AtDeadline, Reader, take_inventory
from validators.measuring import Measurer, WindowMeasuring
from validators.pending import PendingWindows
from validators.shared_scoring import Pooled
from validators.validator_state import ValidatorState
from validators.validator_window import ValidatorWindow, check_one, replay_challenge
from validators.window import WindowBasis
from validators.window_scoring import score_window
from validators.withheld import own_outage, settle

log = logging.getLogger("distrai.validator")

Checked = dict[str, tuple[MinerVerdict, AtDeadline | None]]
"""miner → its verdict and its store as it stood at the deadline (None: not read)"""


def frame_window(
    runtime: Runtime,
    chain: Chain,
    window: ValidatorWindow,
    mg: Metagraph,
    base: GlobalModel,
    start_hash: str | None,
    behind: bool,
) -> ValidatorWindow:
    """The listed `window` framed against its base model: its challenge drawn from the block at the
    commit deadline, the replays shared among the validators taking part, and the uid of each miner
    with a manifest in time (those registered now)."""
    w, in_time = window.number, window.in_time
    deadline_hash = chain.block_hash(commit_deadline(runtime.config.windows, w))
    registered = {n.hotkey: n.registered_at for n in mg.neurons}
    inputs = challenge_inputs(runtime.config, deadline_hash, w, in_time, claims(in_time), registered)
    permitted = [n.hotkey for n in mg.neurons if n.validator_permit and n.stake > 0]
    sharing = sharing_validators(permitted, window.commitments, w)
    shares = replay_shares(inputs, sharing)
    if not shares:
        log.warning("window %d: no validator holds a permit, so nobody replays", w)
    basis = WindowBasis(
        runtime,
        w,
        base,
        inputs,
        tuple(window.miners),
        shares,
        in_time,
        lambda hk: mg.uid_of(hk) is not None,
        start_hash,
        behind=behind,
    )
    uids = {hk: uid for hk in sorted(in_time) if (uid := mg.uid_of(hk)) is not None}
    return window.framed(basis, frozenset(challenged(inputs)), sharing, uids)


class MinerReads:
    """A window's miners read by this validator, in its `state` (bars and residual chains, kept in
    place); each pass of reads through `breaker` (`distrai.store.breaker`)."""

    def __init__(
        self,
        runtime: Runtime,
        chain: Chain,
        state: ValidatorState,
        stores: StoreCache,
        breaker: PassBreaker,
        pending: PendingWindows,
        block_now: Callable[[], int],
    ):
        self.rt = runtime
        self.chain = chain
        self.block_now = block_now
        """the chain's block, a slow answer said in the log (`Participant.block_now`)"""
        self.state = state
        self.stores = stores
        self.breaker = breaker
        self.pending = pending

    def start(self, w: int) -> None:
        """Begin window w: the miners' residual chains start again when window w − 1 was not checked."""
        if self.state.window != w - 1 and self.state.residuals:
            log.info(
                "window %d: window %d was not checked here; the miners' residual chains start again", w, w - 1
            )
            self.state.residuals.clear()

    def check(
        self, window: ValidatorWindow, hotkey: str, uid: int, replay: bool = True
    ) -> tuple[MinerVerdict, AtDeadline | None]:
        """One miner's verdict and its store as it stood at the deadline (`validator_window.check_one`);
        a barred miner is not read."""
        if self.state.is_banned(hotkey, window.number):
            until = self.state.banned_until[hotkey]
            self.state.residuals.pop(hotkey, None)
            return MinerVerdict(hotkey, uid).fail(
                Check.BANNED, f"barred until window {until}", fraud=False
            ), None
        return check_one(self.stores, window, hotkey, uid, replay=replay)

    def list_again(self, window: ValidatorWindow) -> ValidatorWindow:
        """The window with the stores that could not be listed at the deadline listed again now."""
        w, listed = window.number, window.inventory
        after = listed.unreachable | set(listed.late)
        again = take_inventory(
            self.stores,
            self.rt.run_id,
            w,
            {hk: a for hk, a in window.in_time.items() if a.store_url in after},
            self.rt.config.limits.max_manifest_bytes,
            self.chain.block,
        )
        inventory = listed.merged(again)
        for url in sorted(listed.unreachable - inventory.unreachable):
            log.info("window %d: the store %s answered at block %d", w, url, again.block)
        self.pending.save(window.noted.with_inventory(inventory))
        return window.listed_again(inventory)

    def ask_again(
        self, window: ValidatorWindow, checked: Checked, stop: threading.Event
    ) -> tuple[ValidatorWindow, list[MinerVerdict]]:
        """Ask the miners whose store did not answer the first pass again, every block until the read
        patience and at least once more in any case (a validator whose first pass ended after the
        patience, late or slowed, would otherwise settle a store that came back meanwhile as withheld;
        a withholding miner gains one more read, which it fails like the first); then settle every
        verdict (`validators.withheld.settle`) and follow its residual chain. `checked` is updated."""
        w = window.number
        patience = read_patience(self.rt.config.windows, w)
        unread = sorted(hk for hk, (v, _) in checked.items() if v.unread)
        last_asked = self.block_now()
        if unread:
            log.warning(
                "window %d: %d miners' stores did not answer (%s); %s",
                w,
                len(unread),
                ", ".join(hk[:10] for hk in unread),
                f"asking again until block {patience}"
                if last_asked < patience
                else f"asking once more: the first reads ended at block {last_asked}, after the read "
                f"patience (block {patience})",
            )
        asked_again = 0
        while unread and not stop.is_set() and (asked_again == 0 or self.block_now() < patience):
            stop.wait(self.chain.block_time())
            last_asked = self.chain.block()
            asked_again += 1
            with self.breaker.one_pass():  # each store is asked afresh
                if window.inventory.unreachable or window.inventory.late:
                    window = self.list_again(window)
                for hk in unread:
                    checked[hk] = self.check(window, hk, window.uids[hk])
            unread = [hk for hk in unread if checked[hk][0].unread]
        outage = own_outage(len(unread), len(window.uids))
        if unread:
            log.warning(
                "window %d: %d miners' stores still did not answer at block %d%s",
                w,
                len(unread),
                self.chain.block(),
                "; most stores are out of reach, so this validator's own link is down: nobody is blamed"
                if outage
                else "",
            )
        verdicts = [v for v, _ in checked.values()]
        for v in verdicts:
            settle(
                v,
                challenged=v.hotkey in window.challenged,
                outage=outage,
                patience_block=max(patience, last_asked),
            )
            self.follow_residual(v)
        return window, verdicts

    def follow_residual(self, verdict: MinerVerdict) -> None:
        """The residual a miner carries into this window must be the one it committed leaving its
        last window (else it could pick a residual that turns any update into a "consistent" one).
        A break scores zero but is not fraud: a miner that lost its residual in a crash restarts it.
        A validator knows a miner's last residual only if it read every commitment since: records
        are forgotten when a commitment could not be read, and all of them when the validator
        missed a window (`start`)."""
        residuals = self.state.residuals
        if verdict.manifest is None:  # a commitment this validator could not read: the chain is lost to it
            residuals.pop(verdict.hotkey, None)
            return
        before = residuals.get(verdict.hotkey)
        if before is not None and verdict.passed and verdict.manifest.residual_in_hash != before:
            verdict.fail(
                Check.TRAJECTORY,
                "residual_in_hash does not continue the residual committed in the miner's last window",
                fraud=False,
            )
        if verdict.manifest.residual_out_hash is None:
            residuals.pop(verdict.hotkey, None)
        else:
            residuals[verdict.hotkey] = verdict.manifest.residual_out_hash


def check_pass(
    reads: MinerReads, window: ValidatorWindow, measurer: Measurer, stop: threading.Event
) -> tuple[list[MinerVerdict], Pooled, HeldWindow]:
    """Every miner's verdict in the framed `window`, the window's measurements as pooled here, and
    what the next window re-checks the others' findings and receipts against: a first pass of reads,
    measuring this validator's share of what passed and replaying its share of the challenged, then
    the stores that did not answer asked again (`MinerReads.ask_again`), copies flagged
    (`checks.flag_copies`), the rest of the share measured, the others' measurements pooled
    (`validators.measuring`) and every miner scored (`validators.window_scoring`)."""
    replicas = reads.rt.config.scoring.score_replicas
    shares = score_shares(window.basis.inputs, window.sharing, replicas)
    measuring = WindowMeasuring(measurer, window.basis, shares)
    with reads.breaker.one_pass():  # the first pass of reads
        checked = {hk: reads.check(window, hk, uid, replay=False) for hk, uid in window.uids.items()}
        measuring.measure_share([v for v, _ in checked.values()])
        for verdict, reader in checked.values():
            replay_challenge(window, verdict, reader)
    window, verdicts = reads.ask_again(window, checked, stop)
    commit_blocks = {hk: window.commitments[hk].block for hk in window.in_time}
    flag_copies(verdicts, commit_blocks)
    measuring.measure_share(verdicts)
    pooled = measuring.pool(verdicts, stop)
    score_window(reads.rt, verdicts, pooled.measurements, commit_blocks)
    readers: dict[str, Reader] = {hk: reader for hk, (_, reader) in checked.items() if reader is not None}
    return verdicts, pooled, held_window(window.basis, verdicts, readers)
