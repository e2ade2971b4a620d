"""Verification by recomputation of one challenged miner: its revealed states, the replay of its
challenged segments, and the published update against its committed trajectory.

Three verdicts, each added to the miner's `MinerVerdict`:
- `states`: every revealed boundary state is well formed, for the right step, and hashes to the
  hash the manifest committed before the commit deadline (a miner that faked its commitments, or
  did not reveal, fails here);
- `replay`: each challenged segment, run from its revealed start on the miner's assigned batches
  with the shared step function and the miner's micro-batch split, reaches the revealed end:
  bit for bit when the run's tolerance is 0 (CPU), else within the tolerance relative to the
  segment's own movement;
- `trajectory`: the run's codec, applied to G_w − θ_H (the committed last state) and the revealed
  incoming residual, yields exactly the published blob and the committed outgoing residual, so
  the compressed update is the honest encoding of the training that was replayed.
"""

from __future__ import annotations

import dataclasses
import time

import torch

from distrai.globalmodel import GlobalModel
from distrai.layout import residual_key, state_key
from distrai.runtime import Runtime
from distrai.store import StoreError
from distrai.store.base import IntegrityError, NotFound, TooLarge
from distrai.train.assignment import batch_indices
from distrai.train.inner import float_params, pseudo_gradient
from distrai.train.replay import replay_distance, replay_segment
from distrai.train.state import TrainState, check_state, decode_state, state_hash
from distrai.update import is_encoding_of, residual_hash
from distrai.wire import WireError, decode_tensors
from validators.checks import PASS, MinerVerdict
from validators.inventory import Reader


class Refused(Exception):
    """A challenged miner's revealed data failed a check; the message says which and why."""

    def __init__(self, check: str, why: str, fraud: bool = True):
        super().__init__(why)
        self.check = check
        self.why = why
        self.fraud = fraud


def not_read(check: str, what: str, exc: StoreError) -> Refused:
    """A reveal that could not be read: absent at the deadline (hiding, fraud), or out of reach
    now because the store failed (the validator's trouble as much as the miner's: not fraud)."""
    if isinstance(exc, NotFound | IntegrityError | TooLarge):
        return Refused(check, f"{what} was not revealed: {exc}")
    return Refused(check, f"{what} could not be read from the miner's store: {exc}", fraud=False)


class Revealed:
    """The boundary states a miner revealed, fetched once each and checked against the manifest."""

    def __init__(self, runtime: Runtime, window: int, verdict: MinerVerdict, store: Reader):
        self.rt = runtime
        self.window = window
        self.verdict = verdict
        self.store = store
        self.hashes = {b.step: b.state_hash for b in verdict.manifest.boundaries}
        self.states: dict[int, TrainState] = {}
        self.bytes = 0
        self.replayed_steps = 0

    def state(self, step: int) -> TrainState:
        if step in self.states:
            return self.states[step]
        key = state_key(self.rt.run_id, self.window, self.verdict.hotkey, step)
        try:
            data = self.store.get(key, self.rt.config.limits.max_checkpoint_bytes)
        except StoreError as exc:
            raise not_read("states", f"challenged boundary {step}", exc) from exc
        self.bytes += len(data)
        try:
            state = decode_state(data)
            check_state(self.rt.model, state)
        except (ValueError, WireError) as exc:
            raise Refused("states", f"revealed boundary {step} is malformed: {exc}") from exc
        if state.step != step:
            raise Refused("states", f"revealed boundary {step} says it is step {state.step}")
        if state_hash(state) != self.hashes[step]:
            raise Refused("states", f"revealed boundary {step} does not hash to the committed state")
        self.states[step] = state
        return state

    def residual(self) -> dict[str, torch.Tensor] | None:
        expected = self.verdict.manifest.residual_in_hash
        if expected is None:
            return None
        key = residual_key(self.rt.run_id, self.window, self.verdict.hotkey)
        try:
            data = self.store.get(key, self.rt.config.limits.max_checkpoint_bytes)
        except StoreError as exc:
            raise not_read("trajectory", "the incoming codec residual", exc) from exc
        try:
            self.bytes += len(data)
            residual, _ = decode_tensors(data, max_bytes=self.rt.config.limits.max_checkpoint_bytes)
        except WireError as exc:
            raise Refused(
                "trajectory", f"the incoming codec residual was not revealed intact: {exc}"
            ) from exc
        if residual_hash(residual) != expected:
            raise Refused("trajectory", "the revealed codec residual does not hash to residual_in_hash")
        return residual


