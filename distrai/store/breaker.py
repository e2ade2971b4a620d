"""Within one pass of reads, a store that gave up in an outage is not waited on again.

A node that reads many objects from a store one after another (a validator reading every miner's
reveal) would spend each object's retries in turn when the store is out: one short outage then
holds the whole pass for the retries of every object on it. `PassBreaker` notes, during a pass
(`one_pass`), the stores on which an operation ended `Unreachable` (its retries spent on
transient errors), and `PassBreaker.guard` wraps a store so that, for the rest of that pass, every
operation on a noted store fails at once with `Unreachable`: the outcome the operation would have
reached after its own retries. The next pass asks every store afresh; outside a pass the guard only
passes operations through.

A store is noted under its identity, its `url` (the directory, or the bucket and prefix with the
endpoint, region and addressing), never for the pass as a whole: a store that fails stops only the
reads of that store, so a miner that fails its own store cannot make a reader skip the objects of
another store. Two URLs that name one store under different spellings are two identities, which
costs at most the retries of each.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TypeVar

from distrai.store.base import Store, Unreachable

T = TypeVar("T")


class PassBreaker:
    """The stores that gave up in an outage during the pass under way (no I/O here)."""

    def __init__(self) -> None:
        self._down: dict[str, str] | None = None
        """store identity → the error it gave up with, while a pass is under way; None between passes"""
        self._lock = threading.Lock()

    @contextlib.contextmanager
    def one_pass(self) -> Iterator[None]:
        """A pass of reads: every store starts it answerable, and is again after it."""
        with self._lock:
            if self._down is not None:
                raise RuntimeError("a pass of reads is already under way")
            self._down = {}
        try:
            yield
        finally:
            with self._lock:
                self._down = None

    def refusal(self, identity: str) -> str | None:
        """Why `identity` is not asked again in this pass, or None when it may be asked."""
        with self._lock:
            return None if self._down is None else self._down.get(identity)

    def gave_up(self, identity: str, error: Unreachable) -> None:
        """Note that an operation on `identity` spent its retries in an outage (kept for the pass)."""
        with self._lock:
            if self._down is not None:
                self._down.setdefault(identity, str(error))

    def guard(self, store: Store) -> Store:
        """`store`, its operations refused at once in a pass after one of them gave up in an outage."""
        return GuardedStore(store, self)


class GuardedStore(Store):
    """A store whose operations go through a `PassBreaker` (see the module's notes)."""

    def __init__(self, store: Store, breaker: PassBreaker) -> None:
        self.store = store
        self.breaker = breaker
        self.url = store.url

    def __repr__(self) -> str:
        return f"GuardedStore({self.store!r})"

    def _ask(self, describe: str, operation: Callable[[], T]) -> T:
        why = self.breaker.refusal(self.url)
        if why is not None:
            raise Unreachable(
                f"{describe} in {self.url} not tried: the store gave up in an outage earlier in this pass ({why})"
            )
        try:
            return operation()
        except Unreachable as error:
            self.breaker.gave_up(self.url, error)
            raise

    def put(self, key: str, data: bytes) -> None:
        self._ask(f"put {key!r}", lambda: self.store.put(key, data))

    def get(self, key: str, max_bytes: int) -> bytes:
        return self._ask(f"get {key!r}", lambda: self.store.get(key, max_bytes))

    def exists(self, key: str) -> bool:
        return self._ask(f"exists {key!r}", lambda: self.store.exists(key))

    def list(self, prefix: str = "") -> list[str]:
        return self._ask(f"list {prefix!r}", lambda: self.store.list(prefix))

    def delete(self, key: str) -> None:
        self._ask(f"delete {key!r}", lambda: self.store.delete(key))

    def put_file(self, key: str, path: Path, *, progress: Callable[[int], None] | None = None) -> None:
        self._ask(f"put_file {key!r}", lambda: self.store.put_file(key, path, progress=progress))

    def get_file(self, key: str, path: Path, max_bytes: int) -> None:
        self._ask(f"get_file {key!r}", lambda: self.store.get_file(key, path, max_bytes))
