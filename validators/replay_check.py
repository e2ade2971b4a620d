"""Verification by recomputation of one challenged miner: its revealed states, the replay of its
challenged segments, and the published update against its committed trajectory.

What a challenged miner reveals (`miners/uploader.py`) is lean: the start state of its run of
challenged segments (none when the run starts at segment 0, whose start is the window's base with
a fresh optimizer, which the validator builds itself) and its trajectory reveal
(`distrai.protocol.trajectory`). The segments are replayed in order, each from the end the one before it
replayed to. Three verdicts, each added to the miner's `MinerVerdict`:
- `states`: every revealed start state is well formed, for the right step, and hashes to the
  hash the manifest committed before the commit deadline; the trajectory reveal's digest lists
  hash to the committed last state and residuals, and its drawn pieces to their digests (a miner
  that faked its commitments, or did not reveal, fails here);
- `replay`: each challenged segment, run from its start on the miner's assigned batches with the
  shared step function and the miner's micro-batch split, reaches the committed end and the
  committed per-step losses: bit for bit when the validator holds the miner's replay class or the
  run's tolerance is 0 (CPU), so the end is checked against its committed hash and never
  downloaded; else each loss within the loss tolerance and the end's committed sketch within the
  replay tolerance relative to the segment's own movement, both from the run config's table for the
  two classes (`distrai.train.replay_class`);
- `trajectory`: on every drawn piece, the run's codec applied to G_w − θ_H and the incoming residual
  yields the published update and the committed outgoing residual.
"""

from __future__ import annotations

import dataclasses
import hashlib
import math
import time
from collections.abc import Mapping

import torch

from distrai.protocol.globalmodel import GlobalModel
from distrai.protocol.layout import state_key, trajectory_key
from distrai.protocol.runtime import Runtime
from distrai.protocol.trajectory import TrajectoryReveal, decode_trajectory
from distrai.protocol.windows import reveal_seed, run_starts
from distrai.store import StoreError
from distrai.train.coded_state import decode_coded_state
from distrai.train.hashing import PIECE_ELEMENTS, PieceRef
from distrai.train.inner import float_params, window_start_state
from distrai.train.replay import Replay, replay_segment
from distrai.train.replay_class import Tolerance, replay_class_of, tolerance_for
from distrai.train.sketch import sketch
from distrai.train.step import StepConfig
from distrai.train.train_state import TrainState, check_state, state_hash
from distrai.wire import WireError
from distrai.wire.verdicts import PASS, Check, Number
from distrai.wire.window_documents import UpdateManifest
from validators.checks import MinerVerdict
from validators.inventory import Reader
from validators.refused import Refused, not_read
from validators.trajectory_check import check_encoding, check_last_pieces, check_roots
from validators.window import WindowBasis


class Revealed:
    """What a challenged miner revealed, fetched once each and checked against its manifest."""

    def __init__(
        self, runtime: Runtime, model: GlobalModel, window: int, verdict: MinerVerdict, store: Reader
    ):
        self.rt = runtime
        self.model = model
        self.window = window
        self.verdict = verdict
        self.store = store
        assert verdict.manifest is not None, "a challenged miner's manifest passed the cheap checks"
        self.hashes = {b.step: b.state_hash for b in verdict.manifest.boundaries}
        self.states: dict[int, TrainState] = {}
        self.bytes = 0
        self.replayed_steps = 0

    def state(self, step: int) -> TrainState:
        if step not in self.states:
            self.states[step] = self._base_state() if step == 0 else self._fetched_state(step)
        return self.states[step]

    def _base_state(self) -> TrainState:
        self.rt.load_params(self.model.params)
        state = window_start_state(self.rt.model)
        if state_hash(state) != self.hashes[0]:
            raise Refused(Check.STATES, "boundary 0 is not the window's base with a fresh optimizer")
        return state

    def _fetched_state(self, step: int) -> TrainState:
        key = state_key(self.rt.run_id, self.window, self.verdict.hotkey, step)
        data = self._get(key, Check.STATES, f"challenged boundary {step}")
        try:
            state = decode_coded_state(data, self.model.params, self.rt.config.limits.max_checkpoint_bytes)
            check_state(self.rt.model, state)
        except (ValueError, WireError) as exc:
            raise Refused(Check.STATES, f"revealed boundary {step} is malformed: {exc}") from exc
        if state.step != step:
            raise Refused(Check.STATES, f"revealed boundary {step} says it is step {state.step}")
        if state_hash(state) != self.hashes[step]:
            raise Refused(Check.STATES, f"revealed boundary {step} does not hash to the committed state")
        return state

    def trajectory(self, sample: list[PieceRef]) -> TrajectoryReveal:
        key = trajectory_key(self.rt.run_id, self.window, self.verdict.hotkey)
        data = self._get(key, Check.STATES, "the trajectory reveal")
        try:
            reveal = decode_trajectory(data, max_bytes=self.rt.config.limits.max_checkpoint_bytes)
        except (ValueError, WireError) as exc:
            raise Refused(Check.STATES, f"the trajectory reveal is malformed: {exc}") from exc
        assert self.verdict.manifest is not None, "a challenged miner's manifest passed the cheap checks"
        check_roots(reveal, self.verdict.manifest)
        check_last_pieces(reveal, sample, dict(self.rt.model.named_parameters()), PIECE_ELEMENTS)
        return reveal

    def _get(self, key: str, check: Check, what: str) -> bytes:
        try:
            data = self.store.get(key, self.rt.config.limits.max_checkpoint_bytes)
        except StoreError as exc:
            raise not_read(check, what, exc) from exc
        self.bytes += len(data)
        return data


