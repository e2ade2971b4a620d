"""A neuron's chain commitment: where it publishes, and what it anchors for a window.

Compact JSON, one letter per key so it fits the chain's commitment limit:
- `{"s": store_url}`: where the neuron publishes;
- `{"s": store_url, "w": window, "m": manifest_sha256, "n": segments}`: a miner's update manifest of
  window `w` and the segments it claims to have trained (the manifest must say the same);
- `{"s": store_url, "w": window, "a": aggregate_sha256}`: a validator's aggregate of window `w`.
A manifest counts for a window only if the chain holds its hash before the commit deadline, an
aggregate only if the chain holds its hash before the aggregate deadline: nodes read the
commitments as of the block before each deadline (`Chain.commitments(block=…)`). The claim is on
chain so that the challenge draw, which grows with it (`windows.extra_runs`), is the same for every
node, whether or not it could read the manifest.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass

from distrai.chain.base import Chain, Commitment
from distrai.protocol.windows import WindowConfig, commit_deadline, committed_in_time

_SHA = re.compile(r"[0-9a-f]{64}")
_ANCHOR_KEYS = {"m": "manifest_sha256", "a": "aggregate_sha256"}


@dataclass(frozen=True)
class Announcement:
    store_url: str
    window: int | None = None
    manifest_sha256: str | None = None
    aggregate_sha256: str | None = None
    segments: int | None = None
    """the segments the anchored manifest claims (a manifest anchor only)"""

    def __post_init__(self) -> None:
        anchors = [a for a in (self.manifest_sha256, self.aggregate_sha256) if a is not None]
        if (self.window is None) != (not anchors) or len(anchors) > 1:
            raise ValueError("an announcement anchors one manifest or one aggregate, with its window")
        if (self.manifest_sha256 is not None) != (self.segments is not None):
            raise ValueError(
                "a manifest anchor names the segments it claims, and only a manifest anchor does"
            )
        if self.segments is not None and self.segments < 1:
            raise ValueError(f"a manifest claims at least one segment, not {self.segments}")

    def encode(self) -> str:
        body: dict[str, object] = {"s": self.store_url}
        if self.window is not None:
            body["w"] = self.window
            if self.manifest_sha256 is not None:
                body["m"] = self.manifest_sha256
                body["n"] = self.segments
            else:
                body["a"] = self.aggregate_sha256
        return json.dumps(body, separators=(",", ":"), sort_keys=True)


def parse_announcement(data: str) -> Announcement | None:
    """The announcement in a commitment, or None for anything else (a run commitment, garbage)."""
    try:
        body = json.loads(data)
    except (json.JSONDecodeError, TypeError):
        return None
    if not isinstance(body, dict) or not isinstance(body.get("s"), str) or not body["s"]:
        return None
    if set(body) == {"s"}:
        return Announcement(body["s"])
    anchor = set(body) - {"s", "w", "n"}
    if not ({"s", "w"} <= set(body) and len(anchor) == 1 and anchor <= _ANCHOR_KEYS.keys()):
        return None
    window, (key,) = body["w"], anchor
    if not _count(window, 0):
        return None
    if not (isinstance(body[key], str) and _SHA.fullmatch(body[key])):
        return None
    if key == "m":
        segments = body.get("n")
        if not _count(segments, 1):
            return None
        return Announcement(body["s"], window, manifest_sha256=body[key], segments=segments)
    if "n" in body:
        return None
    return Announcement(body["s"], window, aggregate_sha256=body[key])


def _count(value: object, least: int) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= least


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
