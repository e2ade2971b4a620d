"""Retries with exponential backoff and jitter, for transient errors only.

The policy is plain data and `backoff_delay` is a pure function of it; `call_with_retries` is the
one loop that both stores run their operations through, each with its own `is_transient` test.
"""

from __future__ import annotations

import logging
import random
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TypeVar

from distrai.store.outage import OutageLog

log = logging.getLogger(__name__)

T = TypeVar("T")


@dataclass(frozen=True)
class RetryPolicy:
    """How many times to try an operation, and how long to wait between tries.

    `attempts` counts every try, the first included (1 = never retry). The wait before retry `i`
    (0-based) is `min(max_delay_s, base_delay_s * 2**i)`, shortened by a random fraction of at
    most `jitter` so that many clients that failed together do not retry together.
    """

    attempts: int = 5
    base_delay_s: float = 0.25
    max_delay_s: float = 8.0
    jitter: float = 0.5

    def __post_init__(self) -> None:
        if self.attempts < 1:
            raise ValueError(f"RetryPolicy.attempts must be at least 1, got {self.attempts}")
        if not 0 <= self.base_delay_s <= self.max_delay_s:
            raise ValueError(
                f"RetryPolicy needs 0 <= base_delay_s <= max_delay_s, got {self.base_delay_s} and {self.max_delay_s}"
            )
        if not 0 <= self.jitter <= 1:
            raise ValueError(f"RetryPolicy.jitter must be in [0, 1], got {self.jitter}")


def backoff_delay(policy: RetryPolicy, retry_index: int, unit_random: float) -> float:
    """Seconds to wait before retry `retry_index` (0-based), given a random number in [0, 1)."""
    ceiling = min(policy.max_delay_s, policy.base_delay_s * 2.0 ** min(retry_index, 64))
    return ceiling * (1.0 - policy.jitter * unit_random)


def call_with_retries(
    operation: Callable[[], T],
    *,
    policy: RetryPolicy,
    is_transient: Callable[[BaseException], bool],
    describe: str,
    rng: random.Random | None = None,
    sleep: Callable[[float], None] = time.sleep,
    outages: OutageLog | None = None,
    subject: str = "",
) -> T:
    """Run `operation`; on an error that `is_transient` accepts, wait and try again.

    A permanent error, or the last transient one once the attempts are spent, propagates unchanged.
    Every retry is logged at debug level, naming `describe`, the error and the wait; a line a try at
    warning level would repeat every fraction of a second while a store refuses connections. What an
    operator reads instead comes from `outages` (the store's own log, under `subject`, its name): one
    warning when a try first fails transiently, one when the store answers again (any answer, a
    refusal included), with how long it was out of reach and how many tries failed.
    """
    rng = rng or random.Random()
    for retry_index in range(policy.attempts):
        try:
            result = operation()
        except Exception as error:
            if not is_transient(error):
                if outages is not None:
                    outages.answered(subject)
                raise
            if outages is not None:
                outages.failed(subject, f"{describe} failed ({type(error).__name__}: {error})")
            if retry_index == policy.attempts - 1:
                raise
            delay = backoff_delay(policy, retry_index, rng.random())
            log.debug(
                "%s failed (%s: %s); retry %d of %d in %.2f s",
                describe,
                type(error).__name__,
                error,
                retry_index + 1,
                policy.attempts - 1,
                delay,
            )
            sleep(delay)
        else:
            if outages is not None:
                outages.answered(subject)
            return result
    raise AssertionError("unreachable: the last try returns or raises")


@dataclass(frozen=True)
class StoreRetries:
    """How one store retries: its policy, and its outage log under its name (`subject`)."""

    policy: RetryPolicy
    outages: OutageLog
    subject: str

    def call(
        self, operation: Callable[[], T], is_transient: Callable[[BaseException], bool], describe: str
    ) -> T:
        return call_with_retries(
            operation,
            policy=self.policy,
            is_transient=is_transient,
            describe=describe,
            outages=self.outages,
            subject=self.subject,
        )
