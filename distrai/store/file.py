"""The file store: keys are files under a root directory, on a local or a shared network disk.

Every write goes to a temp file in the key's own directory, is fsynced and then renamed over the
key with `os.replace`, which is atomic on POSIX: readers in any process see the old value or the
new one, never a part; of two writers of one key, one complete value wins. Temp file names end in
`~tmp`, a character no key may hold, so they are never listed or mistaken for keys. A temp file that
a failed write could not remove (its store went away mid-write) is removed once the store answers
again; a node's own store is swept of the temp files of writers that died mid-write when it is
opened (`temps.sweep`).

A key cannot be both a value and a directory of other keys here (`a` and `a/b`); such a write is
refused with a `StoreError`.
"""

from __future__ import annotations

import contextlib
import errno
import io
import logging
import os
import stat
import threading
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO, ClassVar, TypeVar
from urllib.parse import unquote, urlsplit

from distrai.store.base import NotFound, Store, StoreError, TooLarge, Unreachable, check_key
from distrai.store.outage import OutageLog
from distrai.store.retry import RetryPolicy, StoreRetries
from distrai.store.temps import sweep, temp_path
from distrai.store.throttle import Bandwidth, check_max_bytes, copy_stream
from distrai.store.timeouts import StoreTimeouts

T = TypeVar("T")

log = logging.getLogger("distrai.store")
UNSYNCABLE_DIRECTORY_ERRNOS = frozenset({errno.EINVAL, errno.ENOTSUP, errno.EBADF})
TRANSIENT_ERRNOS = frozenset({errno.EAGAIN, errno.EBUSY, errno.ETIMEDOUT, errno.ESTALE, errno.EIO})


def is_transient_os_error(error: BaseException) -> bool:
    """Errors worth retrying on a (network) disk: busy, timed out, stale handle, I/O hiccup."""
    return isinstance(error, OSError) and error.errno in TRANSIENT_ERRNOS


def is_key(name: str) -> bool:
    try:
        check_key(name)
    except StoreError:
        return False
    return True


def fsync_directory(directory: Path) -> None:
    """Make a rename in `directory` durable, where the file system can sync a directory at all."""
    fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    except OSError as error:
        if error.errno not in UNSYNCABLE_DIRECTORY_ERRNOS:
            raise
    finally:
        os.close(fd)


def write_atomically(
    path: Path, fill: Callable[[BinaryIO], object], left_over: Callable[[Path], None] | None = None
) -> None:
    """Create or replace `path` all or nothing: `fill` a temp file beside it, fsync, rename.

    On any failure the temp file is removed and `path` is untouched; a temp file that cannot be
    removed then (its folder went out of reach) is handed to `left_over`, and the failure raised is
    the write's.
    """
    path.parent.mkdir(parents=True, exist_ok=True)
    temp = temp_path(path)
    fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)
    try:
        with os.fdopen(fd, "wb") as out:
            fill(out)
            out.flush()
            os.fsync(out.fileno())
        os.replace(temp, path)
    except BaseException:
        try:
            os.unlink(temp)
        except FileNotFoundError:
            pass
        except OSError:
            if left_over is not None:
                left_over(temp)
        raise
    fsync_directory(path.parent)


def file_path(url: str) -> str:
    """The directory of a `file://` URL or a plain path."""
    if not url:
        raise StoreError("empty store URL: give a directory, file:///absolute/path or s3://bucket/prefix")
    parts = urlsplit(url)
    if parts.scheme == "":
        return url
    if parts.netloc not in ("", "localhost") or not parts.path.startswith("/"):
        raise StoreError(f"invalid file URL {url!r}: use file:///absolute/path (three slashes)")
    if parts.query or parts.fragment:
        raise StoreError(f"invalid file URL {url!r}: a file URL takes no query or fragment")
    return unquote(parts.path)


