"""The miner's reveals, uploaded in a background thread while the next window trains.

Jobs (`reveal_job.py`) are taken oldest first. For each: wait for the block at the window's
commit deadline (its hash draws the challenge), work out whether this miner is challenged,
and upload through the miner's store (its bandwidth limit included): the update blob first, then,
when challenged, the trajectory reveal (`distrai.protocol.trajectory`) and the start state of the run of
challenged segments (rebuilt first when the window did not keep it, `miners.rebuild`), coded
losslessly against the window's base (`distrai.train.coded_state`: the job's boundary 0 holds that
base). A job whose reveal deadline has passed before it began is dropped,
since nothing uploaded after it counts, unless the store has failed every try since before that
deadline. A store that does not answer is tried again every half second (a quarter block at most)
until `give_up_block`: the reveal deadline, or one window later for an outage under way at the
deadline; the outage is logged once when it starts and once when it ends (`distrai.store.outage`). While
uploading, the uploader projects its finish from the rate it achieves and says, before the
deadline, when the reveal will not make it. Every job ends with one metrics record (`RevealRecord`,
`"event": "reveal"`): seconds, bytes, rate, the rate that was needed, and whether it was late. Revealed states stay in the store for the run's
`verification.retention_windows` windows, then the uploader deletes them. The thread has its own
chain connection.
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

import torch

from distrai.chain.base import Chain, ChainError
from distrai.node.metrics import Metrics
from distrai.node.metrics_records import RevealRecord
from distrai.protocol.announce import claims, committed_by_deadline
from distrai.protocol.layout import state_key, states_prefix, trajectory_key
from distrai.protocol.run import challenge_inputs
from distrai.protocol.runtime import Runtime
from distrai.protocol.trajectory import build_trajectory, drawn_pieces, encode_trajectory
from distrai.protocol.update import residual_digests
from distrai.protocol.windows import (
    ChallengeInputs,
    WindowConfig,
    commit_deadline,
    reveal_deadline,
    run_starts,
    segments_to_reveal,
)
from distrai.store import Store, StoreError
from distrai.store.outage import OutageLog
from distrai.train.coded_state import encode_coded_state
from distrai.train.train_state import load_state, state_digests
from distrai.wire import decode_tensors
from miners.kept_states import steps_on_disk
from miners.rebuild import RebuildError, rebuild
from miners.reveal_job import RevealJob

log = logging.getLogger("distrai.miner")

RETRY_PAUSE_S = 0.5
"""The most a reveal waits between tries of a store that does not answer (a quarter block at most)."""


def give_up_block(windows: WindowConfig, w: int, outage_began: int) -> int:
    """The block from which a reveal of window `w` stops trying a store that has not answered since
    block `outage_began`. Through an outage under way at the window's reveal deadline, the reveal
    deadline of window `w + 1`: validators that could not list or read the store at the deadline try
    again, and re-read what a challenged miner withheld one window later (docs/protocol.md, "Withheld
    reveals"), so what lands by then still counts. Through one that began after the deadline, the
    deadline itself: the validators listed the store at the deadline, and nothing later counts."""
    deadline = reveal_deadline(windows, w)
    return deadline if outage_began >= deadline else reveal_deadline(windows, w + 1)


@dataclass(frozen=True)
class Piece:
    """One object of a reveal: where it goes and where its bytes are."""

    key: str | None
    """store key; None for the update blob, stored content-addressed"""
    size: int
    data: bytes | None = None
    """the bytes, for what is built in memory (the blob, the trajectory reveal); else `path`"""
    path: Path | None = None


@dataclass(frozen=True)
class RevealResult:
    states: int
    bytes_sent: int
    """everything uploaded, the update blob included"""
    seconds: float
    late: bool
    update_bytes: int = 0


class RevealingMiner(Protocol):
    """The miner as its uploader sees it (`miners.miner.Miner`)."""

    rt: Runtime
    store: Store
    hotkey: str
    windows: WindowConfig
    metrics: Metrics | None

    def reveal_blob(self, w: int, blob: bytes, chain: Chain) -> bytes | None:
        """The update blob of window w to upload (None: none)."""
        ...

    def revealed(self, w: int, challenged: bool, chain: Chain) -> None:
        """Told once window w's reveal is uploaded."""
        ...


class Uploader:
    def __init__(self, miner: RevealingMiner, chain: Chain):
        self.miner = miner
        self.chain = chain
        self.jobs: queue.Queue[RevealJob] = queue.Queue()
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, name="uploader", daemon=True)
        self.outages = OutageLog(log)
        self.failing_since: int | None = None
        """the block of the first failed try of the store since it last took an object"""

    def start(self) -> None:
        self.thread.start()

    def submit(self, job: RevealJob) -> None:
        self.jobs.put(job)

    @property
    def pending(self) -> int:
        """Jobs queued or under way."""
        return self.jobs.unfinished_tasks

    def drain(self, stop: threading.Event) -> None:
        """Wait until every job is done (each ends by its reveal deadline at the latest), or `stop`."""
        while self.pending and not stop.is_set():
            stop.wait(0.2)

    def close(self) -> None:
        """Stop after the object under way; unfinished jobs stay on disk for the next start."""
        self.stop.set()
        if self.thread.is_alive():
            self.thread.join(timeout=30)

    def _run(self) -> None:
        while not self.stop.is_set():
            try:
                job = self.jobs.get(timeout=0.2)
            except queue.Empty:
                continue
            try:
                result = self.upload(job)
                if result is not None:
                    job.remove()
                    self.sweep(job.window - self.miner.rt.config.verification.retention_windows)
            except ChainError as exc:
                log.warning(
                    "window %d: the reveal stopped: its chain could not be read (%s); the job stays on "
                    "disk for the next start",
                    job.window,
                    exc,
                )
            except Exception:
                log.exception("window %d: the reveal failed", job.window)
            finally:
                self.jobs.task_done()

    def sweep(self, window: int) -> None:
        """Delete this miner's revealed states and trajectory of `window` from its store: the run's
        retention (`verification.retention_windows`) is over, and no finding can be re-checked on them."""
        if window < 0:
            return
        miner = self.miner
        run_id, hotkey = miner.rt.run_id, miner.hotkey
        try:
            keys = miner.store.list(states_prefix(run_id, window, hotkey))
            trajectory = trajectory_key(run_id, window, hotkey)
            if miner.store.exists(trajectory):
                keys.append(trajectory)
            for key in keys:
                miner.store.delete(key)
        except StoreError as exc:
            log.warning("window %d: could not delete the reveals past their retention: %s", window, exc)
            return
        if keys:
            log.info("window %d: %d revealed objects deleted, past their retention", window, len(keys))

    # -- one job ---------------------------------------------------------------------------------

    def upload(self, job: RevealJob) -> RevealResult | None:
        """Upload one window's reveal; None when stopped before it finished (the job stays on disk)."""
        windows = self.miner.windows
        w, deadline = job.window, reveal_deadline(windows, job.window)
        if not self._wait_for(commit_deadline(windows, w) + 1):
            return None
        if self.chain.block() >= deadline and not self.failing_over(deadline):
            log.warning(
                "window %d: its reveal deadline (block %d) passed before the upload began; dropped",
                w,
                deadline,
            )
            self._log(w, RevealResult(0, 0, 0.0, late=True), needed=0.0)
            return RevealResult(0, 0, 0.0, late=True)
        steps, inputs = self._to_reveal(job)
        steps = self.rebuild_missing(job, steps)
        job.prune(steps)
        pieces = self._pieces(job, steps, inputs)
        total = sum(p.size for p in pieces)
        seconds_left = (deadline - self.chain.block()) * self.chain.block_time()
        needed = total / max(seconds_left, 1e-9)
        log.info(
            "window %d: revealing %d states, the trajectory and the update, %.1f MB, before block %d (%.0f s): needs %.2f MB/s",
            w,
            len(steps),
            total / 1e6,
            deadline,
            seconds_left,
            needed / 1e6,
        )
        started, sent, warned = time.monotonic(), 0, False
        for piece in pieces:
            if self.stop.is_set():
                return None
            if not self._put_through_outages(w, piece):
                if self.stop.is_set():
                    return None
                break
            sent += piece.size
            warned = warned or self._warn_if_late(w, deadline, total - sent, sent, started)
        result = RevealResult(
            states=len(steps),
            bytes_sent=sent,
            update_bytes=sum(p.size for p in pieces if p.key is None) if sent else 0,
            seconds=time.monotonic() - started,
            late=self.chain.block() >= deadline or sent < total,
        )
        if result.late:
            log.warning(
                "window %d: the reveal did not finish before its deadline (block %d): %.1f of %.1f MB in %.0f s",
                w,
                deadline,
                sent / 1e6,
                total / 1e6,
                result.seconds,
            )
        self._log(w, result, needed)
        self.miner.revealed(w, inputs is not None, self.chain)
        return result

    def _wait_for(self, block: int) -> bool:
        while not self.stop.is_set():
            try:
                if self.chain.block() >= block:
                    return True
            except ChainError as exc:
                log.warning("chain unavailable while waiting for block %d: %s", block, exc)
            self.stop.wait(min(0.5, self.chain.block_time() / 4))
        return False

    def _to_reveal(self, job: RevealJob) -> tuple[list[int], ChallengeInputs | None]:
        """The start step of the run of challenged segments (none when the run starts at segment 0,
        whose start is the window's base), and the window's challenge inputs when this miner is
        challenged (None when not); the miners drawn from are those whose commitment the chain held
        at the block before the commit deadline."""
        miner, windows, w = self.miner, self.miner.windows, job.window
        deadline = commit_deadline(windows, w)
        in_time, _ = committed_by_deadline(self.chain, windows, w)
        registered = {n.hotkey: n.registered_at for n in self.chain.metagraph().neurons}
        inputs = challenge_inputs(
            miner.rt.config, self.chain.block_hash(deadline), w, in_time, claims(in_time), registered
        )
        k = miner.rt.inner.segment_steps
        segments = segments_to_reveal(inputs, miner.hotkey, job.steps // k) if miner.hotkey in in_time else []
        return [s * k for s in run_starts(segments)], inputs if segments else None

    def rebuild_missing(self, job: RevealJob, steps: list[int]) -> list[int]:
        """`steps` with each start state the window did not keep rebuilt on disk (`miners.rebuild`) on
        a model of its own, freed after; one that cannot be is left out of the reveal, with the reason
        logged, and the rest go up."""
        on_disk = set(steps_on_disk(job.states))
        kept = []
        replica = None
        for step in steps:
            if step not in on_disk:
                try:
                    if replica is None:
                        replica = self.miner.rt.replica()
                    rebuild(self.miner.rt, replica, job.window, job.states, step)
                except torch.OutOfMemoryError as exc:
                    log.error(
                        "window %d: the challenged state at step %d cannot be revealed: no room to replay "
                        "it beside the training (%s); a miner without that room keeps every state "
                        "(--miner.kept-states 0)",
                        job.window,
                        step,
                        str(exc).splitlines()[0],
                    )
                    continue
                except (RebuildError, OSError, ValueError) as exc:
                    log.error(
                        "window %d: the challenged state at step %d cannot be revealed: %s",
                        job.window,
                        step,
                        exc,
                    )
                    continue
            kept.append(step)
        if replica is not None and self.miner.rt.device.type == "cuda":
            del replica
            torch.cuda.empty_cache()
        return kept

    def _pieces(self, job: RevealJob, steps: list[int], inputs: ChallengeInputs | None) -> list[Piece]:
        miner, w = self.miner, job.window
        pieces = []
        blob = job.blob_path.read_bytes() if job.blob_path.exists() else None
        blob = None if blob is None else miner.reveal_blob(w, blob, self.chain)
        if blob is not None:
            pieces.append(Piece(None, len(blob), data=blob))
        if inputs is not None:
            trajectory = self._trajectory(job, inputs)
            pieces.append(
                Piece(trajectory_key(miner.rt.run_id, w, miner.hotkey), len(trajectory), data=trajectory)
            )
        for step in steps:
            path = self._coded_state(job, step)
            pieces.append(
                Piece(state_key(miner.rt.run_id, w, miner.hotkey, step), path.stat().st_size, path=path)
            )
        return pieces

    def _coded_state(self, job: RevealJob, step: int) -> Path:
        """The boundary state at `step` coded against the window's base (the job's boundary 0), written
        once to the job's folder, so a restarted upload resumes the same bytes."""
        path = job.coded_state_path(step)
        if not path.exists():
            base = load_state(job.state_path(0)).params
            coded = encode_coded_state(load_state(job.state_path(step)), base)
            path.parent.mkdir(parents=True, exist_ok=True)
            tmp = path.with_suffix(".tmp")
            tmp.write_bytes(coded)
            tmp.replace(path)
        return path

    def _trajectory(self, job: RevealJob, inputs: ChallengeInputs) -> bytes:
        """The trajectory reveal (`distrai.protocol.trajectory`) from the job's last state and residuals. Their
        digests are computed once more here, in the upload thread, and only when challenged."""
        miner = self.miner
        last = load_state(job.state_path(job.steps))
        limit = miner.rt.config.limits.max_checkpoint_bytes
        residual_in = (
            decode_tensors(job.residual_in_path.read_bytes(), max_bytes=limit)[0]
            if job.residual_in_path.exists()
            else None
        )
        residual_out = load_state(job.residual_out_path).params if job.residual_out_path.exists() else None
        fraction = miner.rt.config.verification.trajectory_fraction
        reveal = build_trajectory(
            drawn_pieces(inputs, miner.hotkey, last.params, fraction),
            last.params,
            state_digests(last),
            residual_in,
            None if residual_in is None else residual_digests(residual_in),
            None if residual_out is None else residual_digests(residual_out),
        )
        return encode_trajectory(reveal)

    def _put_through_outages(self, w: int, piece: Piece) -> bool:
        """Put `piece`, trying again through a store outage until `give_up_block` says it is too late
        (each outage logged once when it starts and once when it ends); False when it never went in,
        or the uploader was stopped."""
        what = f"the store {self.miner.store.url} (window {w}'s reveal)"
        deadline = reveal_deadline(self.miner.windows, w)
        while True:
            try:
                self._put(piece)
            except (StoreError, OSError) as exc:
                block = self._block()
                if self.failing_since is None:
                    self.failing_since = block
                self.outages.failed(what, exc)
                began = self.failing_since
                if (
                    began is not None
                    and block is not None
                    and block >= give_up_block(self.miner.windows, w, began)
                ):
                    self.outages.gave_up(what, f"block {block}: past the reveal deadline, block {deadline}")
                    log.error("window %d: reveal failed at %s: %s", w, piece.key or "the update blob", exc)
                    return False
                if self.stop.wait(min(RETRY_PAUSE_S, self.chain.block_time() / 4)):
                    return False
                continue
            self.failing_since = None
            self.outages.answered(what)
            return True

    def failing_over(self, deadline: int) -> bool:
        """Whether the store has failed every try since before block `deadline` (so a job queued behind
        one that tried through the outage still tries, until `give_up_block`)."""
        return self.failing_since is not None and self.failing_since < deadline

    def _block(self) -> int | None:
        try:
            return self.chain.block()
        except ChainError as exc:
            log.warning("chain unavailable during the reveal: %s", exc)
            return None

    def _put(self, piece: Piece) -> None:
        store = self.miner.store
        if piece.key is None:
            assert piece.data is not None, "the update blob is built in memory"
            store.put_blob(piece.data)
        elif piece.data is not None:
            store.put(piece.key, piece.data)
        else:
            assert piece.path is not None, "a piece not in memory is a file"
            store.put_file(piece.key, piece.path)

    def _warn_if_late(self, w: int, deadline: int, remaining: int, sent: int, started: float) -> bool:
        """Say so, once, when the rate achieved so far cannot finish before the deadline (judged
        once a quarter of the reveal is sent, so one small object's latency does not decide it)."""
        if remaining <= 0 or sent < (sent + remaining) / 4:
            return False
        rate = sent / max(time.monotonic() - started, 1e-9)
        seconds_left = (deadline - self.chain.block()) * self.chain.block_time()
        if remaining / rate <= seconds_left:
            return False
        log.warning(
            "window %d: at %.2f MB/s the last %.1f MB of the reveal need %.0f s and %.0f s are left: "
            "this reveal will be late and count as hiding; the link is too slow for this run (distrai doctor)",
            w,
            rate / 1e6,
            remaining / 1e6,
            remaining / rate,
            seconds_left,
        )
        return True

    def _log(self, w: int, result: RevealResult, needed: float) -> None:
        if self.miner.metrics is None:
            return
        self.miner.metrics.log(
            w,
            RevealRecord(
                upload_seconds=result.seconds,
                uploaded_bytes=result.bytes_sent,
                revealed_bytes=result.bytes_sent - result.update_bytes,
                states_revealed=result.states,
                upload_rate=result.bytes_sent / result.seconds if result.seconds > 0 else None,
                upload_rate_needed=needed,
                reveal_late=result.late,
            ),
        )
