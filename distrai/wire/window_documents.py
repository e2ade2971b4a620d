"""The documents of a window, as the bodies of signed envelopes (see `signed.py`).

- `UpdateManifest`: what a miner commits before the commit deadline. It names everything a
  validator later checks: the base model, the update blob (hash, size, codec), the micro-batch
  split and replay class, per-step losses, and the hash and sketch of the training state at every segment
  boundary, plus the hashes of the codec's error-feedback residual before and after.
- `AggregateManifest`: what a validator publishes as its aggregate of a window: each accepted
  update with the manifest its miner signed, their weights, the hash of the validator's signed
  report they follow from, and the hashes of the next global model and of the outer momentum.
- `WindowReport`: a validator's signed account of a window: every miner's verdicts, numbers,
  score and reason, and the aggregates of other validators it refused to follow.

Every field is validated; a body that does not fit is refused with `MISSING_FIELD` or
`BAD_FIELD`, naming the field.
"""

from __future__ import annotations

import math
from typing import Annotated, Any, Literal, get_args

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from distrai.wire.errors import Reason, WireError
from distrai.wire.verdicts import REPLAY_CHECKS, Number

Sha256 = Annotated[str, Field(pattern=r"^[0-9a-f]{64}$")]


class _Body(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)

    def body(self) -> dict[str, Any]:
        """The document as the body of a signed envelope (`signed.sign_document`): plain JSON values,
        every field written, defaults included, so a reader's `parse_body` gives back an equal model."""
        return self.model_dump(mode="json")


class Boundary(_Body):
    step: int = Field(ge=0)
    state_hash: Sha256
    sketch: list[float] = Field(max_length=1024)

    @field_validator("sketch")
    @classmethod
    def _finite(cls, values: list[float]) -> list[float]:
        if not all(math.isfinite(v) for v in values):
            raise ValueError("sketch values must be finite")
        return values


class UpdateBlob(_Body):
    sha256: Sha256
    size: int = Field(ge=1)
    codec: str = Field(min_length=1, max_length=32)
    codec_metadata: dict[str, str]


class ReplayClass(_Body):
    """What decides whether a replay of the miner's steps can be bit-exact
    (`distrai.train.replay_class`)."""

    device: str = Field(min_length=1, max_length=128)
    torch: str = Field(min_length=1, max_length=64)
    cuda: str | None = Field(default=None, max_length=32)
    dtype: str = Field(min_length=1, max_length=32)
    attention: str = Field(min_length=1, max_length=64)
    micro_batches: int = Field(ge=1)
    ranks: int = Field(default=1, ge=1, le=4096)
    sharded: bool = False
    autocast: str | None = Field(default=None, max_length=32)
    adamw: str = Field(default="single", min_length=1, max_length=32)
    compiled: bool = False
    kernels: str = Field(default="aten", min_length=1, max_length=32)
    """the embedding's and the loss's backward: PyTorch's, or without atomics (`distrai.train.kernels`)"""


class UpdateManifest(_Body):
    kind: Literal["update"] = "update"
    run_id: Sha256
    window: int = Field(ge=0)
    hotkey: str = Field(min_length=40, max_length=64)
    base_hash: Sha256
    update: UpdateBlob
    micro_batches: int = Field(ge=1)
    """gradient accumulation: micro-batches per rank"""
    ranks: int = Field(default=1, ge=1, le=4096)
    """data-parallel processes the miner split each step's batch over"""
    checkpointing: bool = False
    """whether the miner recomputed activations in the backward to fit its memory (same bits either way)"""
    base_on_host: bool = False
    """whether the miner kept the window's base in host memory to fit its memory (same bits either way)"""
    sharded: bool = False
    """whether the miner's ranks sharded the model, gradients and optimizer state (FSDP2); the replay
    follows it (the clip's norm is put together from shards)"""
    losses: list[float]
    boundaries: list[Boundary]
    residual_in_hash: Sha256 | None
    residual_out_hash: Sha256 | None
    replay_class: ReplayClass | None = None
    """the miner's replay class; None: a validator compares at the run's default tolerance"""

    @model_validator(mode="after")
    def _one_split(self) -> UpdateManifest:
        if self.replay_class is not None and self.replay_class.micro_batches != self.micro_batches:
            raise ValueError(
                f"replay_class.micro_batches {self.replay_class.micro_batches} is not micro_batches {self.micro_batches}"
            )
        if self.replay_class is not None and self.replay_class.ranks != self.ranks:
            raise ValueError(f"replay_class.ranks {self.replay_class.ranks} is not ranks {self.ranks}")
        if self.replay_class is not None and self.replay_class.sharded != self.sharded:
            raise ValueError(
                f"replay_class.sharded {self.replay_class.sharded} is not sharded {self.sharded}"
            )
        if self.sharded and self.ranks < 2:
            raise ValueError(f"a sharded update needs at least 2 ranks, got {self.ranks}")
        return self

    @field_validator("losses")
    @classmethod
    def _finite_losses(cls, values: list[float]) -> list[float]:
        if not all(math.isfinite(v) for v in values):
            raise ValueError("losses must be finite")
        return values

    @model_validator(mode="after")
    def _boundaries_in_order(self) -> UpdateManifest:
        steps = [b.step for b in self.boundaries]
        if len(steps) < 2 or steps[0] != 0 or steps != sorted(set(steps)):
            raise ValueError("boundaries must start at step 0 and increase")
        if steps[-1] != len(self.losses):
            raise ValueError(f"the last boundary is step {steps[-1]} but {len(self.losses)} losses are given")
        return self

    @property
    def steps(self) -> int:
        """h: the inner steps the manifest covers (its last boundary)."""
        return self.boundaries[-1].step

    @property
    def n_segments(self) -> int:
        return len(self.boundaries) - 1

    def shape_matches(self, inner_steps: int, segment_steps: int) -> bool:
        """Whether the manifest covers whole segments of k steps, at least one and at most H steps."""
        steps = [b.step for b in self.boundaries]
        return self.steps <= inner_steps and steps == list(range(0, self.steps + 1, segment_steps))


