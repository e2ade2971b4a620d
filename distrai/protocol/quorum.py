"""The report quorum: an aggregate rests on the signed reports of every validator that anchored an
aggregate of the window, weighed by stake, not on its aggregator's report alone.

For each update an aggregate accepts, the validators whose reports count are split three ways:
- **passed**: its report's line for the miner passes the work: every check passed, a score above
  zero (`passes`; how much the aggregate then weighs it, by its measured gain, is not a verdict);
- **failed**: its report has a line for the miner that does not;
- **abstained**: it published no report that counts (none anchored, none readable, not signed),
  or its report has no line for the miner (it saw no manifest of it in time). Only signed
  verdicts are weighed: counting silence as a failure would let validators that publish nothing
  block every update, counting it as a pass would let them vouch for work they never looked at.

The aggregate is refused when an update it accepts was failed by validators holding at least as
much stake as those that passed it (ties refuse), and at least one failed it. A report still out of
reach (`pending`) counts as whichever verdict would change the decision: if either would, the
decision waits for it.

Pure: the caller reads the reports and the stakes (`distrai.protocol.follow.window_quorum`).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from distrai.protocol.globalmodel import SyncError, SyncUnavailable
from distrai.wire.window_documents import MinerEntry, WindowReport


def passes(entry: MinerEntry) -> bool:
    """Whether this one line of a report passes the miner's work: every check passed and a score above
    0. How much the aggregate weighs it (`aggregation.accepted_by_rule`, by its measured gain) is not
    a verdict on the work."""
    return entry.reason is None and entry.score > 0


@dataclass(frozen=True)
class Tally:
    """The stake behind each verdict on one miner's update."""

    passed: float
    failed: float
    pending: float
    failed_by: tuple[str, ...]
    """the validators whose reports failed it, most stake first"""

    def refuses(self) -> bool | None:
        """True when the failing stake is at least the passing stake (and above zero), False when it is
        not, None when the reports still out of reach could tip it either way."""
        worst = _outvoted(self.failed + self.pending, self.passed)
        best = _outvoted(self.failed, self.passed + self.pending)
        return worst if worst == best else None


def _outvoted(failed: float, passed: float) -> bool:
    return failed > 0 and failed >= passed


@dataclass(frozen=True)
class Quorum:
    """The window's reports that count, by validator, and the stake of every permitted validator."""

    stake: Mapping[str, float]
    reports: Mapping[str, WindowReport]
    pending: frozenset[str] = frozenset()
    """validators whose anchored report is out of reach for now"""

    def tally(self, miner: str) -> Tally:
        passed = failed = pending = 0.0
        failed_by = []
        for validator, stake in sorted(self.stake.items(), key=lambda item: (-item[1], item[0])):
            if validator in self.pending:
                pending += stake
                continue
            report = self.reports.get(validator)
            entry = None if report is None else report.miners.get(miner)
            if entry is None:
                continue
            if passes(entry):
                passed += stake
            else:
                failed += stake
                failed_by.append(validator)
        return Tally(passed, failed, pending, tuple(failed_by))

    def check(self, accepted: Iterable[str]) -> None:
        """Raise `SyncError` naming the first accepted update the quorum fails, or `SyncUnavailable`
        when a report out of reach could decide it."""
        for miner in accepted:
            tally = self.tally(miner)
            verdict = tally.refuses()
            if verdict is None:
                waiting = ", ".join(sorted(hk[:10] + "…" for hk in self.pending))
                raise SyncUnavailable(
                    f"the reports of {waiting} are out of reach, and their verdicts on {miner[:10]}… "
                    "could decide whether the quorum passes its update"
                )
            if verdict:
                by = ", ".join(hk[:10] + "…" for hk in tally.failed_by)
                raise SyncError(
                    f"it takes the update of {miner[:10]}…, which the signed reports of validators holding "
                    f"{tally.failed:g} stake failed ({by}) against {tally.passed:g} that passed it"
                )
