"""The report quorum weighs the signed reports of a window by stake: an update is refused when the
reports that fail it hold at least as much stake as those that pass it; silence abstains; a report
out of reach that could tip the decision makes it wait."""

from __future__ import annotations

import pytest

from distrai.protocol.globalmodel import SyncError, SyncUnavailable
from distrai.protocol.quorum import Quorum, passes
from distrai.wire.window_documents import MinerEntry, WindowReport

RUN = "ab" * 32
MINER, OTHER = "5" + "M" * 47, "5" + "N" * 47
A, B, C = ("5" + c * 47 for c in "ABC")


def entry(score: float, reason: str | None = None) -> MinerEntry:
    return MinerEntry(uid=1, verdicts={}, numbers={}, score=score, reason=reason)


PASS, FAIL = entry(0.9), entry(0.0, "useful: the update does not lower the loss on its own data")


def report(validator: str, lines: dict[str, MinerEntry]) -> WindowReport:
    return WindowReport(
        run_id=RUN, window=3, validator=validator, observed_block=100, miners=lines, refused=[]
    )


def quorum(stake: dict[str, float], lines: dict[str, MinerEntry | None], pending=()) -> Quorum:
    """Each validator's report with its line on MINER (None: a report without one)."""
    return Quorum(
        stake=stake,
        reports={v: report(v, {} if line is None else {MINER: line}) for v, line in lines.items()},
        pending=frozenset(pending),
    )


def test_a_line_passes_when_the_rule_would_take_it_alone():
    assert passes(PASS)
    assert not passes(FAIL)
    assert not passes(entry(0.0))  # every check passed, but nothing to weigh
    assert not passes(entry(0.5, "replay: differs"))


@pytest.mark.parametrize(
    ("stake", "lines", "refused"),
    [
        ({A: 3.0, B: 2.0}, {A: PASS, B: FAIL}, False),
        ({A: 2.0, B: 3.0}, {A: PASS, B: FAIL}, True),
        ({A: 2.0, B: 2.0}, {A: PASS, B: FAIL}, True),  # ties refuse
        ({A: 2.0, B: 1.5, C: 1.5}, {A: PASS, B: FAIL, C: FAIL}, True),
        ({A: 2.0, B: 3.0}, {A: PASS}, False),  # B published no report: it abstains
        ({A: 2.0, B: 3.0}, {A: PASS, B: None}, False),  # B has no line for the miner: it abstains
        ({A: 0.0}, {A: PASS}, False),  # nobody failed it
    ],
)
def test_the_failing_stake_must_stay_below_the_passing_stake(stake, lines, refused):
    q = quorum(stake, lines)
    if refused:
        with pytest.raises(SyncError, match="which the signed reports of validators holding") as caught:
            q.check([MINER])
        assert not isinstance(caught.value, SyncUnavailable)
    else:
        q.check([MINER])


def test_the_refusal_names_the_failing_validators_and_both_stakes():
    q = quorum({A: 3000.0, B: 2000.0, C: 2000.0}, {A: PASS, B: FAIL, C: FAIL})
    with pytest.raises(SyncError) as caught:
        q.check([MINER])
    assert f"{MINER[:10]}…" in str(caught.value)
    assert f"holding 4000 stake failed ({B[:10]}…, {C[:10]}…) against 3000 that passed it" in str(
        caught.value
    )


def test_every_accepted_update_is_weighed():
    q = Quorum(
        stake={A: 3.0, B: 2.0},
        reports={A: report(A, {MINER: PASS, OTHER: PASS}), B: report(B, {MINER: PASS, OTHER: FAIL})},
    )
    q.check([MINER])
    q.check([MINER, OTHER])
    q = Quorum(stake={A: 2.0, B: 3.0}, reports=q.reports)
    with pytest.raises(SyncError, match=OTHER[:10]):
        q.check([MINER, OTHER])


def test_a_report_out_of_reach_is_waited_for_only_when_it_could_tip_the_decision():
    with pytest.raises(SyncUnavailable, match=C[:10]):
        quorum({A: 3.0, B: 2.0, C: 2.0}, {A: PASS, B: FAIL}, pending=[C]).check([MINER])
    quorum({A: 5.0, B: 1.0, C: 2.0}, {A: PASS, B: FAIL}, pending=[C]).check([MINER])
    with pytest.raises(SyncError) as caught:
        quorum({A: 1.0, B: 5.0, C: 2.0}, {A: PASS, B: FAIL}, pending=[C]).check([MINER])
    assert not isinstance(caught.value, SyncUnavailable)