def verify_challenge(
    basis: WindowBasis,
    verdict: MinerVerdict,
    store: Reader,
    segments: list[int],
    sample: list[PieceRef],
    receipt_for: str | None = None,
) -> None:
    """Check the challenged `segments` and the drawn trajectory `sample` of a miner whose cheap
    checks passed (`basis.segments`, `basis.sample`: the window's draw); adds the `states`, `replay`
    and `trajectory` verdicts (fraud on failure) and the numbers measured, and, for the validator
    `receipt_for`, the receipt of each segment replayed (`verdict.receipts`, `validators.receipts`)."""
    runtime, model = basis.runtime, basis.base
    started = time.monotonic()
    revealed = Revealed(runtime, model, basis.number, verdict, store)
    k = runtime.inner.segment_steps
    try:
        for segment in run_starts(segments):
            revealed.state(segment * k)
        reveal = revealed.trajectory(sample)
        verdict.verdicts[Check.STATES] = PASS
        distance = max(replay_one(basis, verdict, revealed, s, receipt_for) for s in sorted(segments))
        verdict.verdicts[Check.REPLAY] = PASS
        runtime.load_params(model.params)  # G_w in the model's dtype, as the miner's pseudo-gradient saw it
        base = float_params(runtime.model)
        assert verdict.update is not None, "a challenged miner's update passed the cheap checks"
        check_encoding(runtime.codec, reveal, sample, base, verdict.update, PIECE_ELEMENTS)
        verdict.verdicts[Check.TRAJECTORY] = PASS
        verdict.numbers[Number.REPLAY_DISTANCE] = distance
    except Refused as exc:
        if exc.unread:
            verdict.unreadable(exc.check, exc.why)
        else:
            verdict.fail(exc.check, exc.why, fraud=exc.fraud)
    finally:
        runtime.load_params(model.params)
        verdict.numbers[Number.REPLAY_SECONDS] = time.monotonic() - started
        verdict.numbers[Number.REPLAY_STEPS] = float(revealed.replayed_steps)
        verdict.numbers[Number.REVEALED_BYTES] = float(revealed.bytes)


