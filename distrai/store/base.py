"""The `Store` interface: bytes under keys, in a directory or an S3 bucket.

Keys are `/`-separated relative paths of letters, digits and `._-` (no `..`, no leading `/`).
Content-addressed blobs live under `blobs/<sha256 hex>`; reading one checks its hash.
"""

from __future__ import annotations

import hashlib
import re
from abc import ABC, abstractmethod
from collections.abc import Callable
from pathlib import Path

KEY_PATTERN = re.compile(r"^[A-Za-z0-9._-]+(/[A-Za-z0-9._-]+)*$")
BLOB_PREFIX = "blobs/"


class StoreError(Exception):
    """A store operation failed for a reason named in the message."""


class NotFound(StoreError):
    pass


class TooLarge(StoreError):
    pass


class IntegrityError(StoreError):
    """A content-addressed blob did not hash to its key."""


class Unreachable(StoreError):
    """The store did not answer: the operation's last try failed with a transient error (an outage,
    a timeout, a server error), after the retries its policy allows."""


def check_key(key: str) -> str:
    if not KEY_PATTERN.fullmatch(key) or any(part in (".", "..") for part in key.split("/")):
        raise StoreError(f"invalid store key {key!r}: use `/`-separated names of letters, digits and ._-")
    return key


def sha256_hex(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def blob_key(digest: str) -> str:
    if not re.fullmatch(r"[0-9a-f]{64}", digest):
        raise StoreError(f"invalid blob digest {digest!r}: expected 64 lowercase hex characters")
    return BLOB_PREFIX + digest


class Store(ABC):
    """Bytes under keys. Every read has a size cap; writes are atomic (all or nothing)."""

    url: str

    @abstractmethod
    def put(self, key: str, data: bytes) -> None: ...

    @abstractmethod
    def get(self, key: str, max_bytes: int) -> bytes:
        """The bytes under `key`; `NotFound` if absent, `TooLarge` if over `max_bytes`."""

    @abstractmethod
    def exists(self, key: str) -> bool: ...

    @abstractmethod
    def list(self, prefix: str = "") -> list[str]:
        """Every key that starts with `prefix`, sorted."""

    @abstractmethod
    def delete(self, key: str) -> None:
        """Remove `key`; removing an absent key is not an error."""

    @abstractmethod
    def put_file(self, key: str, path: Path, *, progress: Callable[[int], None] | None = None) -> None:
        """Stream a local file to `key` without reading it all into memory.

        `progress`, if given, is called now and then with how many of the file's bytes are sent.
        """

    @abstractmethod
    def get_file(self, key: str, path: Path, max_bytes: int) -> None:
        """Stream `key` into a local file; on any failure no partial file is left at `path`."""

    def put_blob(self, data: bytes) -> str:
        """Store `data` content-addressed; returns its sha256 hex digest."""
        digest = sha256_hex(data)
        key = blob_key(digest)
        if not self.exists(key):
            self.put(key, data)
        return digest

    def get_blob(self, digest: str, max_bytes: int) -> bytes:
        data = self.get(blob_key(digest), max_bytes)
        actual = sha256_hex(data)
        if actual != digest:
            raise IntegrityError(f"blob {digest} hashes to {actual}")
        return data
