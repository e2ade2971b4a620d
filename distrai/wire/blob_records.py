"""The JSON record each kind of tensor blob carries in its safetensors header, one model per kind,
read and written both ways (`distrai.train.tensorfile`). Each record names its kind in `format`, so
a blob of one kind is never read as another; what a record says about its tensors is checked here
field by field, what it says against the model (names, shapes) by the module that decodes it.

| record | blob | written by |
|---|---|---|
| `TrainStateRecord` | a miner's training state at a boundary | `distrai.train.train_state` |
| `CodedStateRecord` | the same, coded against the window's base for a reveal | `distrai.train.coded_state` |
| `OuterStateRecord` | the outer optimizer's momentum | `distrai.train.outer` |
| `CheckpointRecord` | a published global model and its outer momentum | `distrai.protocol.globalmodel` |
| `TrajectoryRecord` | a challenged miner's trajectory reveal | `distrai.protocol.trajectory` |
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field

Count = Annotated[int, Field(ge=0)]
Size = Annotated[int, Field(ge=0, lt=2**32)]
Sha256Hex = Annotated[str, Field(pattern=r"^[0-9a-f]{64}$")]
CodedDtype = Literal["float32", "bfloat16", "float16"]
"""the dtypes a coded state may hold: the model's and AdamW's (whose step counters are float32)"""
PieceDigest = tuple[str, str, Count, Sha256Hex]
"""one piece's digest: its hash section, tensor name, piece index and sha256"""


class BlobRecord(BaseModel):
    """A blob's record: strict JSON types (a `true` is no count), no field beyond the model's, and
    `format`, a literal each kind fixes as its default."""

    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)

    format: str

    @classmethod
    def kind(cls) -> str:
        """The format string of this kind of record."""
        return str(cls.model_fields["format"].default)


class TrainStateRecord(BlobRecord):
    format: Literal["distrai.train_state/1"] = "distrai.train_state/1"
    step: Count
    """the inner step the state is at"""


class OuterStateRecord(BlobRecord):
    format: Literal["distrai.outer_state/1"] = "distrai.outer_state/1"
    step: Count
    """outer steps taken"""


class CheckpointRecord(BlobRecord):
    format: Literal["distrai.global_checkpoint/1"] = "distrai.global_checkpoint/1"
    window: Count
    """the window the model is the base of"""
    outer_step: Count


class TrajectoryRecord(BlobRecord):
    format: Literal["distrai.protocol.trajectory/1"] = "distrai.protocol.trajectory/1"
    last_state: list[PieceDigest]
    """every piece digest of the last boundary's state"""
    residual_in: list[PieceDigest] | None
    """every piece digest of the codec residual carried in (None: the codec keeps none)"""
    residual_out: list[PieceDigest] | None


class CodedTensor(BaseModel):
    """How one tensor of a coded state is coded (`distrai.train.coded_state`)."""

    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)

    dtype: CodedDtype
    shape: Annotated[list[Size], Field(max_length=8)]
    delta: bool
    """coded as its difference from the base (parameters) or as it is (optimizer state)"""
    planes: list[Count]
    """the byte length of each byte plane's compressed frame, one plane per byte of the dtype"""


class CodedStateRecord(BlobRecord):
    format: Literal["distrai.coded_train_state/1"] = "distrai.coded_train_state/1"
    step: Count
    tensors: dict[str, CodedTensor]
    """every tensor the blob holds, by its key"""
