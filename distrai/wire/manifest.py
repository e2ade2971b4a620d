"""The documents of a window, as the bodies of signed envelopes (see `signed.py`).

- `UpdateManifest`: what a miner commits before the commit deadline. It names everything a
  validator later checks: the base model, the update blob (hash, size, codec), the micro-batch
  split, per-step losses, and the hash and sketch of the training state at every segment
  boundary, plus the hashes of the codec's error-feedback residual before and after.
- `AggregateManifest`: what the leading validator publishes: the accepted updates, their
  weights, and the hash of the next global model.

Every field is validated; a body that does not fit is refused with `MISSING_FIELD` or
`BAD_FIELD`, naming the field.
"""

from __future__ import annotations

import math
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from distrai.wire.errors import Reason, WireError

Sha256 = Annotated[str, Field(pattern=r"^[0-9a-f]{64}$")]


class _Body(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)


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


class UpdateManifest(_Body):
    kind: Literal["update"] = "update"
    run_id: Sha256
    window: int = Field(ge=0)
    hotkey: str = Field(min_length=40, max_length=64)
    base_hash: Sha256
    update: UpdateBlob
    micro_batches: int = Field(ge=1)
    losses: list[float]
    boundaries: list[Boundary]
    residual_in_hash: Sha256 | None
    residual_out_hash: Sha256 | None

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

    def shape_matches(self, inner_steps: int, segment_steps: int) -> bool:
        """Whether the manifest covers exactly H steps in segments of k."""
        return [b.step for b in self.boundaries] == list(range(0, inner_steps + 1, segment_steps))


class AcceptedUpdate(_Body):
    hotkey: str = Field(min_length=40, max_length=64)
    update_sha256: Sha256
    weight: float = Field(gt=0.0, le=1.0)


class AggregateManifest(_Body):
    kind: Literal["aggregate"] = "aggregate"
    run_id: Sha256
    window: int = Field(ge=0)
    base_hash: Sha256
    accepted: list[AcceptedUpdate]
    result_hash: Sha256
    """Hash of the global model after the outer step: anyone applying it must reach this."""


def parse_body(model: type[_Body], body: dict[str, Any]):
    """Validate a signed document's body against `model`; WireError names the first bad field."""
    try:
        return model.model_validate(body)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first["loc"]) or "body"
        reason = Reason.MISSING_FIELD if first["type"] == "missing" else Reason.BAD_FIELD
        raise WireError(reason, f"{model.__name__}.{where}: {first['msg']}") from None
