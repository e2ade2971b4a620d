"""The outage log (`distrai.store.outage`): one line when an outage starts, one when it ends."""

from __future__ import annotations

import logging

from distrai.store.outage import OutageLog


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def outage_log() -> tuple[OutageLog, Clock, list[str]]:
    lines: list[str] = []

    class Keep(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            lines.append(record.getMessage())

    logger = logging.getLogger("test.outage")
    logger.handlers = [Keep()]
    logger.propagate = False
    clock = Clock()
    return OutageLog(logger, clock), clock, lines


def test_an_outage_is_logged_once_when_it_starts_and_once_when_it_ends_with_its_duration():
    outages, clock, lines = outage_log()
    assert outages.failed("the store file:///s", OSError("ELOOP")) is True
    for _ in range(29):
        clock.now += 1.0
        assert outages.failed("the store file:///s", OSError("ELOOP")) is False
    clock.now += 1.5
    assert outages.answered("the store file:///s") == 30.5
    assert lines == [
        "the store file:///s is out of reach: ELOOP; trying again, quietly until it answers",
        "the store file:///s answered again after 30.5 s out of reach (30 failed tries)",
    ]


def test_an_answer_without_an_outage_says_nothing():
    outages, _, lines = outage_log()
    assert outages.answered("the store") is None
    assert outages.gave_up("the store", "the deadline passed") is None
    assert lines == []


def test_outages_of_different_things_are_kept_apart_and_a_new_one_starts_after_the_end():
    outages, clock, lines = outage_log()
    outages.failed("a", "down")
    clock.now += 2.0
    outages.failed("b", "down")
    clock.now += 1.0
    assert outages.gave_up("a", "its deadline passed") == 3.0
    assert outages.failed("b", "down") is False
    assert outages.failed("a", "down again") is True
    assert lines == [
        "a is out of reach: down; trying again, quietly until it answers",
        "b is out of reach: down; trying again, quietly until it answers",
        "a not tried any more (its deadline passed) after 3.0 s out of reach (1 failed try)",
        "a is out of reach: down again; trying again, quietly until it answers",
    ]
