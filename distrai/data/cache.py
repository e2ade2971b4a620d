"""A node's local copy of the shards it uses: fetched when first needed, checked, memory-mapped.

A shard is fetched from the data store into `<folder>/<sha256>.bin` (the store writes it by temp
file and rename, so a crash leaves no partial file under that name), then its size and SHA-256 are
checked before the first use in each process. A cached file that fails the check (truncated, or
changed on disk) is deleted and fetched again; a fetched one that fails is deleted and refused with
`ShardError`. A store that cannot be reached, or does not hold the shard, is tried again for
`patience_s` (an outage of the data store pauses the node), then refused with `ShardError` too. The
pauses between tries grow to `MAX_PAUSE_S` and no further, so a node that waited through an outage
goes on within that long of its end: a training miner still commits its window when the outage
ends in time. A reader may set a deadline instead (`give_up_at`, a training miner's stop time): a
fetch then waits for the store until that moment, whatever the patience, and gives up with
`ShardDeadline`. The outage is logged once when it starts and once when it ends (`distrai.store.outage`).
Nothing unchecked is ever read.

At most `open_limit` shards are mapped at once (least recently used unmapped first), so the pages
a node keeps resident stay bounded however much of the dataset it has cached on disk.
"""

from __future__ import annotations

import hashlib
import logging
import threading
import time
from collections import OrderedDict
from pathlib import Path

import numpy as np

from distrai.data.manifest import ShardEntry
from distrai.store import Store
from distrai.store.base import NotFound, StoreError, TooLarge, blob_key
from distrai.store.outage import OutageLog

log = logging.getLogger("distrai.data")
HASH_CHUNK = 1 << 22
PATIENCE_S = 300.0
"""How long a node keeps trying to fetch a shard from a data store it cannot reach."""
FIRST_PAUSE_S = 0.25
MAX_PAUSE_S = 2.0
"""The longest pause between two tries of a shard: how late a node may notice an outage's end."""


def next_pause(pause: float) -> float:
    """The pause after one of `pause` seconds: twice as long, up to `MAX_PAUSE_S`."""
    return min(2 * pause, MAX_PAUSE_S)


class ShardError(RuntimeError):
    """A shard that cannot be had: missing from the store, or not the bytes its manifest names."""


class ShardDeadline(ShardError):
    """A shard still out of reach at the deadline its reader set (`ShardCache.give_up_at`)."""


def file_sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(HASH_CHUNK):
            digest.update(chunk)
    return digest.hexdigest()


class ShardCache:
    def __init__(
        self, store: Store, folder: Path, dtype: str, open_limit: int = 32, patience_s: float = PATIENCE_S
    ):
        self.store = store
        self.patience_s = patience_s
        self.give_up_at: float | None = None
        """a `time.monotonic()` at which a fetch out of reach gives up (`ShardDeadline`), in place of
        `patience_s`: a training miner's stop time, past which the window cannot use the shard, and
        until which it is worth waiting whatever the patience"""
        self.folder = Path(folder)
        self.dtype = np.dtype(dtype).newbyteorder("<")
        self.open_limit = open_limit
        self._open: OrderedDict[str, np.memmap] = OrderedDict()
        self._checked: set[str] = set()
        self._lock = threading.Lock()
        self.fetched_bytes = 0
        self.waited_s = 0.0
        """seconds spent on failed tries and the pauses after them"""
        self.outages = OutageLog(log)

    def path(self, shard: ShardEntry) -> Path:
        return self.folder / f"{shard.sha256}.bin"

    def tokens(self, shard: ShardEntry, what: str) -> np.memmap:
        """The shard's tokens, mapped read-only; `what` names it in errors ("train shard 12")."""
        with self._lock:
            mapped = self._open.get(shard.sha256)
            if mapped is not None:
                self._open.move_to_end(shard.sha256)
                return mapped
            self._ensure(shard, what)
            mapped = np.memmap(self.path(shard), dtype=self.dtype, mode="r", shape=(shard.tokens,))
            self._open[shard.sha256] = mapped
            while len(self._open) > self.open_limit:
                self._open.popitem(last=False)
            return mapped

    def _ensure(self, shard: ShardEntry, what: str) -> None:
        if shard.sha256 in self._checked:
            return
        path = self.path(shard)
        if path.exists():
            problem = self._problem(shard, path)
            if problem is None:
                self._checked.add(shard.sha256)
                return
            log.warning("%s (%s) in the cache %s; fetching it again", what, shard.sha256[:12], problem)
            path.unlink(missing_ok=True)
        self._download(shard, path, what)
        problem = self._problem(shard, path)
        if problem is not None:
            path.unlink(missing_ok=True)
            raise ShardError(f"{what} ({shard.sha256}) from {self.store.url} {problem}")
        self._checked.add(shard.sha256)

    def _download(self, shard: ShardEntry, path: Path, what: str) -> None:
        size = shard.tokens * self.dtype.itemsize
        deadline, pause = time.monotonic() + self.patience_s, FIRST_PAUSE_S
        why, refusal = f"patience of {self.patience_s:.0f} s spent", ShardError
        if self.give_up_at is not None:
            deadline, why, refusal = self.give_up_at, "the deadline its reader set passed", ShardDeadline
        source = f"the data store {self.store.url}"
        while True:
            tried = time.monotonic()
            try:
                self.store.get_file(blob_key(shard.sha256), path, max_bytes=size)
                self.outages.answered(source)
                break
            except TooLarge:
                raise ShardError(
                    f"{what} ({shard.sha256}) in {self.store.url} is larger than {size} bytes"
                ) from None
            except StoreError as exc:
                missing = isinstance(exc, NotFound)
                problem = (
                    f"is missing from the data store {self.store.url}"
                    if missing
                    else f"could not be fetched: {exc}"
                )
                if time.monotonic() + pause > deadline:
                    self.outages.gave_up(source, why)
                    raise refusal(f"{what} ({shard.sha256}) {problem}") from None
                self.outages.failed(source, f"{what} ({shard.sha256[:12]}) {problem}")
                time.sleep(pause)
                pause = next_pause(pause)
                self.waited_s += time.monotonic() - tried
        self.fetched_bytes += size

    def _problem(self, shard: ShardEntry, path: Path) -> str | None:
        """What is wrong with the file at `path`, or None."""
        size, expected = path.stat().st_size, shard.tokens * self.dtype.itemsize
        if size != expected:
            return f"holds {size} bytes, not {expected} (truncated or not this shard)"
        actual = file_sha256(path)
        if actual != shard.sha256:
            return f"hashes to {actual}"
        return None
