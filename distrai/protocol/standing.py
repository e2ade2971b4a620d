"""Where a miner's update went in one window, and why, from what the protocol publishes: the
validators' signed reports and the aggregate the network followed. One pure function, read by the
miner's log and the dashboard alike, so both give the same reason."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from distrai.wire.verdicts import Number
from distrai.wire.window_documents import WindowReport

if TYPE_CHECKING:
    from distrai.protocol.sync import Settled

NO_AGGREGATE = "no aggregate of this window was followed (each came late or was refused)"


@dataclass(frozen=True)
class Standing:
    """One miner in one window: taken into the global model or not, and why not."""

    window: int
    taken: bool
    weight: float | None
    """its weight in the followed aggregate; None when it is not in it"""
    scores: dict[str, float]
    """validator hotkey → the score its signed report gives the miner"""
    reason: str | None
    """why the update is not in the global model; None when it is"""

    def line(self) -> str:
        """The miner's log line for this window."""
        scores = ", ".join(f"{v[:8]}… {s:,.0f}" for v, s in self.scores.items()) or "none reported"
        where = (
            f"taken into the global model, weight {self.weight:.3f}"
            if self.taken
            else f"not in the global model: {self.reason}"
        )
        return f"window {self.window}: {where}; scores: {scores}"


def standing(
    hotkey: str,
    window: int,
    reports: Mapping[str, WindowReport],
    leader: str | None,
    accepted: Sequence[tuple[str, float]],
    top_n: int,
) -> Standing:
    """`hotkey`'s standing in `window`: `reports` are the validators' signed reports of it, `leader`
    the validator whose aggregate the network followed (None when none was) and `accepted` that
    aggregate's (hotkey, weight) pairs, taken under the run's rule from the leader's report
    (`distrai.protocol.aggregation`, at most `top_n`)."""
    scores = {v: r.miners[hotkey].score for v, r in reports.items() if hotkey in r.miners}
    weight = dict(accepted).get(hotkey) if leader is not None else None
    if weight is not None:
        return Standing(window, True, weight, scores, None)
    return Standing(
        window, False, None, scores, why_not(hotkey, reports.get(leader) if leader else None, top_n)
    )


def why_not(hotkey: str, leader_report: WindowReport | None, top_n: int) -> str:
    """Why the followed aggregate did not take `hotkey`'s update, as the leader's report shows it."""
    if leader_report is None:
        return NO_AGGREGATE
    entry = leader_report.miners.get(hotkey)
    if entry is None:
        return (
            "the followed validator's report does not name it: no manifest of it was anchored on chain "
            "before the commit deadline (late, or none committed)"
        )
    if entry.reason is not None:
        return f"the followed validator rejected it: {entry.reason}"
    if entry.score <= 0:
        if Number.MARK not in entry.numbers:
            return "it passed every check, but no validator measured its update in time (unmeasured)"
        return "it passed every check, but scored 0"
    passing = sorted(
        (e.score for e in leader_report.miners.values() if e.reason is None and e.score > 0), reverse=True
    )
    rank = 1 + sum(1 for s in passing if s > entry.score)
    if rank <= top_n:
        return (
            f"tied on score at rank {rank} of {len(passing)} passing updates, and the window's seed broke the "
            f"tie against it (aggregate_top_n = {top_n})"
        )
    return (
        f"ranked {rank} of {len(passing)} passing updates by score, below aggregate_top_n = {top_n} "
        "(the aggregate takes the best only)"
    )


def standing_lines(hotkey: str, settled: Sequence[Settled], top_n: int) -> list[str]:
    """The miner's log line for each settled window that names its update (in a report or the
    followed aggregate)."""
    lines = []
    for s in settled:
        named = any(hotkey in r.miners for r in s.reports.values()) or hotkey in dict(s.accepted)
        if named:
            lines.append(standing(hotkey, s.window, s.reports, s.leader, s.accepted, top_n).line())
    return lines
