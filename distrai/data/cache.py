"""A node's local copy of the shards it uses: fetched when first needed, checked, memory-mapped.

A shard is fetched from the data store into `<folder>/<sha256>.bin` (the store writes it by temp
file and rename, so a crash leaves no partial file under that name), then its size and SHA-256 are
checked before the first use in each process. A cached file that fails the check (truncated, or
changed on disk) is deleted and fetched again; a fetched one that fails is deleted and refused with
`ShardError`, as is one the store does not hold. Nothing unchecked is ever read.

At most `open_limit` shards are mapped at once (least recently used unmapped first), so the pages
a node keeps resident stay bounded however much of the dataset it has cached on disk.
"""

from __future__ import annotations

import hashlib
import logging
import threading
from collections import OrderedDict
from pathlib import Path

import numpy as np

from distrai.data.manifest import ShardEntry
from distrai.store import Store
from distrai.store.base import NotFound, StoreError, blob_key

log = logging.getLogger("distrai.data")
HASH_CHUNK = 1 << 22


class ShardError(RuntimeError):
    """A shard that cannot be had: missing from the store, or not the bytes its manifest names."""


def file_sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(HASH_CHUNK):
            digest.update(chunk)
    return digest.hexdigest()


class ShardCache:
    def __init__(self, store: Store, folder: Path, dtype: str, open_limit: int = 32):
        self.store = store
        self.folder = Path(folder)
        self.dtype = np.dtype(dtype).newbyteorder("<")
        self.open_limit = open_limit
        self._open: OrderedDict[str, np.memmap] = OrderedDict()
        self._checked: set[str] = set()
        self._lock = threading.Lock()
        self.fetched_bytes = 0

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
        try:
            self.store.get_file(blob_key(shard.sha256), path, max_bytes=size)
        except NotFound:
            raise ShardError(
                f"{what} ({shard.sha256}) is missing from the data store {self.store.url}"
            ) from None
        except StoreError as exc:
            raise ShardError(f"{what} ({shard.sha256}) could not be fetched: {exc}") from None
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