@dataclass(frozen=True)
class FileConfig:
    """Where a file store lives: its directory, from a `file:///absolute/path` URL or a plain path
    (relative to the working folder). It takes no other setting (`SETTINGS` is empty)."""

    directory: str

    SETTINGS: ClassVar[Mapping[str, str]] = {}
    """the settings `open_store` may give by name, each to its field: none"""

    @classmethod
    def from_url(cls, url: str) -> FileConfig:
        return cls(file_path(url))

    @property
    def url(self) -> str:
        return Path(self.directory).absolute().as_uri()

    def open(
        self,
        *,
        bandwidth_bytes_per_s: float | None = None,
        retry: RetryPolicy | None = None,
        create: bool = True,
        timeouts: StoreTimeouts | None = None,
    ) -> FileStore:
        """The store; `timeouts` (an S3 store's network timeouts) have nothing to bound here."""
        return FileStore(
            self.directory, bandwidth_bytes_per_s=bandwidth_bytes_per_s, retry=retry, create=create
        )


class FileStore(Store):
    """A `Store` in the directory `root` (created if missing)."""

    def __init__(
        self,
        root: Path | str,
        *,
        bandwidth_bytes_per_s: float | None = None,
        retry: RetryPolicy | None = None,
        create: bool = True,
    ) -> None:
        """`create`: make the folder now (a node's own store); a node that only reads another's store
        leaves it alone, so that a store that is gone lists as gone, not as empty."""
        self.root = Path(root).absolute()
        self._left_over: set[Path] = set()
        self._lock = threading.Lock()
        if create:
            with contextlib.suppress(OSError):  # unreachable now (an outage): every operation says so
                self.root.mkdir(parents=True, exist_ok=True)
            if removed := sweep(self.root):
                log.info(
                    "%d temp files of interrupted writes removed from the store %s", len(removed), self.root
                )
        self.url = self.root.as_uri()
        self._bandwidth = Bandwidth.limited(bandwidth_bytes_per_s)
        self._retries = StoreRetries(retry or RetryPolicy(), OutageLog(log), f"the store {self.url}")
        """this store's outages are said once when a try first fails and once when it answers again"""

    def __repr__(self) -> str:
        return f"FileStore({str(self.root)!r})"

    def put(self, key: str, data: bytes) -> None:
        path = self._path(key)
        self._run(f"put {key!r}", lambda: self._write(path, key, io.BytesIO(data)))

    def get(self, key: str, max_bytes: int) -> bytes:
        path, max_bytes = self._path(key), check_max_bytes(max_bytes)

        def read() -> bytes:
            buffer = io.BytesIO()
            with self._open_for_read(path, key, max_bytes) as source:
                copy_stream(
                    source, buffer, max_bytes=max_bytes, pace=self._bandwidth.received, what=self._what(key)
                )
            return buffer.getvalue()

        return self._run(f"get {key!r}", read)

    def exists(self, key: str) -> bool:
        """Whether `key` is there; a store that cannot be read raises, as every other operation does
        (`Path.is_file` would answer False through an outage)."""
        path = self._path(key)

        def regular_file() -> bool:
            try:
                return stat.S_ISREG(os.stat(path).st_mode)
            except (FileNotFoundError, NotADirectoryError):
                return False

        return self._run(f"exists {key!r}", regular_file)

    def list(self, prefix: str = "") -> list[str]:
        directory = prefix.rpartition("/")[0]
        if directory and not is_key(directory):
            return []
        return self._run(f"list {prefix!r}", lambda: sorted(self._walk(directory, prefix)))

    def delete(self, key: str) -> None:
        path = self._path(key)

        def remove() -> None:
            with contextlib.suppress(FileNotFoundError, IsADirectoryError, NotADirectoryError):
                os.unlink(path)

        self._run(f"delete {key!r}", remove)

    def put_file(self, key: str, path: Path, *, progress: Callable[[int], None] | None = None) -> None:
        """`progress` gets the bytes copied so far, per chunk (from 0 again if a try is retried)."""
        target = self._path(key)

        def upload() -> None:
            sent = 0

            def pace(n_bytes: int) -> None:
                nonlocal sent
                self._bandwidth.sent(n_bytes)
                sent += n_bytes
                if progress is not None:
                    progress(sent)

            with open(path, "rb") as source:
                self._write(target, key, source, pace=pace)

        self._run(f"put_file {key!r}", upload)

    def get_file(self, key: str, path: Path, max_bytes: int) -> None:
        source_path, max_bytes, target = self._path(key), check_max_bytes(max_bytes), Path(path)

        def download() -> None:
            with self._open_for_read(source_path, key, max_bytes) as source:
                write_atomically(
                    target,
                    lambda out: copy_stream(
                        source, out, max_bytes=max_bytes, pace=self._bandwidth.received, what=self._what(key)
                    ),
                )

        self._run(f"get_file {key!r}", download)

    def _path(self, key: str) -> Path:
        return self.root / check_key(key)

    def _what(self, key: str) -> str:
        return f"{key!r} in {self.url}"

    def _run(self, describe: str, operation: Callable[[], T]) -> T:
        """Run with retries; an OS error that is left becomes a `StoreError` naming the key
        (`Unreachable` when it is a transient one: the retries were spent on an outage)."""
        try:
            result = self._retries.call(operation, is_transient_os_error, describe)
        except OSError as error:
            failed = Unreachable if is_transient_os_error(error) else StoreError
            raise failed(f"file store {describe} in {self.url} failed: {error}") from error
        if self._left_over:
            self._remove_left_over()
        return result

    def _keep_left_over(self, temp: Path) -> None:
        with self._lock:
            self._left_over.add(temp)

    def _remove_left_over(self) -> None:
        """Remove the temp files that failed writes could not, now that the store answers."""
        with self._lock:
            for temp in sorted(self._left_over):
                try:
                    os.unlink(temp)
                except FileNotFoundError:
                    pass
                except OSError:
                    continue
                self._left_over.discard(temp)

    def _write(
        self, path: Path, key: str, source: BinaryIO, pace: Callable[[int], None] | None = None
    ) -> None:
        """Write `source` to `path` atomically, naming a clash between a key and a directory."""
        try:
            write_atomically(
                path,
                lambda out: copy_stream(
                    source, out, max_bytes=None, pace=pace or self._bandwidth.sent, what=self._what(key)
                ),
                self._keep_left_over,
            )
        except (FileExistsError, NotADirectoryError) as error:
            raise StoreError(
                f"cannot write {key!r} in {self.url}: a part of its path is already a key"
            ) from error
        except IsADirectoryError as error:
            raise StoreError(
                f"cannot write {key!r} in {self.url}: it is already a directory of other keys"
            ) from error

    @contextlib.contextmanager
    def _open_for_read(self, path: Path, key: str, max_bytes: int) -> Iterator[BinaryIO]:
        """Open `key` for reading after checking that it is a file that fits under `max_bytes`."""
        try:
            fd = os.open(path, os.O_RDONLY)
        except (FileNotFoundError, NotADirectoryError) as error:
            raise NotFound(f"no key {key!r} in {self.url}") from error
        with os.fdopen(fd, "rb") as source:
            status = os.fstat(fd)
            if not stat.S_ISREG(status.st_mode):
                raise NotFound(f"no key {key!r} in {self.url}: it is a directory of other keys")
            if status.st_size > max_bytes:
                raise TooLarge(f"{self._what(key)} is {status.st_size} bytes, over the limit of {max_bytes}")
            yield source

    def _walk(self, directory: str, prefix: str) -> Iterator[str]:
        os.stat(self.root)  # a store whose root cannot be reached lists as an error, not as empty
        start = self.root / directory if directory else self.root
        for folder, _, files in os.walk(start):
            relative = Path(folder).relative_to(self.root).as_posix()
            base = "" if relative == "." else relative + "/"
            for name in files:
                key = base + name
                if key.startswith(prefix) and is_key(key):
                    yield key
