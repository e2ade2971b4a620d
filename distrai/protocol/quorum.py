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

**No censoring.** Accepting nothing breaks no rule of the aggregator's own word: a leader whose
report fails every honest miner aggregates nothing, and its result is its base, which no
re-measurement can refuse. So the quorum also weighs what an aggregate leaves out. A miner is
*owed a place* when the reports whose lines make it a candidate of the run's rule (`candidate`:
every check passed, a score and a measured gain above zero) hold more than half the stake of all the
reports that count. Half of all, not of those with a line on it: else one validator with a sliver of
stake could write a line for a hotkey nobody else reports (one that committed nothing, or no miner
at all) and have every honest aggregate refused for leaving it out. (An update nobody measured in
time scores 0 at that validator, so its line is not a candidate there, as it fails in the tally
above: the two rules never pull one aggregate two ways.) An aggregate that leaves out a miner owed a place is refused unless it is full
(`aggregate_top_n` updates) of updates whose gains, as the quorum measured them (the stake-weighted
median over the lines that make each a candidate), are at least as large. A censor holding less
than half the reporting stake is thus refused whatever its own report says, and the follower falls back
to the next validator's aggregate (`distrai.protocol.sync`); the refusal names it.

Pure: the caller reads the reports and the stakes (`distrai.protocol.follow.window_quorum`).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from distrai.protocol.globalmodel import SyncError, SyncUnavailable
from distrai.wire.verdicts import Number
from distrai.wire.window_documents import MinerEntry, WindowReport


def passes(entry: MinerEntry) -> bool:
    """Whether this one line of a report passes the miner's work: every check passed and a score above
    0. How much the aggregate weighs it (`aggregation.accepted_by_rule`, by its measured gain) is not
    a verdict on the work."""
    return entry.reason is None and entry.score > 0


def candidate(entry: MinerEntry) -> bool:
    """Whether one report line makes the miner a candidate of the run's rule
    (`distrai.protocol.aggregation.accepted_by_rule`): it passes the work and its update's measured
    gain is above zero (a line without a measured gain is not)."""
    return passes(entry) and entry.numbers.get(Number.DROP_UNSEEN, 0.0) > 0


def weighted_median(values: Sequence[tuple[float, float]]) -> float:
    """The lower stake-weighted median of (value, stake) pairs (0 for none)."""
    ranked = sorted(values)
    total = sum(stake for _, stake in ranked)
    seen = 0.0
    for value, stake in ranked:
        seen += stake
        if 2 * seen >= total:
            return value
    return 0.0


@dataclass(frozen=True)
class Owed:
    """What the reports say of one miner's place in an aggregate."""

    owed: bool | None
    """owed a place (True), not (False), or still open until the reports out of reach are read (None)"""
    gain: float
    """its gain as the quorum measured it: the stake-weighted median over the lines that make it a candidate"""
    candidate_stake: float
    reporting_stake: float
    """the stake of every report that counts, pending ones included"""


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

    def owed(self, miner: str) -> Owed:
        """Whether `miner` is owed a place in an aggregate (see the module's "No censoring")."""
        yes = pending = reporting = 0.0
        gains = []
        for validator, stake in self.stake.items():
            report = self.reports.get(validator)
            if validator in self.pending:
                pending += stake
            elif report is None:
                continue
            reporting += stake
            entry = None if report is None else report.miners.get(miner)
            if entry is not None and candidate(entry):
                yes += stake
                gains.append((entry.numbers[Number.DROP_UNSEEN], stake))
        surely, possibly = 2 * yes > reporting, 2 * (yes + pending) > reporting
        owed = True if surely else (None if possibly else False)
        return Owed(owed, weighted_median(gains), yes, reporting)

    def check_not_censored(self, accepted: Sequence[str], top_n: int) -> None:
        """Raise `SyncError` when an aggregate taking `accepted` leaves out a miner owed a place
        (module docstring, "No censoring"), `SyncUnavailable` when the reports out of reach could
        decide that."""
        miners = sorted({m for report in self.reports.values() for m in report.miners} - set(accepted))
        places = {m: self.owed(m) for m in miners}
        taken = [place.gain if place.owed is not False else 0.0 for place in map(self.owed, accepted)]
        floor = min(taken) if len(accepted) >= top_n else float("-inf")
        left_out = sorted(
            (m for m, place in places.items() if place.owed is not False and place.gain > floor),
            key=lambda m: (-places[m].gain, m),
        )
        sure = [m for m in left_out if places[m].owed]
        if sure:
            raise SyncError(
                "it leaves out the update"
                + ("s" if len(sure) > 1 else "")
                + " of "
                + ", ".join(
                    f"{m[:10]}… (passed as useful by {places[m].candidate_stake:g} of "
                    f"{places[m].reporting_stake:g} reporting stake, gain {places[m].gain:.4g})"
                    for m in sure
                )
                + (
                    f", and takes only {len(accepted)} of {top_n} places"
                    if len(accepted) < top_n
                    else f", while it takes updates whose gain is as low as {floor:.4g}"
                )
            )
        if left_out:
            waiting = ", ".join(sorted(hk[:10] + "…" for hk in self.pending))
            raise SyncUnavailable(
                f"the reports of {waiting} are out of reach, and their verdicts on {left_out[0][:10]}… "
                "could decide whether the aggregate leaves out an update owed a place"
            )

    def without(self, validators: Iterable[str]) -> Quorum:
        """The quorum without the reports and stake of `validators` (aggregators refused on a check
        of their own word, `distrai.protocol.sync`)."""
        gone = set(validators)
        return Quorum(
            stake={v: s for v, s in self.stake.items() if v not in gone},
            reports={v: r for v, r in self.reports.items() if v not in gone},
            pending=self.pending - gone,
        )

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
