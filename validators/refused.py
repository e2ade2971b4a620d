"""A challenged miner's revealed data that failed a check, and a reveal that could not be read."""

from __future__ import annotations

from distrai.store import StoreError
from distrai.store.base import IntegrityError, NotFound, TooLarge


class Refused(Exception):
    """A challenged miner's revealed data failed a check; the message says which and why."""

    def __init__(self, check: str, why: str, fraud: bool = True):
        super().__init__(why)
        self.check = check
        self.why = why
        self.fraud = fraud


def not_read(check: str, what: str, exc: StoreError) -> Refused:
    """A reveal that could not be read: absent at the deadline (hiding, fraud), or out of reach
    now because the store failed (the validator's trouble as much as the miner's: not fraud)."""
    if isinstance(exc, NotFound | IntegrityError | TooLarge):
        return Refused(check, f"{what} was not revealed: {exc}")
    return Refused(check, f"{what} could not be read from the miner's store: {exc}", fraud=False)