def replay_one(
    basis: WindowBasis,
    verdict: MinerVerdict,
    revealed: Revealed,
    segment: int,
    receipt_for: str | None = None,
) -> float:
    """Replay one segment, anchored to this validator's own G_w; returns its distance (0.0 for a
    bit-exact match). With `receipt_for`, the segment's receipt for that validator goes to
    `verdict.receipts` first, whatever the comparison finds."""
    runtime = basis.runtime
    manifest = verdict.manifest
    assert manifest is not None, "a challenged miner's manifest passed the cheap checks"
    k = runtime.inner.segment_steps
    first = segment * k
    start = revealed.state(first)
    replayed = replay_at(basis, verdict, revealed, segment)
    if receipt_for is not None:
        verdict.receipts[segment] = receipt_sketch(
            basis, receipt_for, verdict.hotkey, segment, replayed.end.params
        )
    where = f"segment {segment} (steps {first}–{first + k})"
    committed_losses = manifest.losses[first : first + k]
    tolerance = replay_tolerance(runtime, verdict)
    verdict.numbers[Number.REPLAY_TOLERANCE] = tolerance.replay
    if tolerance.exact:
        if state_hash(replayed.end) != revealed.hashes[first + k]:
            raise Refused(Check.REPLAY, f"{where} replayed to another state than the committed one")
        if replayed.losses != committed_losses:
            raise Refused(Check.REPLAY, f"{where} replayed to other per-step losses than the committed ones")
        return 0.0
    distance = sketch_distance(runtime, start, replayed.end, manifest.boundaries[first // k + 1].sketch)
    if not distance <= tolerance.replay:
        raise Refused(
            Check.REPLAY,
            f"{where} replayed {distance:.3g} away, tolerance {tolerance.replay:.3g} ({tolerance.why})",
        )
    for step, (mine, theirs) in enumerate(zip(replayed.losses, committed_losses, strict=True), start=first):
        if not abs(mine - theirs) <= tolerance.loss * max(abs(theirs), 1e-12):
            raise Refused(
                Check.REPLAY,
                f"{where}: step {step}'s loss replayed to {mine:.6g}, the miner committed {theirs:.6g} "
                f"(tolerance {tolerance.loss:.3g}; {tolerance.why})",
            )
    return distance


def replay_at(basis: WindowBasis, verdict: MinerVerdict, revealed: Revealed, segment: int) -> Replay:
    """Replay one segment of the miner's window from its start (revealed, the base, or the end the
    segment before it replayed to here), on its assigned batches with its split of the batch."""
    runtime, model, window, miners = basis.runtime, basis.base, basis.number, list(basis.miners)
    manifest = verdict.manifest
    assert manifest is not None, "a challenged miner's manifest passed the cheap checks"
    k = runtime.inner.segment_steps
    first = segment * k
    start = revealed.state(first)
    batches = [runtime.batch(window, verdict.hotkey, miners, t) for t in range(first, first + k)]
    inner = dataclasses.replace(runtime.inner, step=miner_split(runtime, manifest))
    replayed = replay_segment(runtime.model, start, batches, runtime.loss_fn, inner, base=model.params)
    revealed.replayed_steps += k
    revealed.states.setdefault(first + k, replayed.end)  # the next segment of the run starts here
    return replayed


def receipt_seed(basis: WindowBasis, validator: str, miner: str, segment: int) -> str:
    """The key of `validator`'s receipt for segment `segment` of `miner`'s window: drawn from the
    window's seed, which nobody knew while training, and distinct per validator, miner and segment,
    so no receipt can be copied from another's or from the miner's committed sketches."""
    seed = reveal_seed(basis.inputs.block_hash, basis.runtime.run_id, basis.number)
    parts = [b"distrai.receipt", seed, validator.encode(), miner.encode(), str(segment).encode()]
    return hashlib.sha256(b"|".join(parts)).hexdigest()


def receipt_sketch(
    basis: WindowBasis, validator: str, miner: str, segment: int, params: Mapping[str, torch.Tensor]
) -> list[float]:
    """The sketch of `params` under the key of `validator`'s receipt for the segment."""
    key = receipt_seed(basis, validator, miner, segment)
    return sketch(params, key, basis.runtime.inner.sketch_size).tolist()


def replayed_ends(
    basis: WindowBasis, verdict: MinerVerdict, store: Reader, segments: list[int]
) -> dict[int, tuple[TrainState, TrainState]]:
    """Segment → (its start, where it replays to here), for the `segments` of a miner whose
    manifest passed the cheap checks, read from `store`; `Refused` when a revealed start is missing
    or fails its commitment."""
    revealed = Revealed(basis.runtime, basis.base, basis.number, verdict, store)
    k = basis.runtime.inner.segment_steps
    try:
        ends = {}
        for segment in sorted(segments):
            start = revealed.state(segment * k)
            ends[segment] = (start, replay_at(basis, verdict, revealed, segment).end)
        return ends
    finally:
        basis.runtime.load_params(basis.base.params)


def replay_tolerance(runtime: Runtime, verdict: MinerVerdict) -> Tolerance:
    """How this validator compares its replay of the miner's segments: bit for bit in the miner's
    replay class, else within the run config's tolerance for the two (`distrai.train.replay_class`)."""
    verification = runtime.config.verification
    manifest = verdict.manifest
    assert manifest is not None, "a challenged miner's manifest passed the cheap checks"
    return tolerance_for(
        manifest.replay_class,
        replay_class_of(
            runtime.model,
            runtime.device,
            miner_split(runtime, manifest),
            runtime.inner.optimizer.implementation,
            runtime.config.train.compile,
        ),
        verification.tolerances,
        Tolerance(verification.replay_tolerance, verification.loss_tolerance, "the run's default tolerance"),
    )


def miner_split(runtime: Runtime, manifest: UpdateManifest) -> StepConfig:
    """The run's step settings with the miner's split of the batch (ranks, micro-batches and
    whether its ranks sharded the model)."""
    return dataclasses.replace(
        runtime.inner.step,
        micro_batches=manifest.micro_batches,
        ranks=manifest.ranks,
        sharded=manifest.sharded,
    )


def sketch_distance(
    runtime: Runtime, start: TrainState, replayed: TrainState, committed: list[float]
) -> float:
    """‖S·θ_replayed − S·θ_claimed‖ / ‖S·θ_claimed − S·θ_start‖ from the committed sketch of the
    segment's end (S linear, E‖S·x‖² = ‖x‖², so about the distance `replay_distance` measures on full states)."""
    seed, size = runtime.inner.sketch_seed, runtime.inner.sketch_size
    claimed = torch.tensor(committed, dtype=torch.float64)
    if claimed.numel() != size:
        raise Refused(
            Check.REPLAY, f"the committed sketch has {claimed.numel()} numbers, the run's sketch {size}"
        )
    gap = float((sketch(replayed.params, seed, size) - claimed).norm())
    movement = float((claimed - sketch(start.params, seed, size)).norm())
    if gap == 0.0:
        return 0.0
    return math.inf if movement == 0.0 else gap / movement
