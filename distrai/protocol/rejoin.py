"""Where the network's model is, seen from a node that passed over something out of reach.

A node that waited for an anchored aggregate (or the report it names) past its patience passes over
it (`distrai.protocol.sync.Syncer.step`) and goes on from the model it had. Other nodes may have
reached it in time and followed it; the node cannot tell at that moment. It can tell a window or two
later: the validators' anchored aggregates of each later window name the model they were built on
(`base_hash`). `BaseVotes` counts them by stake, this node's own aggregate left out (a node cannot
vouch for itself), and `Verdict` says whether the node is with the network, behind it, or cannot tell.
The syncer holds the model it had when it passed over for `REJOIN_WINDOWS` windows, and goes back to
it, waiting for what it passed over instead of passing over it again, as soon as the votes say it is
behind."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from enum import Enum

REJOIN_WINDOWS = 4
"""Windows after a pass-over during which a node holds the model it had then, looks at where the
other validators' aggregates are built, and, behind, waits for what it passed over; after them it
keeps its own line whatever the aggregates say (so aggregates built on a model nobody can reach hold
up a node that passed something over for these windows at most). At the GPU config (150M parameters, float32 parameters and outer momentum) the held model
costs 1.2 GB of host memory while it is held, 9.6 GB at 1.2B."""


class Verdict(Enum):
    WITH = "with the network"
    BEHIND = "behind"
    UNKNOWN = "no aggregate tells"


@dataclass(frozen=True)
class BaseVote:
    """One validator's anchored, signed aggregate of a window: the model it was built on, and that
    validator's stake."""

    validator: str
    base_hash: str
    stake: float


def verdict(votes: Iterable[BaseVote], ours: str, me: str | None) -> Verdict:
    """Whether a node whose model of the window hashes to `ours` is behind the validators that
    aggregated it: the stake of the aggregates built on another model outweighs that of those built on
    ours (ties and no votes tell nothing). A node's own aggregate (`me`) is not counted. Stakes of 0
    count as one each, so that a subnet without stake still tells."""
    counted = [v for v in votes if v.validator != me]
    if not counted:
        return Verdict.UNKNOWN
    weight = (lambda v: v.stake) if any(v.stake > 0 for v in counted) else (lambda v: 1.0)
    with_us = sum(weight(v) for v in counted if v.base_hash == ours)
    against = sum(weight(v) for v in counted if v.base_hash != ours)
    if against > with_us:
        return Verdict.BEHIND
    if with_us > against:
        return Verdict.WITH
    return Verdict.UNKNOWN
