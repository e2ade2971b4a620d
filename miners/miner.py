"""The miner's loop, window after window: sync → train → commit, with each window's reveal
uploading in the background while the next window trains.

1. Sync: reach the window's base from the validators' published aggregates (`distrai.protocol.sync`): the
   model after the previous window's aggregate, or on pipelined windows the one before it
   (`distrai.protocol.windows.base_index`).
2. Train: up to H inner steps on the miner's assigned data, in whole segments while the next one
   fits before the commit deadline (`pacing.py`), saving the state at every segment boundary.
3. Commit (before the commit deadline): encode the pseudo-gradient with the run's codec (error
   feedback carried across windows), sign the manifest, stage everything the reveal needs on disk
   (`reveal_job.py`), put the manifest in the miner's store, and anchor its hash on chain in the
   miner's announcement. Nothing downloadable yet names the update.
4. Reveal (after the commit deadline, before the reveal deadline), in the background
   (`uploader.py`): the update blob, and, if any validator challenges this miner (seeded by the
   hash of the block at the commit deadline, unknown while training), the two boundary states of
   every challenged segment, the last boundary state and the incoming codec residual, so the
   validator can replay the segments and re-encode the update from the trajectory.

Every window logs its train, idle and other seconds and the utilization (train / wall seconds);
every reveal logs its upload seconds, bytes and rate beside the rate it needed.

What the miner does at each of these points is its `Behaviour`: the honest one here by default;
`--miner.adversary TYPE` swaps in one of the cheats a validator must catch (`adversaries.py`).
"""

from __future__ import annotations

import dataclasses
import hashlib
import logging
import os
import shutil
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

import torch

from distrai.chain.base import Chain, ChainError
from distrai.codec import Encoded
from distrai.data.cache import ShardDeadline
from distrai.node.linkcheck import LinkVerdict, format_rate, measure_upload_rate, reveal_bytes, reveal_seconds
from distrai.node.metrics_records import LinkRecord, LostRecord, TrainRecord
from distrai.node.participant import Participant
from distrai.node.seat import Seat
from distrai.protocol.announce import Announcement, committed_updates
from distrai.protocol.globalmodel import SyncUnavailable
from distrai.protocol.layout import manifest_key
from distrai.protocol.standing import standing_lines
from distrai.protocol.update import encode_update, residual_hash
from distrai.protocol.windows import (
    commit_deadline,
    committed_in_time,
    reveal_deadline,
    roster_block,
    skipped_windows,
    window_of,
    window_start,
)
from distrai.store import StoreError
from distrai.store.outage import OutageLog
from distrai.train.boundaries import BoundaryState
from distrai.train.inner import TimeUp, inner_loop, window_start_state
from distrai.train.replay_class import replay_class_of
from distrai.train.sketch import sketch
from distrai.train.train_state import TrainState, load_state, save_state, state_hash
from distrai.wire import encode_tensors, sign_document
from distrai.wire.window_documents import Boundary, UpdateBlob, UpdateManifest
from miners.kept_states import DEFAULT_MAX_KEPT, check_kept_states, state_file, thin
from miners.pacing import Pacer, blocks_needed, commit_by, stop_time
from miners.rebuild import TrainedRecord, write_record
from miners.reveal_job import RevealJob, job_folder, sealed_jobs
from miners.uploader import RETRY_PAUSE_S, Uploader

log = logging.getLogger("distrai.miner")

LINK_PROBE_BYTES = 4 * 1024 * 1024
"""Bytes the start-up link check uploads (at most an eighth of a reveal)."""

BASE_MODEL = "the window's base model (the validators' aggregates)"
"""What a miner waits for when it cannot sync, as its outage log names it."""

FINISH_MARGIN = 1.5
"""Training stops this many times the last window's encode-and-commit seconds before the deadline
(one block's time before any window has committed)."""


