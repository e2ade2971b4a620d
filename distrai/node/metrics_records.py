"""The records of a node's metrics file (`metrics.jsonl`, written by `distrai.node.metrics.Metrics`):
one pydantic model per kind, through which each line is written and read back.

A line is one flat JSON object: what every write adds (`MetricsLine`: the time, the window, the
node's role, hotkey and run id, its peak memory so far) and the fields of one record. A miner's
records carry their kind in `event`:

- `TrainRecord` (`"train"`): a window trained and committed: losses, rate, bytes, seconds, steps;
- `RevealRecord` (`"reveal"`): a window's reveal uploaded: seconds, bytes, rates, whether late;
- `LinkRecord` (`"link"`): the store's upload rate measured against what a reveal needs;
- `LostRecord` (`"lost"`): a window the miner set out to train and lost, and why.

A validator's record of a window (`ValidatorWindowRecord`) has no `event`; its per-uid numbers are
keys of their own (`weight/3`, `score/3`, `unmeasured/3`, `average/3`), one chart each in wandb.

A number that is undefined by nature (a loss that diverged, a rate with no time to measure it)
is written as null and read back as None; every other number is finite, and a record that holds
one that is not is refused when it is made.
"""

from __future__ import annotations

import json
import math
from typing import Annotated, Any, Literal

from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Discriminator,
    SerializerFunctionWrapHandler,
    Tag,
    ValidationError,
    model_serializer,
    model_validator,
)


def _finite_or_none(value: Any) -> Any:
    return None if isinstance(value, float) and not math.isfinite(value) else value


Measure = Annotated[float | None, BeforeValidator(_finite_or_none)]
"""A number that may have no finite value (None; null on disk)."""


class _Record(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, strict=True, allow_inf_nan=False)


class TrainRecord(_Record):
    """A window a miner trained and committed (written once its commitment landed)."""

    event: Literal["train"] = "train"
    loss_first: Measure
    loss_last: Measure
    tokens_per_s: float
    bytes_sent: int
    """the update blob and its manifest"""
    bytes_received: int
    """the models synced so far"""
    emission: float
    train_seconds: float
    idle_seconds: float
    """waiting for the window to start"""
    other_seconds: float
    """syncing, encoding, committing"""
    wall_seconds: float
    utilization: float
    """train seconds over wall seconds"""
    uploads_pending: int
    steps_trained: int
    aggregates_refused: int
    behaviour: str
    """"honest", or the adversary's name"""


class RevealRecord(_Record):
    """A window's reveal, uploaded (or given up on: late, nothing sent)."""

    event: Literal["reveal"] = "reveal"
    upload_seconds: float
    uploaded_bytes: int
    revealed_bytes: int
    """the challenged states and the trajectory sample: the upload less the update"""
    states_revealed: int
    upload_rate: Measure
    """bytes per second; None when nothing took time"""
    upload_rate_needed: Measure
    reveal_late: bool


class LinkRecord(_Record):
    """The store's upload rate against the rate a challenged window's reveal needs
    (`distrai.node.linkcheck`)."""

    event: Literal["link"] = "link"
    upload_rate_measured: Measure
    upload_rate_needed: Measure
    link_margin: Measure
    """measured over needed: at least 1 when the reveal fits"""


class LostRecord(_Record):
    """A window the miner set out to train and lost."""

    event: Literal["lost"] = "lost"
    why: str


PER_UID = {"weight": "weights", "score": "scores", "unmeasured": "unmeasured", "average": "averages"}
"""The prefix of each per-uid key of a validator's record on disk → its field."""


