"""The client's side of the link: bandwidth pacing and capped streaming.

A `TokenBucket` paces bytes to a rate, so a store on a local disk or a local S3 server can behave
like a consumer internet link. `copy_stream` moves bytes from one file object to another in chunks,
paced, and refuses to move more than a cap: a store never reads past the size a caller allowed.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import BinaryIO, Protocol

from distrai.store.base import StoreError, TooLarge

CHUNK_BYTES = 256 * 1024
DEFAULT_BURST_S = 0.1


class TokenBucket:
    """Paces a byte stream to `rate_bytes_per_s`; thread-safe.

    The bucket holds at most `burst_bytes` (by default a tenth of a second's worth), which pass at
    once; it starts full. So N bytes take at least (N - burst_bytes) / rate seconds, however they are
    split into requests. A request larger than the bucket is allowed and waits longer: the bucket
    goes into debt.
    """

    def __init__(
        self,
        rate_bytes_per_s: float,
        burst_bytes: float | None = None,
        *,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        if not rate_bytes_per_s > 0:
            raise ValueError(
                f"bandwidth must be a positive number of bytes per second, got {rate_bytes_per_s}"
            )
        burst = rate_bytes_per_s * DEFAULT_BURST_S if burst_bytes is None else burst_bytes
        if burst < 0:
            raise ValueError(f"burst_bytes must not be negative, got {burst_bytes}")
        self.rate_bytes_per_s = float(rate_bytes_per_s)
        self.burst_bytes = float(burst)
        self._burst_s = burst / self.rate_bytes_per_s
        self._clock = clock
        self._sleep = sleep
        self._lock = threading.Lock()
        self._paid_until = clock() - self._burst_s

    def reserve(self, n_bytes: int) -> float:
        """Book `n_bytes` of the link; returns how many seconds the caller must wait before sending."""
        if n_bytes <= 0:
            return 0.0
        with self._lock:
            now = self._clock()
            start = max(self._paid_until, now - self._burst_s)
            self._paid_until = start + n_bytes / self.rate_bytes_per_s
            return max(0.0, self._paid_until - now)

    def consume(self, n_bytes: int) -> None:
        """Wait until `n_bytes` may pass. Non-positive amounts (a rewound stream) pass freely."""
        wait = self.reserve(n_bytes)
        if wait > 0:
            self._sleep(wait)


@dataclass(frozen=True)
class Bandwidth:
    """Upload and download pacing of one store client; `None` in a direction means unlimited."""

    upload: TokenBucket | None = None
    download: TokenBucket | None = None

    @classmethod
    def limited(cls, bytes_per_s: float | None) -> Bandwidth:
        """The same limit in each direction, each with its own bucket (links are full duplex)."""
        if bytes_per_s is None:
            return cls()
        return cls(upload=TokenBucket(bytes_per_s), download=TokenBucket(bytes_per_s))

    def sent(self, n_bytes: int) -> None:
        if self.upload is not None:
            self.upload.consume(n_bytes)

    def received(self, n_bytes: int) -> None:
        if self.download is not None:
            self.download.consume(n_bytes)


def check_max_bytes(max_bytes: int) -> int:
    """A read cap must be a whole number of bytes, zero or more."""
    if isinstance(max_bytes, bool) or not isinstance(max_bytes, int) or max_bytes < 0:
        raise StoreError(f"max_bytes must be a non-negative integer, got {max_bytes!r}")
    return max_bytes


class Readable(Protocol):
    def read(self, size: int = -1, /) -> bytes: ...


def copy_stream(
    source: Readable,
    sink: BinaryIO,
    *,
    max_bytes: int | None,
    pace: Callable[[int], None],
    what: str,
) -> int:
    """Copy `source` to `sink` in chunks, calling `pace` per chunk; returns the byte count.

    Raises `TooLarge` (naming `what`) as soon as more than `max_bytes` have come, having read at
    most one byte past the cap.
    """
    total = 0
    while True:
        want = CHUNK_BYTES if max_bytes is None else min(CHUNK_BYTES, max_bytes - total + 1)
        chunk = source.read(want)
        if not chunk:
            return total
        total += len(chunk)
        if max_bytes is not None and total > max_bytes:
            raise TooLarge(f"{what} is larger than the limit of {max_bytes} bytes")
        pace(len(chunk))
        sink.write(chunk)
