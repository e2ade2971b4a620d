"""A challenged miner's revealed data that failed a check, and a reveal that could not be read.

A committed object can fail to arrive in two ways. It was not in the miner's store at the reveal
deadline (or was not what its hash says): the miner did not reveal it, which is fraud for a miner
that was challenged. Or the store did not answer (an error other than "not found"): the object may
be there, so the validator tries again until its read patience runs out (`windows.read_patience`);
what is still unread then is settled by `validators.withheld`: withheld (fraud) for a challenged
miner, absent for one nobody challenged, and nothing against anyone when the validator could not
reach most stores (its own link was down).
"""

from __future__ import annotations

from distrai.store import StoreError
from distrai.store.base import IntegrityError, NotFound, TooLarge
from distrai.wire.verdicts import Check


class Refused(Exception):
    """A challenged miner's revealed data failed a check; the message says which and why.
    `unread`: the store did not answer, so the check is tried again before anything is decided."""

    def __init__(self, check: Check, why: str, fraud: bool = True, unread: bool = False):
        super().__init__(why)
        self.check = check
        self.why = why
        self.fraud = fraud and not unread
        self.unread = unread


def answered(exc: StoreError) -> bool:
    """Whether a failed read is the store's answer about the object (absent, too large, not what
    its hash says) rather than a store that did not answer."""
    return isinstance(exc, NotFound | IntegrityError | TooLarge)


def not_read(check: Check, what: str, exc: StoreError) -> Refused:
    """A reveal that could not be read: absent at the deadline (hiding, fraud), or unread because
    the store did not answer (tried again; `validators.withheld` settles it)."""
    if answered(exc):
        return Refused(check, f"{what} was not revealed: {exc}")
    return Refused(check, f"{what} could not be read from the miner's store: {exc}", unread=True)