class ValidatorWindowRecord(_Record):
    """A validator's record of a window (`validators.window_record`): what it checked, accepted and
    published, what it settled of the window before, how long it took, and per uid its weight, the
    window's score (or that no validator measured the uid) and the moving average after it."""

    updates: int
    accepted: int
    validate_seconds: float
    idle_seconds: float
    utilization: float
    """validate seconds over validate and idle seconds"""
    leader_agreed_last_window: Measure
    """whether the followed aggregate agreed with this validator's (None: nothing to compare)"""
    aggregates_refused: int
    findings_published: int
    findings_adopted: int
    findings_refuted: int
    receipts_published: int
    receipts_refuted: int
    bytes_received: int
    emission: float
    weights: list[float]
    """index = uid; empty when no weights were set"""
    scores: dict[int, float]
    """uid → the window's score, for each miner measured"""
    unmeasured: list[int]
    """the uids no validator measured"""
    averages: list[float]
    """index = uid"""

    @model_validator(mode="before")
    @classmethod
    def _from_keys(cls, data: Any) -> Any:
        """Fold the per-uid keys (`score/3`) of a record as on disk into their fields."""
        if not isinstance(data, dict) or any(field in data for field in PER_UID.values()):
            return data
        per_uid: dict[str, dict[int, Any]] = {field: {} for field in PER_UID.values()}
        out = {}
        for key, value in data.items():
            prefix, slash, uid = key.partition("/")
            if not slash:
                out[key] = value
            elif prefix in PER_UID and uid.isdigit() and str(int(uid)) == uid:
                per_uid[PER_UID[prefix]][int(uid)] = value
            else:
                raise ValueError(f"{key!r} is not a per-uid key ({', '.join(f'{p}/UID' for p in PER_UID)})")
        for field in ("weights", "averages"):
            if sorted(per_uid[field]) != list(range(len(per_uid[field]))):
                raise ValueError(f"the {field} are not one for each uid from 0: {sorted(per_uid[field])}")
            out[field] = [per_uid[field][uid] for uid in range(len(per_uid[field]))]
        if flags := {flag for flag in per_uid["unmeasured"].values() if flag != 1}:
            raise ValueError(f"an unmeasured/UID key holds 1, not {flags.pop()!r}")
        out["scores"] = per_uid["scores"]
        out["unmeasured"] = sorted(per_uid["unmeasured"])
        return out

    @model_serializer(mode="wrap")
    def _to_keys(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        """The per-uid fields as keys of their own, as on disk."""
        data = handler(self)
        weights, scores = data.pop("weights"), data.pop("scores")
        unmeasured, averages = data.pop("unmeasured"), data.pop("averages")
        return {
            **data,
            **{f"weight/{uid}": x for uid, x in enumerate(weights)},
            **{f"score/{uid}": x for uid, x in scores.items()},
            **{f"unmeasured/{uid}": 1 for uid in unmeasured},
            **{f"average/{uid}": x for uid, x in enumerate(averages)},
        }


VALIDATOR = "validator"
"""The tag of a validator's window record, which has no `event` on disk."""


def _kind(value: Any) -> str:
    if isinstance(value, dict):
        return value.get("event", VALIDATOR)
    return getattr(value, "event", VALIDATOR)


MetricsRecord = Annotated[
    Annotated[TrainRecord, Tag("train")]
    | Annotated[RevealRecord, Tag("reveal")]
    | Annotated[LinkRecord, Tag("link")]
    | Annotated[LostRecord, Tag("lost")]
    | Annotated[ValidatorWindowRecord, Tag(VALIDATOR)],
    Discriminator(_kind),
]
"""Any record of a metrics file, told apart by its `event` (none: a validator's window record)."""


class MetricsLine(BaseModel):
    """One line of a metrics file: what every write adds, and the record, flat in one object."""

    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)

    time: float
    """unix seconds of the write"""
    window: int
    role: str
    hotkey: str
    run_id: str
    peak_rss_bytes: int
    """the process's peak resident set so far"""
    cuda_peak_bytes: int | None = None
    """the most GPU memory torch held at once so far; None (no key on disk) in a process that used
    no GPU"""
    record: MetricsRecord

    @model_validator(mode="before")
    @classmethod
    def _from_flat(cls, data: Any) -> Any:
        """Split a line's object into what every write adds and the record."""
        if not isinstance(data, dict) or "record" in data:
            return data
        added = set(cls.model_fields) - {"record"}
        return {
            **{k: v for k, v in data.items() if k in added},
            "record": {k: v for k, v in data.items() if k not in added},
        }

    @model_serializer(mode="wrap")
    def _to_flat(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        data = handler(self)
        record = data.pop("record")
        if data["cuda_peak_bytes"] is None:
            del data["cuda_peak_bytes"]
        return {**data, **record}

    def to_json(self) -> str:
        """The line as written: one flat JSON object, keys sorted (no newline)."""
        return json.dumps(self.model_dump(mode="json"), sort_keys=True)


class MetricsError(ValueError):
    """A line that is not a metrics record; the message names what is wrong."""


class TornLine(MetricsError):
    """A line that is not JSON: the end of a write cut short (a node killed while it wrote)."""


def parse_line(text: str) -> MetricsLine:
    """A metrics file's line as its model; MetricsError names the first thing wrong with it."""
    try:
        data = json.loads(text)
    except ValueError as exc:
        raise TornLine(f"not JSON ({exc}): a write cut short") from None
    if not isinstance(data, dict):
        raise MetricsError(f"not a JSON object but {type(data).__name__}")
    try:
        return MetricsLine.model_validate(data)
    except ValidationError as exc:
        first = exc.errors()[0]
        message = first["msg"].removeprefix("Value error, ")
        loc = [str(part) for part in first["loc"]]
        if first["type"] == "union_tag_invalid":
            kinds = ", ".join(repr(k) for k in ("train", "reveal", "link", "lost"))
            raise MetricsError(
                f"event {data.get('event')!r} is none of {kinds} (a validator's record has no event)"
            ) from None
        if loc[:1] == ["record"] and len(loc) > 1:
            where = ".".join(loc[2:])
            raise MetricsError(f"a {loc[1]} record: {where + ': ' if where else ''}{message}") from None
        raise MetricsError(f"{'.'.join(loc) or 'the line'}: {message}") from None
