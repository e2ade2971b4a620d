"""A neuron's chain commitment: where it publishes, and (for a miner) its window manifest's hash.

Compact JSON, `{"s": store_url, "w": window, "m": manifest_sha256}` (the last two for a miner's
update of window `w`). It must fit the chain's commitment limit, so keys are one letter.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from dataclasses import dataclass

from distrai.chain.base import Commitment

_SHA = re.compile(r"[0-9a-f]{64}")


@dataclass(frozen=True)
class Announcement:
    store_url: str
    window: int | None = None
    manifest_sha256: str | None = None

    def encode(self) -> str:
        body: dict[str, object] = {"s": self.store_url}
        if self.window is not None:
            body["w"] = self.window
            body["m"] = self.manifest_sha256
        return json.dumps(body, separators=(",", ":"), sort_keys=True)


def parse_announcement(data: str) -> Announcement | None:
    """The announcement in a commitment, or None for anything else (a run commitment, garbage)."""
    try:
        body = json.loads(data)
    except (json.JSONDecodeError, TypeError):
        return None
    if not isinstance(body, dict) or not isinstance(body.get("s"), str) or not body["s"]:
        return None
    window, digest = body.get("w"), body.get("m")
    if window is None and digest is None and set(body) == {"s"}:
        return Announcement(body["s"])
    if set(body) != {"s", "w", "m"}:
        return None
    if not (isinstance(window, int) and not isinstance(window, bool) and window >= 0):
        return None
    if not (isinstance(digest, str) and _SHA.fullmatch(digest)):
        return None
    return Announcement(body["s"], window, digest)


def committed_updates(
    commitments: dict[str, Commitment], window: int, in_time: Callable[[int], bool]
) -> dict[str, Announcement]:
    """The miners whose commitment names an update of `window` and landed in time, by hotkey."""
    out = {}
    for hotkey, commitment in commitments.items():
        parsed = parse_announcement(commitment.data)
        if parsed is not None and parsed.window == window and in_time(commitment.block):
            out[hotkey] = parsed
    return out