Hotkey = Annotated[str, Field(min_length=40, max_length=64)]


class AcceptedUpdate(_Body):
    hotkey: Hotkey
    manifest_sha256: Sha256
    """The miner's signed manifest, which its chain commitment anchored before the commit deadline."""
    update_sha256: Sha256
    weight: float = Field(gt=0.0, le=1.0)


class AggregateManifest(_Body):
    kind: Literal["aggregate"] = "aggregate"
    run_id: Sha256
    window: int = Field(ge=0)
    base_hash: Sha256
    report_sha256: Sha256
    """The validator's signed report of the window: the accepted updates and their weights follow
    from its scores under the run's rule (`distrai.protocol.aggregation.accepted_by_rule`)."""
    accepted: list[AcceptedUpdate]
    result_hash: Sha256
    """Hash of the global model after the outer step: anyone applying it must reach this."""
    outer_hash: Sha256
    """Hash of the outer optimizer's state (momentum and step count) after the outer step
    (`distrai.train.outer.outer_state_hash`): anyone applying it must reach this too."""


class PayStanding(_Body):
    """A miner's pay at the reporting validator once the window's scores are folded in
    (`validators.pay`): what its weight follows now, and what still waits to mature."""

    average: float = Field(ge=0.0, allow_inf_nan=False)
    """the moving average of its matured window scores, in tokens a window: its weight follows it"""
    pending: float = Field(ge=0.0, allow_inf_nan=False)
    """its window scores not yet matured, summed, in tokens: forfeited if it is caught before then"""
    matures_at: int | None = Field(ge=0)
    """the window whose check matures its oldest pending score (None: nothing pending)"""
    held: bool = False
    """paid nothing and nothing matures until a withheld reveal is read again"""


class MinerEntry(_Body):
    """One miner's line in a report: each check's verdict ("pass" or why not), what was measured,
    the window score, the first failed check's reason (None when every check passed) and where its
    pay stands at this validator."""

    uid: int = Field(ge=0)
    verdicts: dict[str, str]
    numbers: dict[str, float]
    score: float = Field(ge=0.0, allow_inf_nan=False)
    """the window's pay units: the tokens the manifest claims, up to those the update's gain vouches
    for (0 when a check failed)"""
    reason: str | None
    pay: PayStanding | None = None

    @field_validator("numbers")
    @classmethod
    def _finite_numbers(cls, values: dict[str, float]) -> dict[str, float]:
        if not all(math.isfinite(v) for v in values.values()):
            raise ValueError("numbers must be finite")
        return values


REASON_CHARS = 2000
"""A refusal's reason is cut to this many characters (it quotes what the refused node sent)."""


class Refusal(_Body):
    """Another validator's aggregate this validator would not follow, and why."""

    validator: Hotkey
    window: int = Field(ge=0)
    reason: str = Field(min_length=1, max_length=REASON_CHARS)


ReplayCheckName = Literal["states", "replay", "trajectory"]
"""`verdicts.REPLAY_CHECKS` as the type of a finding's check (a `Literal`: strict validation takes
the plain strings a signed body holds)."""
if get_args(ReplayCheckName) != REPLAY_CHECKS:
    raise ImportError(f"ReplayCheckName must list verdicts.REPLAY_CHECKS {REPLAY_CHECKS}, in order")


class Finding(_Body):
    """A validator's signed claim that a challenged miner's reveal failed a replay check: what it
    replayed, and where the evidence lies in the miner's store, for any validator to re-check."""

    kind: Literal["finding"] = "finding"
    run_id: Sha256
    window: int = Field(ge=0)
    validator: Hotkey
    miner: Hotkey
    check: ReplayCheckName
    reason: str = Field(min_length=1, max_length=REASON_CHARS)
    manifest_sha256: Sha256
    """the miner's signed manifest, anchored on chain before the commit deadline"""
    store_url: str = Field(min_length=1, max_length=1024)
    """the miner's store, as its commitment announced it"""
    segments: list[int]
    """the challenged segments replayed"""
    evidence: list[str] = Field(max_length=64)
    """the keys in the miner's store the finding rests on: manifest, revealed states, trajectory reveal"""
    withheld: bool = False
    """the miner's store did not serve them (`validators.withheld`): a re-check reads them as they
    are now, and adopts the finding when they are still unread or fail"""