def test_stake_without_a_permit_does_not_count():
    q = Quorum(stake={A: 3.0}, reports={A: report(A, {MINER: PASS}), B: report(B, {MINER: FAIL})})
    assert q.tally(MINER).failed == 0.0
    q.check([MINER])


def useful(gain: float | None) -> MinerEntry:
    """A line that passes the work, with its update's measured gain (None: nobody measured it in time)."""
    return MinerEntry(
        uid=1, verdicts={}, numbers={} if gain is None else {"drop_unseen": gain}, score=0.9, reason=None
    )


def lines_on(stake, lines_by_validator, pending=()) -> Quorum:
    return Quorum(
        stake=stake,
        reports={v: report(v, lines) for v, lines in lines_by_validator.items()},
        pending=frozenset(pending),
    )


@pytest.mark.parametrize(
    ("stake", "lines", "owed"),
    [
        ({A: 3.0, B: 2.0, C: 2.0}, {A: FAIL, B: useful(0.1), C: useful(0.1)}, True),
        ({A: 3.0, B: 2.0, C: 2.0}, {A: useful(None), B: useful(0.1), C: FAIL}, False),  # 2 of 7
        ({A: 3.0, B: 2.0}, {A: useful(None), B: useful(0.1)}, False),  # a minority's line owes nothing
        ({A: 3.0, B: 2.0}, {A: useful(0.1), B: None}, True),  # more than half of all the reporting stake
        ({A: 2.0, B: 2.0}, {A: useful(0.1), B: FAIL}, False),  # half is not more than half
        ({A: 3.0, B: 2.0}, {A: useful(-0.1), B: useful(0.1)}, False),  # measured no gain: not a candidate
        (
            {A: 4.0, B: 2.0, C: 1.0},
            {A: FAIL, B: useful(0.1), C: useful(0.1)},
            False,
        ),  # a majority that fails it
    ],
)
def test_an_update_is_owed_a_place_when_more_than_half_the_reporting_stake_makes_it_a_candidate(
    stake, lines, owed
):
    q = lines_on(stake, {v: {} if line is None else {MINER: line} for v, line in lines.items()})
    assert q.owed(MINER).owed is owed
    if owed:
        with pytest.raises(SyncError, match=f"leaves out the update of {MINER[:10]}"):
            q.check_not_censored([], 3)
    else:
        q.check_not_censored([], 3)


def test_a_full_aggregate_may_leave_out_only_smaller_gains():
    stake = {A: 3.0, B: 2.0}
    lines = {MINER: useful(0.2), OTHER: useful(0.1)}
    q = lines_on(stake, {A: lines, B: lines})
    q.check_not_censored([MINER], 1)
    q.check_not_censored([MINER, OTHER], 2)
    with pytest.raises(SyncError, match=f"{MINER[:10]}.*takes updates whose gain is as low as 0.1"):
        q.check_not_censored([OTHER], 1)
    with pytest.raises(SyncError, match="takes only 1 of 2 places"):
        q.check_not_censored([MINER], 2)


def test_a_report_out_of_reach_that_could_owe_a_left_out_update_a_place_is_waited_for():
    q = lines_on({A: 3.0, B: 2.0, C: 2.0}, {A: {MINER: FAIL}, B: {MINER: useful(0.1)}}, pending=[C])
    assert q.owed(MINER).owed is None
    with pytest.raises(SyncUnavailable, match="could decide whether the aggregate leaves out"):
        q.check_not_censored([], 3)
    q.check_not_censored([MINER], 3)


def test_without_drops_a_validators_report_and_stake():
    q = lines_on({A: 3.0, B: 2.0}, {A: {MINER: FAIL}, B: {MINER: useful(0.1)}}, pending=[])
    assert q.owed(MINER).owed is False
    assert q.without([A]).owed(MINER).owed is True
    assert A not in q.without([A]).stake


def test_a_sliver_of_stake_cannot_owe_a_place_to_a_hotkey_nobody_else_reports():
    """A permitted validator with 1 of 5001 stake writes a passing line with a large gain for a hotkey
    no other report has (one that committed nothing): every honest aggregate leaves it out, and none
    is refused for it."""
    fake = "5" + "F" * 47
    q = lines_on(
        {A: 3000.0, B: 2000.0, C: 1.0},
        {A: {MINER: useful(0.1)}, B: {MINER: useful(0.1)}, C: {fake: useful(9.0)}},
    )
    assert q.owed(fake).owed is False
    q.check_not_censored([MINER], 3)
