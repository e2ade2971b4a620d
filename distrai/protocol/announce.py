"""A node's chain commitment: where it publishes, and what it anchors for a window.

`Announcement` is the one place that says the wire format: compact JSON, one letter per key
(`WIRE_KEYS`) so it fits the chain's commitment limit (`Hyperparameters.commitment_max_bytes`, which
the chain enforces on every write: on subtensor as many 128-byte `Raw` fields as the Commitments
pallet's `MaxFields`). It is written with `Announcement.encode` and read with `Announcement.read`:
- `{"s": store_url}`: where the node publishes;
- `{"s": store_url, "w": window, "m": manifest_sha256, "n": segments}`: a miner's update manifest of
  window `w` and the segments it claims to have trained (the manifest must say the same);
- `{"s": store_url, "w": window, "a": aggregate_sha256}`: a validator's aggregate of window `w`.
The subnet owner's commitment names the run instead (`distrai.protocol.run.RunCommitment`).
A manifest counts for a window only if the chain holds its hash before the commit deadline, an
aggregate only if the chain holds its hash before the aggregate deadline: nodes read the
commitments as of the block before each deadline (`Chain.commitments(block=…)`). The claim is on
chain so that the challenge draw, which grows with it (`windows.extra_runs`), is the same for every
node, whether or not it could read the manifest. A commitment that is no announcement (garbage, a
run commitment) counts for nothing: its node is simply not in the window.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Mapping

from pydantic import (
    AliasGenerator,
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    model_validator,
)
from pydantic_core import ErrorDetails

from distrai.chain.base import Chain, Commitment
from distrai.protocol.windows import WindowConfig, commit_deadline, committed_in_time
from distrai.wire.errors import Reason, WireError
from distrai.wire.window_documents import Sha256

WIRE_KEYS = {
    "store_url": "s",
    "window": "w",
    "manifest_sha256": "m",
    "aggregate_sha256": "a",
    "segments": "n",
}
"""`Announcement`'s fields by the key each has on chain."""
_FIELDS = {key: name for name, key in WIRE_KEYS.items()}
_NAMED_KEY = 66
"""the longest key a refusal quotes whole: an unknown key is the publisher's to choose"""


class Announcement(BaseModel):
    """A node's announcement, built by field name; on chain each field has its key in `WIRE_KEYS`,
    and nothing else is read (no field name, no other key)."""

    model_config = ConfigDict(
        extra="forbid",
        frozen=True,
        strict=True,
        validate_by_name=True,
        validate_by_alias=False,
        alias_generator=AliasGenerator(
            validation_alias=WIRE_KEYS.__getitem__, serialization_alias=WIRE_KEYS.__getitem__
        ),
    )

    store_url: str = Field(min_length=1)
    """where the node publishes (a `distrai.store` URL)"""
    window: int | None = Field(default=None, ge=0)
    """the window of the anchor (an anchor only)"""
    manifest_sha256: Sha256 | None = None
    """a miner's anchor: the sha256 of its signed update manifest"""
    aggregate_sha256: Sha256 | None = None
    """a validator's anchor: the sha256 of its signed aggregate"""
    segments: int | None = Field(default=None, ge=1)
    """the segments the anchored manifest claims (a manifest anchor only)"""

    @model_validator(mode="after")
    def _one_anchor(self) -> Announcement:
        anchors = [a for a in (self.manifest_sha256, self.aggregate_sha256) if a is not None]
        if (self.window is None) != (not anchors) or len(anchors) > 1:
            raise ValueError("an announcement anchors one manifest or one aggregate, with its window")
        if (self.manifest_sha256 is not None) != (self.segments is not None):
            raise ValueError(
                "a manifest anchor names the segments it claims, and only a manifest anchor does"
            )
        return self

    def encode(self) -> str:
        """The commitment on chain: the fields set, by their keys, sorted, without spaces."""
        body = self.model_dump(by_alias=True, exclude_none=True)
        return json.dumps(body, separators=(",", ":"), sort_keys=True)

    @classmethod
    def read(cls, data: str) -> Announcement:
        """The announcement commitment `data` holds; `WireError` naming each thing wrong with it."""
        try:
            return cls.model_validate_json(data, by_alias=True, by_name=False)
        except ValidationError as exc:
            errors = exc.errors()
            raise WireError(_reason(errors), _problems(errors)) from None


