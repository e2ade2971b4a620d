"""The miner's loop, window after window: sync → train → commit → reveal.

1. Sync: reach G_w from the validators' published aggregates (`distrai.sync`).
2. Train: H inner steps on the miner's assigned data, saving the state at every segment boundary.
3. Commit (before the commit deadline): encode the pseudo-gradient with the run's codec (error
   feedback carried across windows), sign the manifest, put it in the miner's store, and anchor
   its hash on chain in the miner's announcement. Nothing downloadable yet names the update.
4. Reveal (after the commit deadline, before the reveal deadline): the update blob, and, if any
   validator challenges this miner (seeded by the hash of the block at the commit deadline,
   unknown while training), the two boundary states of every challenged segment, the last
   boundary state and the incoming codec residual, so the validator can replay the segments and
   re-encode the update from the trajectory.

What the miner does at each of these points is its `Behaviour` (`behaviour.py`): honest by
default; `--miner.adversary TYPE` swaps in one of the cheats a validator must catch.
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

from distrai.announce import Announcement, committed_updates
from distrai.chain.base import Chain, ChainError, WalletLike
from distrai.layout import manifest_key, residual_key, state_key
from distrai.metrics import Metrics
from distrai.participant import Participant
from distrai.run import challenge_inputs
from distrai.runtime import Runtime
from distrai.store import Store, StoreError
from distrai.sync import StoreCache
from distrai.train.assignment import batch_indices
from distrai.train.inner import BoundaryState, inner_loop, window_start_state
from distrai.train.sketch import sketch
from distrai.train.state import TrainState, load_state, save_state, state_hash
from distrai.update import residual_hash
from distrai.windows import (
    Phase,
    commit_deadline,
    committed_in_time,
    phase,
    reveal_deadline,
    segments_to_reveal,
    window_of,
    window_start,
)
from distrai.wire import encode_tensors
from miners.behaviour import Behaviour, honest

log = logging.getLogger("distrai.miner")


@dataclass(frozen=True)
class MinerOptions:
    work_dir: Path
    behaviour: Behaviour = field(default_factory=honest)
    """Honest, or one of the adversaries of `behaviour.ADVERSARIES` (for demonstrations and tests)."""


@dataclass(frozen=True)
class Trained:
    pseudo_gradient: dict[str, torch.Tensor]
    losses: list[float]
    boundaries: list[tuple[int, str, list[float]]]
    tokens: int
    steps: int
    """inner steps actually trained (fewer than the losses claim, for a lazy miner)"""


class Miner(Participant):
    def __init__(
        self,
        runtime: Runtime,
        chain: Chain,
        wallet: WalletLike,
        store: Store,
        store_url: str,
        options: MinerOptions,
        metrics: Metrics | None = None,
        stores: StoreCache | None = None,
    ):
        super().__init__(runtime, chain, wallet, store, store_url, metrics, stores)
        self.options = options
        self.behaviour = options.behaviour
        self.residual: dict[str, torch.Tensor] | None = self._load_residual()
        self.last_window = -1

    # -- the loop -------------------------------------------------------------------------------

    def run(self, stop: threading.Event, max_windows: int | None = None) -> None:
        done = 0
        while not stop.is_set() and (max_windows is None or done < max_windows):
            block = self.chain.block()
            w = window_of(self.windows, block)
            if w <= self.last_window or phase(self.windows, block) is not Phase.TRAIN:
                self.sleep_until(window_start(self.windows, max(w, self.last_window) + 1), stop)
                continue
            self.run_window(w, stop)
            done += 1

    # -- one window -----------------------------------------------------------------------------

    def run_window(self, w: int, stop: threading.Event) -> None:
        started = time.monotonic()
        miners = sorted(self.chain.metagraph().hotkeys)
        self.model = self.syncer.catch_up(self.model, w)
        self.rt.load_params(self.model.params)
        states_dir = self.options.work_dir / "states" / f"w{w}"
        trained = self.behaviour.train(self, w, miners, states_dir)
        train_seconds = time.monotonic() - started

        encoded = self.rt.codec.encode(self.behaviour.update(self, trained.pseudo_gradient), self.residual)
        blob = self.behaviour.blob(self, w, encoded)
        body = self.behaviour.manifest(
            self, w, self.manifest(w, trained, blob, encoded.metadata, encoded.residual)
        )
        manifest = self.behaviour.sign(self, w, body)
        if not self.behaviour.commits(self) or not self.commit(w, manifest):
            shutil.rmtree(states_dir, ignore_errors=True)
            return
        residual_in, self.residual = self.residual, encoded.residual
        self._save_residual()
        revealed, revealed_bytes = self.reveal(
            w, self.behaviour.reveal_blob(self, w, blob), residual_in, states_dir, stop
        )
        shutil.rmtree(states_dir, ignore_errors=True)
        self.last_window = w
        log.info(
            "window %d: trained %d steps (loss %.3f → %.3f) in %.1fs; update %d bytes; revealed %d states",
            w,
            len(trained.losses),
            trained.losses[0],
            trained.losses[-1],
            train_seconds,
            len(blob),
            revealed,
        )
        if self.metrics:
            self.metrics.log(
                w,
                {
                    "loss_first": trained.losses[0],
                    "loss_last": trained.losses[-1],
                    "tokens_per_s": trained.tokens / max(train_seconds, 1e-9),
                    "bytes_sent": len(blob) + len(manifest) + revealed_bytes,
                    "bytes_received": self.syncer.bytes_received,
                    "states_revealed": revealed,
                    "revealed_bytes": revealed_bytes,
                    "emission": self.own_emission(),
                    "train_seconds": train_seconds,
                    "steps_trained": trained.steps,
                    "aggregates_refused": len(self.syncer.take_refusals()),
                    "behaviour": self.behaviour.name,
                },
            )

    def train(
        self,
        w: int,
        miners: list[str],
        states_dir: Path,
        data_of: str | None = None,
        steps: int | None = None,
    ) -> Trained:
        """H inner steps on this miner's assigned batches, keeping every boundary state in
        `states_dir` (an adversary may pass another hotkey's data, or fewer steps)."""
        cfg, data = self.rt.config, self.rt.data
        states_dir.mkdir(parents=True, exist_ok=True)
        owner = data_of or self.hotkey

        def batch_for_step(t: int) -> torch.Tensor:
            indices = batch_indices(self.rt.run_id, w, owner, t, cfg.train.batch_size, data.n_train, miners)
            return data.batch(indices)

        def keep(boundary: BoundaryState) -> None:
            save_state(boundary.state, states_dir / f"{boundary.step:06d}.safetensors")

        inner = self.rt.inner if steps is None else dataclasses.replace(self.rt.inner, inner_steps=steps)
        result = inner_loop(self.rt.model, batch_for_step, self.rt.loss_fn, inner, on_boundary=keep)
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
        zero = {name: torch.zeros_like(p) for name, p in self.model.params.items()}
        return Trained(zero, [0.0] * self.rt.inner.inner_steps, [(s, digest, numbers) for s in steps], 0, 0)

    def manifest(
        self,
        w: int,
        trained: Trained,
        blob: bytes,
        codec_metadata: dict[str, str],
        residual_out: dict[str, torch.Tensor] | None,
    ) -> dict:
        return {
            "kind": "update",
            "run_id": self.rt.run_id,
            "window": w,
            "hotkey": self.hotkey,
            "base_hash": self.model.hash,
            "update": {
                "sha256": hashlib.sha256(blob).hexdigest(),
                "size": len(blob),
                "codec": self.rt.config.codec.name,
                "codec_metadata": dict(codec_metadata),
            },
            "micro_batches": self.rt.inner.step.micro_batches,
            "losses": trained.losses,
            "boundaries": [{"step": s, "state_hash": h, "sketch": k} for s, h, k in trained.boundaries],
            "residual_in_hash": None if self.residual is None else residual_hash(self.residual),
            "residual_out_hash": None if residual_out is None else residual_hash(residual_out),
        }

    def commit(self, w: int, manifest: bytes) -> bool:
        deadline = commit_deadline(self.windows, w)
        if self.chain.block() >= deadline:
            log.warning(
                "window %d: training ended after the commit deadline (block %d); update dropped", w, deadline
            )
            return False
        try:
            self.store.put(manifest_key(self.rt.run_id, w, self.hotkey), manifest)
            announcement = Announcement(self.store_url, w, hashlib.sha256(manifest).hexdigest())
            self.chain.commit(self.wallet, announcement.encode())
        except (StoreError, ChainError) as exc:
            log.error("window %d: commit failed: %s", w, exc)
            return False
        committed = self.chain.commitment(self.hotkey)
        if committed is None or not committed_in_time(self.windows, w, committed.block):
            log.warning("window %d: the commitment landed after the deadline", w)
            return False
        return True

    def reveal(
        self,
        w: int,
        blob: bytes | None,
        residual_in: dict[str, torch.Tensor] | None,
        states_dir: Path,
        stop: threading.Event,
    ) -> tuple[int, int]:
        """Upload the update and, when challenged, every challenged segment's two boundary states,
        the last boundary state and the incoming residual; returns the number of states and the
        bytes of everything revealed beyond the update."""
        deadline = commit_deadline(self.windows, w)
        self.sleep_until(deadline + 1, stop)
        if stop.is_set():
            log.info("window %d: stopping before the reveal", w)
            return 0, 0
        mg = self.chain.metagraph()
        counted = self.chain.commitments(block=deadline - 1)
        in_time = committed_updates(counted, w, lambda b: committed_in_time(self.windows, w, b))
        inputs = challenge_inputs(self.rt.config, self.chain.block_hash(deadline), w, in_time)
        validators = [n.hotkey for n in mg.neurons if n.validator_permit]
        segments = segments_to_reveal(inputs, self.hotkey, validators) if self.hotkey in in_time else []
        k, last = self.rt.inner.segment_steps, self.rt.inner.inner_steps
        steps = sorted(
            {s * k for s in segments} | {(s + 1) * k for s in segments} | ({last} if segments else set())
        )
        sent = 0
        try:
            if blob is not None:
                self.store.put_blob(blob)
            for step in steps:
                data = (states_dir / f"{step:06d}.safetensors").read_bytes()
                self.store.put(state_key(self.rt.run_id, w, self.hotkey, step), data)
                sent += len(data)
            if segments and residual_in is not None:
                data = encode_tensors(residual_in)
                self.store.put(residual_key(self.rt.run_id, w, self.hotkey), data)
                sent += len(data)
        except (StoreError, OSError) as exc:
            log.error("window %d: reveal failed: %s", w, exc)
            return 0, sent
        if self.chain.block() >= reveal_deadline(self.windows, w):
            log.warning("window %d: the reveal finished after the reveal deadline", w)
        return len(steps), sent

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