class Behaviour:
    """An honest miner: one hook per point of the window, each doing what the protocol asks. Each
    adversary (`adversaries.py`) overrides the hooks it cheats in."""

    name = "honest"

    def train(self, miner: Miner, w: int, miners: list[str], states_dir: Path) -> Trained:
        return miner.train(w, miners, states_dir)

    def update(self, miner: Miner, pseudo_gradient: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        return pseudo_gradient

    def blob(self, miner: Miner, w: int, encoded: Encoded) -> bytes:
        return encode_update(encoded.payload, encoded.metadata, miner.hotkey, w)

    def manifest(self, miner: Miner, w: int, body: UpdateManifest) -> UpdateManifest:
        return body

    def sign(self, miner: Miner, w: int, body: UpdateManifest) -> bytes:
        return sign_document(miner.wallet.hotkey, body.body())

    def commits(self, miner: Miner) -> bool:
        """Whether to commit this window at all."""
        return True

    def reveal_blob(self, miner: Miner, w: int, blob: bytes, chain: Chain) -> bytes | None:
        """The blob to upload at reveal (None: upload none); runs in the uploading thread, which
        reads the chain through `chain`."""
        return blob

    def revealed(self, miner: Miner, w: int, challenged: bool, chain: Chain) -> None:
        """Called in the uploading thread once window w's reveal is uploaded."""


@dataclass(frozen=True)
class MinerOptions:
    work_dir: Path
    behaviour: Behaviour = field(default_factory=Behaviour)
    """Honest, or one of the adversaries of `adversaries.ADVERSARIES` (for demonstrations and tests)."""
    kept_states: int = DEFAULT_MAX_KEPT
    """The most boundary states of a window kept on disk (`miners.kept_states`); 0 keeps every one."""

    def __post_init__(self) -> None:
        check_kept_states(self.kept_states)


@dataclass(frozen=True)
class Trained:
    pseudo_gradient: dict[str, torch.Tensor]
    losses: list[float]
    boundaries: list[tuple[int, str, list[float]]]
    tokens: int
    steps: int
    """inner steps actually trained (fewer than the losses claim, for a lazy miner)"""


class Miner(Participant):
    def __init__(self, seat: Seat, options: MinerOptions):
        super().__init__(seat)
        self.options = options
        self.behaviour = options.behaviour
        self.residual: dict[str, torch.Tensor] | None = self._load_residual()
        self.last_window = -1
        self.last_end: float | None = None
        """when the last window's commit ended (monotonic): the time to the next window is idle"""
        self.segment_seconds: float | None = None
        """the last window's slowest segment: a window is started only if one fits"""
        self.finish_seconds: float | None = None
        """the last window's encoding, staging and commit: training stops early enough for it"""
        self.pacer: Pacer | None = None
        """the running window's pace (`train` stops when its next segment would not fit)"""
        self.uploader: Uploader | None = None
        self.outages = OutageLog(log)
        self.last_tried: int | None = None
        """the last window this process set out to train (None before the first)"""
        self.unreached: int | None = None
        """the window last set aside because its base model was out of reach, until it is trained or skipped"""
        self.off_roster: int | None = None
        """the window last passed over because its roster did not hold this hotkey (said once)"""

    # -- the loop -------------------------------------------------------------------------------

    def run(self, stop: threading.Event, max_windows: int | None = None) -> None:
        """Train window after window; each committed window's reveal uploads in the background
        while the next one trains. With `max_windows`, wait for the last reveal before returning."""
        self.uploader = Uploader(self, self.chain.connect_again())
        self.recover()
        self.uploader.start()
        self.check_link()
        done = 0
        try:
            while not stop.is_set() and (max_windows is None or done < max_windows):
                w = self.next_window()
                if w is None:
                    self.sleep_until(
                        window_start(self.windows, window_of(self.windows, self.chain.block()) + 1), stop
                    )
                    continue
                self.say_skipped(w)
                self.sleep_until(window_start(self.windows, w), stop)
                if stop.is_set():
                    break
                if self.run_window(w, stop):
                    done += 1
                else:
                    stop.wait(self.chain.block_time())
            self.uploader.drain(stop)
        finally:
            self.uploader.close()

    def next_window(self) -> int | None:
        """The window to train next: the current one while one segment and the commit still fit
        before its commit deadline (judged by the last window's; before any, while no more than a
        quarter of the train phase has passed), else the next one."""
        block = self.chain.block()
        current = window_of(self.windows, block)
        needed = (
            self.windows.commit_offset * 3 // 4
            if self.segment_seconds is None
            else blocks_needed(
                self.segment_seconds,
                self.finish_seconds or 0.0,
                self.chain.block_time(),
                self.chain.inclusion_blocks,
            )
        )
        if (
            current > self.last_window
            and block + needed < commit_deadline(self.windows, current)
            and self.on_roster(current)
        ):
            return current
        return None if current + 1 <= self.last_window else current + 1

    def on_roster(self, w: int) -> bool:
        """Whether this hotkey is among window w's miners: registered by the window's roster block,
        before the window began. A miner started right after its registration is not, and trains
        the next window; it says so once."""
        if self.hotkey in self.window_miners(w):
            return True
        if self.off_roster != w:
            log.info(
                "window %d: not trained: this hotkey registered after its miners were read (block %d); "
                "window %d is the first whose roster holds it",
                w,
                roster_block(self.windows, w),
                w + 1,
            )
            self.off_roster = w
        return False

    def note_lost(self, w: int, why: str) -> None:
        """Write in the metrics file that window w was lost and why (the dashboard's miner page lists
        the windows no validator's report covers from these, `distrai.dashboard.nodes`)."""
        if self.metrics:
            self.metrics.log(w, LostRecord(why=why))

    def say_skipped(self, w: int) -> None:
        """Say which windows before `w`, the next one to train, this process passes over, and why."""
        block = self.chain.block()
        if self.unreached is not None and self.unreached != w:
            self.outages.gave_up(BASE_MODEL, f"window {w} is next")
            log.warning(
                "window %d: skipped: its base model stayed out of reach until too late to train it",
                self.unreached,
            )
            self.note_lost(self.unreached, "skipped: its base model stayed out of reach until too late")
            self.unreached = None
        for skipped in skipped_windows(self.last_tried, w):
            log.warning(
                "window %d: skipped: at block %d, too little of its train phase was left for a segment "
                "and the commit (commit deadline: block %d)",
                skipped,
                block,
                commit_deadline(self.windows, skipped),
            )
            self.note_lost(
                skipped, "skipped: too little of its train phase was left when the miner came to it"
            )
        self.last_tried = w

    def check_link(self) -> LinkVerdict | None:
        """Measure the store's upload rate against what a challenged window's reveal needs
        (`distrai.node.linkcheck`), and say plainly when the link is too slow for this run."""
        validators = sum(1 for n in self.chain.metagraph().neurons if n.validator_permit)
        n_params = sum(p.numel() for p in self.rt.model.parameters())
        parts = reveal_bytes(self.rt.config, n_params, max(validators, 1))
        seconds = reveal_seconds(self.windows, self.chain.block_time())
        try:
            measured = measure_upload_rate(self.store, min(LINK_PROBE_BYTES, max(parts.total // 8, 1)))
        except StoreError as exc:
            log.warning("could not measure the store's upload rate: %s", exc)
            return None
        verdict = LinkVerdict(measured, parts.total, seconds)
        (log.info if verdict.ok else log.warning)(
            "link check: the store takes %s, a challenged window needs %s: %s",
            format_rate(measured),
            format_rate(verdict.required_rate),
            verdict.message,
        )
        if self.metrics:
            self.metrics.log(
                self.last_window,
                LinkRecord(
                    upload_rate_measured=measured,
                    upload_rate_needed=verdict.required_rate,
                    link_margin=verdict.margin,
                ),
            )
        return verdict

    def recover(self) -> None:
        """Pick up after a restart: a committed window whose reveal is still due is uploaded again
        (the store replaces or resumes what was partly sent); the codec residual the newest anchored
        manifest committed to is the one carried on; anything else is removed. The windows between the
        newest committed one and the next one trained are said to be skipped (`say_skipped`)."""
        jobs, unsealed = sealed_jobs(self.options.work_dir)
        for folder in unsealed:
            shutil.rmtree(folder, ignore_errors=True)
        block = self.chain.block()
        for job in jobs:
            if not self.anchored(job, block):
                log.info("window %d: its manifest was never anchored on chain; nothing to reveal", job.window)
                job.remove()
                continue
            self.last_window = max(self.last_window, job.window)
            if job.residual_out_path.exists() and (
                self.residual is None or residual_hash(self.residual) != job.residual_out_hash
            ):
                self.residual = load_state(job.residual_out_path).params
                self._save_residual()
                log.info("window %d: carrying on the codec residual its manifest committed to", job.window)
            if block < reveal_deadline(self.windows, job.window):
                log.info("window %d: resuming its reveal after a restart", job.window)
                assert self.uploader is not None, "run() starts the uploader first"
                self.uploader.submit(job)
            else:
                log.warning(
                    "window %d: its reveal deadline (block %d) passed while the miner was down; "
                    "a validator that challenged it finds nothing revealed",
                    job.window,
                    reveal_deadline(self.windows, job.window),
                )
                self.note_lost(job.window, "its reveal deadline passed while the miner was down")
                job.remove()
        if self.last_window >= 0:
            self.last_tried = self.last_window

    def anchored(self, job: RevealJob, block: int) -> bool:
        """Whether the chain holds the job's manifest as this miner's commitment for its window,
        in time (as of the block before the commit deadline once that block exists)."""
        deadline = commit_deadline(self.windows, job.window)
        try:
            counted = self.chain.commitments(block=min(block, deadline - 1))
        except ChainError as exc:
            log.warning("window %d: cannot read the commitments: %s", job.window, exc)
            return False
        in_time = committed_updates(
            counted, job.window, lambda b: committed_in_time(self.windows, job.window, b)
        )
        mine = in_time.get(self.hotkey)
        return mine is not None and mine.manifest_sha256 == job.manifest_sha256

    # -- one window -----------------------------------------------------------------------------

    def run_window(self, w: int, stop: threading.Event) -> bool:
        """Train, commit and hand the reveal over; False when the window could not be trained
        because its base model was out of reach (it does not count towards `max_windows`)."""
        started = time.monotonic()
        idle = 0.0 if self.last_end is None else started - self.last_end
        miners = self.window_miners(w)
        try:
            self.model = self.syncer.catch_up(self.model, self.base_index(w))
        except SyncUnavailable as exc:
            self.outages.failed(BASE_MODEL, f"window {w} waits for it: {exc}")
            self.unreached = w
            self.last_end = time.monotonic()
            return False
        self.outages.answered(BASE_MODEL)
        self.unreached = None
        for line in standing_lines(
            self.hotkey, self.syncer.take_settled(), self.rt.config.scoring.aggregate_top_n
        ):
            log.info(line)
        self.rt.load_params(self.model.params)
        folder = job_folder(self.options.work_dir, w)
        shutil.rmtree(folder, ignore_errors=True)
        trained_at = time.monotonic()
        self.pacer = Pacer(
            started=trained_at, until=self.stop_time(w, trained_at), stalled=lambda: self.rt.data.waited_s
        )
        self.rt.data.give_up_at(self.pacer.until)
        try:
            trained = self.behaviour.train(self, w, miners, folder / "states")
        except TimeUp as exc:
            log.warning("window %d: dropped: not one segment trained in time (%s)", w, exc)
            self.note_lost(w, "dropped: not one segment trained in time")
            self.pacer = None
            self.last_end = time.monotonic()
            return True
        finally:
            self.rt.data.give_up_at(None)
        train_seconds = time.monotonic() - trained_at
        self.segment_seconds = self.pacer.slowest or train_seconds
        self.pacer = None

        encoded = self.rt.codec.encode(self.behaviour.update(self, trained.pseudo_gradient), self.residual)
        blob = self.behaviour.blob(self, w, encoded)
        body = self.behaviour.manifest(
            self, w, self.manifest(w, trained, blob, encoded.metadata, encoded.residual)
        )
        manifest = self.behaviour.sign(self, w, body)
        job = self.stage(w, folder, manifest, blob, encoded.residual)
        if not self.behaviour.commits(self) or not self.commit(w, manifest, body.n_segments):
            job.remove()
            self.last_end = time.monotonic()
            return True
        if encoded.residual is not None:
            self.residual = encoded.residual
            self._save_residual()
        assert self.uploader is not None, "run() starts the uploader first"
        self.uploader.submit(job)
        self.last_window = w
        self.last_end = time.monotonic()
        self.finish_seconds = self.last_end - trained_at - train_seconds
        self.say_trained(
            w, trained, train_seconds, idle, self.last_end - started + idle, len(blob), len(manifest)
        )
        return True

    def say_trained(
        self,
        w: int,
        trained: Trained,
        train_seconds: float,
        idle: float,
        wall: float,
        blob: int,
        manifest: int,
    ) -> None:
        """Log a committed window, and write its metrics record (`TrainRecord`)."""
        assert self.uploader is not None, "run() starts the uploader first"
        log.info(
            "window %d: trained %d of %d steps (loss %.3f → %.3f) in %.1fs; update %d bytes; "
            "utilization %.0f%%; %d reveal(s) uploading",
            w,
            trained.steps,
            self.rt.inner.inner_steps,
            trained.losses[0],
            trained.losses[-1],
            train_seconds,
            blob,
            100 * train_seconds / wall,
            self.uploader.pending,
        )
        if not self.metrics:
            return
        record = TrainRecord(
            loss_first=trained.losses[0],
            loss_last=trained.losses[-1],
            tokens_per_s=trained.tokens / max(train_seconds, 1e-9),
            bytes_sent=blob + manifest,
            bytes_received=self.syncer.bytes_received,
            emission=self.own_emission(),
            train_seconds=train_seconds,
            idle_seconds=idle,
            other_seconds=wall - idle - train_seconds,
            wall_seconds=wall,
            utilization=train_seconds / wall,
            uploads_pending=self.uploader.pending,
            steps_trained=trained.steps,
            aggregates_refused=len(self.syncer.take_refusals()),
            behaviour=self.behaviour.name,
        )
        self.metrics.log(w, record)

    def stop_time(self, w: int, now: float) -> float:
        """When window `w`'s training must end (monotonic): the last block its commitment can land
        in begins at the chain's timestamp for it; the encoding and commit take 1.5 times the last
        window's (a block time before any)."""
        last = commit_by(commit_deadline(self.windows, w), self.chain.inclusion_blocks)
        seconds = self.chain.block_timestamp(last) - time.time()
        return stop_time(now, seconds, FINISH_MARGIN * (self.finish_seconds or self.chain.block_time()))

    def stage(
        self,
        w: int,
        folder: Path,
        manifest: bytes,
        blob: bytes,
        residual_out: dict[str, torch.Tensor] | None,
    ) -> RevealJob:
        """Write the window's reveal to disk before committing (`reveal_job.py`)."""
        job = RevealJob(
            window=w,
            folder=folder,
            manifest_sha256=hashlib.sha256(manifest).hexdigest(),
            residual_out_hash=None if residual_out is None else residual_hash(residual_out),
        )
        folder.mkdir(parents=True, exist_ok=True)
        job.blob_path.write_bytes(blob)
        if self.residual is not None:
            job.residual_in_path.write_bytes(encode_tensors(self.residual))
        if residual_out is not None:
            save_state(TrainState(params=residual_out, optimizer={}, step=0), job.residual_out_path)
        job.seal()
        return job

    def reveal_blob(self, w: int, blob: bytes, chain: Chain) -> bytes | None:
        """The update blob of window w its behaviour uploads (`Behaviour.reveal_blob`)."""
        return self.behaviour.reveal_blob(self, w, blob, chain)

    def revealed(self, w: int, challenged: bool, chain: Chain) -> None:
        """Window w's reveal is uploaded (`Behaviour.revealed`)."""
        self.behaviour.revealed(self, w, challenged, chain)

    def max_kept_states(self) -> int | None:
        """The most boundary states a window keeps on disk; None: every one. Ranks that shard the
        model keep every one: a dropped state is rebuilt on one device, which the model does not fit."""
        kept = self.options.kept_states
        if kept == 0 or (self.rt.parallel is not None and self.rt.parallel.sharded):
            return None
        return kept

    def train(
        self,
        w: int,
        miners: list[str],
        states_dir: Path,
        data_of: str | None = None,
        steps: int | None = None,
    ) -> Trained:
        """Up to H inner steps on this miner's assigned batches, while the window's pace allows,
        keeping boundary states in `states_dir` (`max_kept_states` of them at most) and what they were
        trained on (an adversary may pass another hotkey's data, or fewer steps)."""
        cfg = self.rt.config
        states_dir.mkdir(parents=True, exist_ok=True)
        owner = data_of or self.hotkey

        k = cfg.train.segment_steps

        def time_up(t: int, why: str) -> TimeUp:
            if t >= k:
                log.warning(
                    "window %d: %s; its %d whole segment(s) before step %d are committed",
                    w,
                    why,
                    t // k,
                    t // k * k,
                )
            return TimeUp(why)

        def batch_for_step(t: int) -> torch.Tensor:
            pacer = self.pacer
            if pacer is not None and t % k and pacer.time_up():
                raise time_up(t, f"the training time ran out at step {t}, in the middle of a segment")
            try:
                return self.rt.batch(w, owner, miners, t)
            except ShardDeadline as exc:
                why = f"the data of step {t} stayed out of reach until the training time ran out ({exc})"
                raise time_up(t, why) from exc

        max_kept = self.max_kept_states()

        def keep(boundary: BoundaryState) -> None:  # on the boundary worker's thread
            assert boundary.state is not None, "on_boundary sees every boundary with its state"
            save_state(boundary.state, state_file(states_dir, boundary.step))
            thin(states_dir, boundary.step, k, max_kept)

        inner = self.rt.inner if steps is None else dataclasses.replace(self.rt.inner, inner_steps=steps)
        go_on = None if self.pacer is None else self.pacer.go_on
        result = inner_loop(
            self.rt.model,
            batch_for_step,
            self.rt.loss_fn,
            inner,
            keep_states=False,  # on disk: host memory stays flat over the window's boundaries
            on_boundary=keep,
            go_on=go_on,
            parallel=self.rt.parallel,
        )
        hashes = {b.step: b.state_hash for b in result.boundaries}
        write_record(states_dir, TrainedRecord(owner=owner, miners=list(miners), hashes=hashes))
        return Trained(
            pseudo_gradient=result.pseudo_gradient,
            losses=result.losses,
            boundaries=[(b.step, b.state_hash, b.sketch) for b in result.boundaries],
            tokens=sum(s.tokens for s in result.steps),
            steps=len(result.steps),
        )

    def idle_update(self, states_dir: Path) -> Trained:
        """A well-formed manifest for a zero update: every boundary claims G_w's starting state
        (one file on disk, linked under every boundary's name)."""
        states_dir.mkdir(parents=True, exist_ok=True)
        start: TrainState = window_start_state(self.rt.model)
        digest = state_hash(start)
        numbers = sketch(start.params, self.rt.inner.sketch_seed, self.rt.inner.sketch_size).tolist()
        steps = list(range(0, self.rt.inner.inner_steps + 1, self.rt.inner.segment_steps))
        first = states_dir / f"{steps[0]:06d}.safetensors"
        save_state(start, first)
        for step in steps[1:]:
            os.link(first, states_dir / f"{step:06d}.safetensors")
        assert self.model is not None, "the miner caught its model up before the window"
        zero = {name: torch.zeros_like(p) for name, p in self.model.params.items()}
        return Trained(zero, [0.0] * self.rt.inner.inner_steps, [(s, digest, numbers) for s in steps], 0, 0)

    def manifest(
        self,
        w: int,
        trained: Trained,
        blob: bytes,
        codec_metadata: dict[str, str],
        residual_out: dict[str, torch.Tensor] | None,
    ) -> UpdateManifest:
        """The window's signed manifest's body: what the miner commits to (`UpdateManifest`)."""
        assert self.model is not None, "the miner caught its model up before the window"
        return UpdateManifest(
            run_id=self.rt.run_id,
            window=w,
            hotkey=self.hotkey,
            base_hash=self.model.hash,
            update=UpdateBlob(
                sha256=hashlib.sha256(blob).hexdigest(),
                size=len(blob),
                codec=self.rt.config.codec.name,
                codec_metadata=dict(codec_metadata),
            ),
            micro_batches=self.rt.inner.step.micro_batches,
            ranks=self.rt.inner.step.ranks,
            sharded=self.rt.inner.step.sharded,
            checkpointing=self.rt.model.is_activation_checkpointing,
            base_on_host=self.rt.inner.base_on_host,
            replay_class=replay_class_of(
                self.rt.model,
                self.rt.device,
                self.rt.inner.step,
                self.rt.inner.optimizer.implementation,
                self.rt.config.train.compile,
            ),
            losses=trained.losses,
            boundaries=[Boundary(step=s, state_hash=h, sketch=k) for s, h, k in trained.boundaries],
            residual_in_hash=None if self.residual is None else residual_hash(self.residual),
            residual_out_hash=None if residual_out is None else residual_hash(residual_out),
        )

    def commit(self, w: int, manifest: bytes, segments: int) -> bool:
        """Put the signed manifest in the store and anchor its hash on chain with the `segments` it
        claims, before the commit deadline; False (said) when the window is dropped."""
        deadline = commit_deadline(self.windows, w)
        if self.chain.block() >= deadline:
            log.warning(
                "window %d: training ended after the commit deadline (block %d); update dropped", w, deadline
            )
            self.note_lost(w, "dropped: training ended after the commit deadline")
            return False
        if not self.put_manifest(w, manifest):
            self.note_lost(w, "dropped: its manifest could not be put in its store in time")
            return False
        try:
            announcement = Announcement(
                store_url=self.store_url,
                window=w,
                manifest_sha256=hashlib.sha256(manifest).hexdigest(),
                segments=segments,
            )
            self.chain.commit(self.wallet, announcement.encode())
        except ChainError as exc:
            log.error("window %d: commit failed: %s", w, exc)
            self.note_lost(w, f"dropped: its commitment failed: {exc}")
            return False
        committed = self.chain.commitment(self.hotkey)
        if committed is None or not committed_in_time(self.windows, w, committed.block):
            log.warning("window %d: the commitment landed after the deadline", w)
            self.note_lost(w, "dropped: its commitment landed after the commit deadline")
            return False
        return True

    def put_manifest(self, w: int, manifest: bytes) -> bool:
        """Put the window's manifest in the miner's store, trying again through an outage while its
        commitment can still land before the commit deadline; False (said) when it cannot."""
        last = commit_by(commit_deadline(self.windows, w), self.chain.inclusion_blocks)
        what = f"the store {self.store.url} (window {w}'s manifest)"
        while True:
            try:
                self.store.put(manifest_key(self.rt.run_id, w, self.hotkey), manifest)
            except StoreError as exc:
                self.outages.failed(what, exc)
                if self.chain.block() >= last:
                    self.outages.gave_up(what, f"its commitment could no longer land before block {last + 1}")
                    log.error("window %d: commit failed, so the window is dropped: %s", w, exc)
                    return False
                time.sleep(min(RETRY_PAUSE_S, self.chain.block_time() / 4))
                continue
            self.outages.answered(what)
            return True

    def own_emission(self) -> float:
        neuron = self.chain.metagraph().neuron(self.hotkey)
        return 0.0 if neuron is None else neuron.total_emission

    # -- error feedback across windows and restarts ---------------------------------------------

    def _residual_path(self) -> Path:
        return self.options.work_dir / "codec_residual.safetensors"

    def _load_residual(self) -> dict[str, torch.Tensor] | None:
        path = self._residual_path()
        if not path.exists():
            return None
        state = load_state(path)
        return state.params

    def _save_residual(self) -> None:
        if self.residual is None:
            return
        self.options.work_dir.mkdir(parents=True, exist_ok=True)
        tmp = self._residual_path().with_suffix(".tmp")
        save_state(TrainState(params=self.residual, optimizer={}, step=0), tmp)
        tmp.replace(self._residual_path())