def _reason(errors: list[ErrorDetails]) -> Reason:
    kind = errors[0]["type"]
    if kind in ("json_invalid", "model_type"):
        return Reason.MALFORMED_JSON
    return Reason.MISSING_FIELD if kind == "missing" else Reason.BAD_FIELD


def _problems(errors: list[ErrorDetails]) -> str:
    """`errors` as one line, each at the key it is about and that key's field."""
    said = []
    for error in errors:
        where = "announcement"
        if error["loc"]:
            key = str(error["loc"][0])
            quoted = repr(key if len(key) <= _NAMED_KEY else key[: _NAMED_KEY - 1] + "…")
            where = f"key {quoted} ({_FIELDS[key]})" if key in _FIELDS else f"key {quoted}"
        said.append(f"{where}: {error['msg']}")
    return "; ".join(said)


def parse_announcement(data: str) -> Announcement | None:
    """The announcement in a commitment, or None for anything else (a run commitment, garbage): a
    node's unreadable commitment is that node's loss, never its reader's failure."""
    try:
        return Announcement.read(data)
    except WireError:
        return None


def _anchoring(
    commitments: dict[str, Commitment], window: int, in_time: Callable[[int], bool], anchor: str
) -> dict[str, Announcement]:
    out = {}
    for hotkey, commitment in commitments.items():
        parsed = parse_announcement(commitment.data)
        if (
            parsed is not None
            and getattr(parsed, anchor) is not None
            and parsed.window == window
            and in_time(commitment.block)
        ):
            out[hotkey] = parsed
    return out


def committed_updates(
    commitments: dict[str, Commitment], window: int, in_time: Callable[[int], bool]
) -> dict[str, Announcement]:
    """The miners whose commitment names an update of `window` and landed in time, by hotkey."""
    return _anchoring(commitments, window, in_time, "manifest_sha256")


def committed_by_deadline(
    chain: Chain, windows: WindowConfig, window: int
) -> tuple[dict[str, Announcement], dict[str, Commitment]]:
    """The miners whose manifest of `window` the chain held before its commit deadline, as of the
    block before it (a later re-commitment changes nothing of the window), and every commitment as
    of that block: what validators check and what the challenge is drawn over."""
    commitments = chain.commitments(block=commit_deadline(windows, window) - 1)
    in_time = committed_updates(commitments, window, lambda b: committed_in_time(windows, window, b))
    return in_time, commitments


def claims(committed: Mapping[str, Announcement]) -> dict[str, int]:
    """Miner → the segments its manifest anchor claims (the challenge draw grows with them)."""
    return {hotkey: a.segments for hotkey, a in committed.items() if a.segments is not None}


def anchored_aggregates(
    commitments: dict[str, Commitment], window: int, in_time: Callable[[int], bool]
) -> dict[str, Announcement]:
    """The validators whose commitment names an aggregate of `window` and landed in time, by hotkey."""
    return _anchoring(commitments, window, in_time, "aggregate_sha256")


RECENT_AGGREGATE_WINDOWS = 2
"""A validator shares window w's replays when its commitment anchors an aggregate of w − 2 or w − 1."""


def sharing_validators(
    permitted: Iterable[str], commitments: dict[str, Commitment], window: int
) -> list[str]:
    """The validators among `permitted` that share the replays of `window`: those whose commitment
    (read at the block before the commit deadline, the same for everyone) anchors a recent aggregate,
    so a permitted hotkey that does not validate (a weight copier, a validator gone offline) takes no
    share it would leave unchecked. All of `permitted` when none does: a run's first windows."""
    permitted = sorted(set(permitted))
    active = []
    for hotkey in permitted:
        parsed = parse_announcement(commitments[hotkey].data) if hotkey in commitments else None
        if (
            parsed is not None
            and parsed.aggregate_sha256 is not None
            and parsed.window is not None
            and window - RECENT_AGGREGATE_WINDOWS <= parsed.window < window
        ):
            active.append(hotkey)
    return active or permitted