def verify_challenge(
    runtime: Runtime,
    model: GlobalModel,
    window: int,
    verdict: MinerVerdict,
    store: Reader,
    segments: list[int],
    miners: list[str],
) -> None:
    """Check the challenged `segments` of a miner whose cheap checks passed; adds the `states`,
    `replay` and `trajectory` verdicts (fraud on failure) and the numbers measured."""
    started = time.monotonic()
    revealed = Revealed(runtime, window, verdict, store)
    try:
        distance = max(replay_one(runtime, model, window, verdict, revealed, s, miners) for s in segments)
        verdict.verdicts["states"] = PASS
        verdict.verdicts["replay"] = PASS
        check_trajectory(runtime, model, window, verdict, revealed)
        verdict.verdicts["trajectory"] = PASS
        verdict.numbers["replay_distance"] = distance
    except Refused as exc:
        verdict.fail(exc.check, exc.why, fraud=exc.fraud)
    finally:
        runtime.load_params(model.params)
        verdict.numbers["replay_seconds"] = time.monotonic() - started
        verdict.numbers["replay_steps"] = float(revealed.replayed_steps)
        verdict.numbers["revealed_bytes"] = float(revealed.bytes)


def replay_one(
    runtime: Runtime,
    model: GlobalModel,
    window: int,
    verdict: MinerVerdict,
    revealed: Revealed,
    segment: int,
    miners: list[str],
) -> float:
    """Replay one segment, anchored to this validator's own G_w; returns its distance (0.0 for a
    bit-exact match)."""
    k = runtime.inner.segment_steps
    first = segment * k
    start, end = revealed.state(first), revealed.state(first + k)
    cfg = runtime.config.train
    batches = [
        runtime.data.batch(
            batch_indices(
                runtime.run_id, window, verdict.hotkey, t, cfg.batch_size, runtime.data.n_train, miners
            )
        )
        for t in range(first, first + k)
    ]
    inner = dataclasses.replace(
        runtime.inner,
        step=dataclasses.replace(runtime.inner.step, micro_batches=verdict.manifest.micro_batches),
    )
    replayed = replay_segment(runtime.model, start, batches, runtime.loss_fn, inner, base=model.params).end
    revealed.replayed_steps += k
    tolerance = runtime.config.verification.replay_tolerance
    if tolerance == 0.0:
        if state_hash(replayed) != state_hash(end):
            raise Refused(
                "replay", f"segment {segment} (steps {first}–{first + k}) replayed to another state"
            )
        return 0.0
    distance = replay_distance(start, end, replayed)
    if not distance <= tolerance:
        raise Refused(
            "replay",
            f"segment {segment} (steps {first}–{first + k}) replayed {distance:.3g} away, tolerance {tolerance:.3g}",
        )
    return distance


def check_trajectory(
    runtime: Runtime, model: GlobalModel, window: int, verdict: MinerVerdict, revealed: Revealed
) -> None:
    """The published blob must be the codec's encoding of G_w − θ_H with the revealed residual."""
    manifest = verdict.manifest
    last = revealed.state(manifest.boundaries[-1].step)
    residual_in = revealed.residual()
    runtime.load_params(model.params)
    encoded = runtime.codec.encode(pseudo_gradient(float_params(runtime.model), last.params), residual_in)
    if not is_encoding_of(verdict.blob, encoded.payload, encoded.metadata, verdict.hotkey, window):
        raise Refused("trajectory", "the published update is not the encoding of the committed trajectory")
    residual_out = None if encoded.residual is None else residual_hash(encoded.residual)
    if residual_out != manifest.residual_out_hash:
        raise Refused("trajectory", "residual_out_hash is not the residual the encoding leaves")