class Recheck(_Body):
    """Another validator's finding, as this validator's re-check judged it: adopted (the miner is
    barred here too), refuted (a false accusation, which the report names with its validator), or
    not re-checked (the re-check could not run here)."""

    validator: Hotkey
    miner: Hotkey
    window: int = Field(ge=0)
    outcome: Literal["adopted", "refuted", "not re-checked"]
    reason: str = Field(min_length=1, max_length=REASON_CHARS)


class Measurement(_Body):
    """What one update did, as the validator that measured it publishes it
    (`validators.usefulness.Usefulness`)."""

    drop_trained: float
    drop_unseen: float
    mark: float
    mark_z: float

    @model_validator(mode="after")
    def _finite(self) -> Measurement:
        if not all(math.isfinite(v) for v in (self.drop_trained, self.drop_unseen, self.mark, self.mark_z)):
            raise ValueError("measurements must be finite")
        return self


if not set(Measurement.model_fields) <= set(Number):
    raise ImportError("every field of Measurement must be a verdicts.Number: the report's numbers copy them")


class Measurements(_Body):
    """A validator's signed measurements of the updates of its share of a window's miners, which
    the other validators take instead of measuring them again (`validators.shared_scoring`)."""

    kind: Literal["measurements"] = "measurements"
    run_id: Sha256
    window: int = Field(ge=0)
    validator: Hotkey
    miners: dict[Hotkey, Measurement]


class MeasurementRecheck(_Body):
    """Another validator's measurement of one update, measured again here: confirmed, or refuted
    (its measurements of the window are then not taken, and the report names it)."""

    validator: Hotkey
    miner: Hotkey
    window: int = Field(ge=0)
    outcome: Literal["confirmed", "refuted"]
    reason: str = Field(min_length=1, max_length=REASON_CHARS)


class Receipt(_Body):
    """What one replayed segment reached, in a form only its replay (or the miner that trained it)
    can give: the sketch of the replayed end under a key of the window's seed, the replaying
    validator, the miner and the segment (`validators.receipts`)."""

    miner: Hotkey
    segment: int = Field(ge=0)
    sketch: list[float] = Field(min_length=1, max_length=1 << 16)

    @field_validator("sketch")
    @classmethod
    def _finite(cls, value: list[float]) -> list[float]:
        if not all(math.isfinite(x) for x in value):
            raise ValueError("a receipt's sketch must be finite")
        return value


class ReplayReceipts(_Body):
    """A validator's signed receipts for the replays of its share of a window: one per replayed
    segment, which other validators replay again on a drawn sample (`validators.receipts`)."""

    kind: Literal["receipts"] = "receipts"
    run_id: Sha256
    window: int = Field(ge=0)
    validator: Hotkey
    receipts: list[Receipt] = Field(max_length=1 << 14)


class ReceiptRecheck(_Body):
    """Another validator's receipt for a replay, replayed again here: confirmed, refuted (its
    replays are not trusted, nor is it paid as a worker, here for `ban_windows`), or not re-checked
    (the replay could not run here)."""

    validator: Hotkey
    miner: Hotkey
    window: int = Field(ge=0)
    segment: int = Field(ge=0)
    outcome: Literal["confirmed", "refuted", "not re-checked"]
    reason: str = Field(min_length=1, max_length=REASON_CHARS)


class WindowReport(_Body):
    kind: Literal["report"] = "report"
    run_id: Sha256
    window: int = Field(ge=0)
    validator: Hotkey
    observed_block: int = Field(ge=0)
    """The block at which the validator listed what miners had revealed: the reveal deadline's
    block, or later if the validator woke late; nothing absent then counted."""
    miners: dict[Hotkey, MinerEntry]
    refused: list[Refusal]
    rechecks: list[Recheck] = Field(default_factory=list)
    """the other validators' findings of the window before, re-checked while checking this one"""
    measured_by: dict[Hotkey, Hotkey] = Field(default_factory=dict)
    """miner → the validator whose measurement of its update the score rests on"""
    measurement_rechecks: list[MeasurementRecheck] = Field(default_factory=list)
    workers: list[Hotkey] = Field(default_factory=list)
    """the validators paid as workers here: they published the measurements of their whole share of
    this window in time and receipts for their replays of the window before, none refuted here"""
    receipt_rechecks: list[ReceiptRecheck] = Field(default_factory=list)
    """the other validators' receipts for replays of the window before, replayed again here"""


def parse_body(model: type[_Body], body: dict[str, Any]):
    """Validate a signed document's body against `model`; WireError names the first bad field."""
    try:
        return model.model_validate(body)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(_short(str(p)) for p in first["loc"]) or "body"
        reason = Reason.MISSING_FIELD if first["type"] == "missing" else Reason.BAD_FIELD
        raise WireError(reason, f"{model.__name__}.{where}: {first['msg']}") from None


def _short(part: str, limit: int = 66) -> str:
    """A field path's part as an error names it: a key a sender chose may be of any length."""
    return part if len(part) <= limit else part[: limit - 1] + "…"
