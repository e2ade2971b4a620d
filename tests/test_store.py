"""The store contract, run against the file store and the S3 store on a local moto server; plus the
retry policy, the bandwidth limit and `open_store`."""

from __future__ import annotations

import contextlib
import errno
import hashlib
import http.server
import logging
import os
import string
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace
from pathlib import Path

import pytest
from botocore.exceptions import ClientError, EndpointConnectionError, ReadTimeoutError
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from distrai.store import (
    BACKENDS,
    FileConfig,
    FileStore,
    IntegrityError,
    NotFound,
    RetryPolicy,
    S3Config,
    S3Store,
    Store,
    StoreError,
    TooLarge,
    blob_key,
    open_store,
    store_config,
)
from distrai.store.file import is_transient_os_error
from distrai.store.retry import backoff_delay, call_with_retries
from distrai.store.s3 import is_transient_s3_error
from distrai.store.throttle import TokenBucket, copy_stream

pytest_plugins = ["tests.support.s3server"]

MIB = 1024 * 1024
FAST_RETRY = RetryPolicy(attempts=3, base_delay_s=0.01, max_delay_s=0.05)
RETRY_LOGGER = "distrai.store.retry"
INVALID_KEYS = [
    "",
    "a\n",
    "/a",
    "a/",
    "a//b",
    "../x",
    "a/../b",
    ".",
    "a/./b",
    "a b",
    "a\\b",
    "clé",
    "a\x00b",
    "a:b",
]

StoreFactory = Callable[..., Store]


def s3_config(endpoint: str, bucket: str, credentials: dict[str, str]) -> S3Config:
    """Small parts and pages, so that a few MB go multipart and a few keys take several pages."""
    return S3Config(
        bucket=bucket,
        prefix="run-1",
        endpoint_url=endpoint,
        path_style=True,
        multipart_threshold_bytes=5 * MIB,
        multipart_chunk_bytes=5 * MIB,
        list_page_size=2,
        **credentials,
    )


@pytest.fixture(params=["file", "s3"])
def make_store(request: pytest.FixtureRequest, tmp_path: Path) -> StoreFactory:
    """Builds stores of one kind that share one place (a directory, or a fresh bucket)."""
    if request.param == "file":
        return lambda **options: FileStore(tmp_path / "store", retry=FAST_RETRY, **options)
    endpoint = request.getfixturevalue("s3_endpoint")
    bucket = request.getfixturevalue("s3_bucket")
    credentials = request.getfixturevalue("s3_credentials")
    return lambda **options: S3Store(s3_config(endpoint, bucket, credentials), retry=FAST_RETRY, **options)


@pytest.fixture
def store(make_store: StoreFactory) -> Store:
    return make_store()


# --- the contract ------------------------------------------------------------------------------


component = st.text(alphabet=string.ascii_letters + string.digits + "._-", min_size=1, max_size=12).filter(
    lambda name: name not in (".", "..")
)


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(path=st.lists(component, min_size=1, max_size=3).map("/".join), data=st.binary(max_size=2048))
def test_put_then_get_returns_the_bytes_and_lists_the_key(store: Store, path: str, data: bytes) -> None:
    key = f"prop/{uuid.uuid4().hex}/{path}"
    store.put(key, data)
    assert store.get(key, max_bytes=len(data)) == data
    assert store.exists(key)
    assert store.list(key) == [key]


def test_overwrite_keeps_only_the_last_value(store: Store) -> None:
    store.put("w/manifest.json", b"first")
    store.put("w/manifest.json", b"second, longer")
    store.put("w/manifest.json", b"3")
    assert store.get("w/manifest.json", max_bytes=100) == b"3"
    assert store.list("w/") == ["w/manifest.json"]


def test_exists_follows_put_and_delete(store: Store) -> None:
    assert not store.exists("a/b")
    store.put("a/b", b"x")
    assert store.exists("a/b")
    assert not store.exists("a")
    store.delete("a/b")
    assert not store.exists("a/b")


def test_list_filters_by_prefix_and_sorts(store: Store) -> None:
    keys = ["b/2", "a/2", "ab", "a/10", "c", "a/1", "a-b/z"]
    for key in keys:
        store.put(key, key.encode())
    assert store.list() == sorted(keys)
    assert store.list("") == sorted(keys)
    assert store.list("a/") == ["a/1", "a/10", "a/2"]
    assert store.list("a") == ["a-b/z", "a/1", "a/10", "a/2", "ab"]
    assert store.list("a/1") == ["a/1", "a/10"]
    assert store.list("b/2") == ["b/2"]
    assert store.list("zzz") == []
    assert store.list("../") == []
    assert store.list("a/../") == []


def test_delete_removes_and_is_idempotent(store: Store) -> None:
    store.delete("never/written")
    store.put("k", b"v")
    store.delete("k")
    store.delete("k")
    assert store.list() == []
    with pytest.raises(NotFound):
        store.get("k", max_bytes=10)


def test_missing_key_raises_not_found_and_leaves_no_file(store: Store, tmp_path: Path) -> None:
    with pytest.raises(NotFound, match="missing/key"):
        store.get("missing/key", max_bytes=10)
    target = tmp_path / "out" / "file.bin"
    with pytest.raises(NotFound):
        store.get_file("missing/key", target, max_bytes=10)
    assert not target.exists()


def test_get_refuses_values_over_max_bytes(store: Store) -> None:
    data = bytes(range(256)) * 40
    store.put("big", data)
    with pytest.raises(TooLarge, match="10240 bytes"):
        store.get("big", max_bytes=len(data) - 1)
    with pytest.raises(TooLarge):
        store.get("big", max_bytes=0)
    assert store.get("big", max_bytes=len(data)) == data
    store.put("empty", b"")
    assert store.get("empty", max_bytes=0) == b""


def test_get_file_refuses_values_over_max_bytes_and_leaves_nothing(store: Store, tmp_path: Path) -> None:
    store.put("big", b"x" * 5000)
    folder = tmp_path / "downloads"
    folder.mkdir()
    with pytest.raises(TooLarge):
        store.get_file("big", folder / "new.bin", max_bytes=4999)
    assert list(folder.iterdir()) == []
    (folder / "old.bin").write_bytes(b"previous content")
    with pytest.raises(TooLarge):
        store.get_file("big", folder / "old.bin", max_bytes=100)
    assert [path.name for path in folder.iterdir()] == ["old.bin"]
    assert (folder / "old.bin").read_bytes() == b"previous content"


def test_get_file_that_cannot_land_leaves_no_temp_file(store: Store, tmp_path: Path) -> None:
    store.put("k", b"value")
    folder = tmp_path / "downloads"
    (folder / "taken").mkdir(parents=True)
    (folder / "taken" / "inside").write_bytes(b"")
    with pytest.raises(StoreError):
        store.get_file("k", folder / "taken", max_bytes=5)
    assert [path.name for path in folder.iterdir()] == ["taken"]


def test_negative_max_bytes_is_refused(store: Store) -> None:
    store.put("k", b"v")
    with pytest.raises(StoreError, match="max_bytes"):
        store.get("k", max_bytes=-1)


def every_operation(store: Store, key: str, folder: Path) -> dict[str, Callable[[], object]]:
    """Each store operation on `key`, ready to call; files come from and go to `folder`."""
    (folder / "source.bin").write_bytes(b"data")
    return {
        "put": lambda: store.put(key, b"data"),
        "get": lambda: store.get(key, max_bytes=10),
        "exists": lambda: store.exists(key),
        "delete": lambda: store.delete(key),
        "put_file": lambda: store.put_file(key, folder / "source.bin"),
        "get_file": lambda: store.get_file(key, folder / "out.bin", max_bytes=10),
    }


def test_invalid_keys_are_refused_by_every_operation(store: Store, tmp_path: Path) -> None:
    for key in INVALID_KEYS:
        for name, operation in every_operation(store, key, tmp_path).items():
            with pytest.raises(StoreError, match="invalid store key"):
                operation()
                pytest.fail(f"{name} accepted the key {key!r}")
    assert store.list() == []
    assert not (tmp_path / "out.bin").exists()


def test_put_file_and_get_file_stream_a_few_megabytes(store: Store, tmp_path: Path) -> None:
    data = os.urandom(6 * MIB + 12345)
    source = tmp_path / "upload.bin"
    source.write_bytes(data)
    store.put_file("checkpoints/w1/state.safetensors", source)
    assert store.list("checkpoints/") == ["checkpoints/w1/state.safetensors"]
    target = tmp_path / "nested" / "download.bin"
    store.get_file("checkpoints/w1/state.safetensors", target, max_bytes=len(data))
    assert hashlib.sha256(target.read_bytes()).digest() == hashlib.sha256(data).digest()
    assert list(target.parent.iterdir()) == [target]


def test_put_file_of_a_missing_file_fails_clearly(store: Store, tmp_path: Path) -> None:
    with pytest.raises(StoreError, match="nothing.bin"):
        store.put_file("k", tmp_path / "nothing.bin")
    assert store.list() == []


def test_blobs_are_content_addressed(store: Store) -> None:
    data = b"pseudo-gradient bytes"
    digest = store.put_blob(data)
    assert digest == hashlib.sha256(data).hexdigest()
    assert store.list("blobs/") == [f"blobs/{digest}"]
    assert store.put_blob(data) == digest
    assert store.get_blob(digest, max_bytes=len(data)) == data


def test_a_tampered_blob_raises_integrity_error(store: Store) -> None:
    digest = store.put_blob(b"honest update")
    store.put(blob_key(digest), b"poisoned update")
    with pytest.raises(IntegrityError, match=digest):
        store.get_blob(digest, max_bytes=100)


def test_a_second_client_sees_the_first_clients_writes(make_store: StoreFactory) -> None:
    writer, reader = make_store(), make_store()
    writer.put("shared/k", b"value")
    assert reader.get("shared/k", max_bytes=5) == b"value"
    assert reader.url == writer.url


# --- bandwidth limit ---------------------------------------------------------------------------

LIMIT_BYTES_PER_S = 200_000
PACED_BYTES = 60_000


def lower_bound_s(n_bytes: int, rate: float) -> float:
    """The documented minimum time for `n_bytes` through a fresh bucket: (N - burst) / rate."""
    return (n_bytes - TokenBucket(rate).burst_bytes) / rate


def test_bandwidth_limit_paces_put_and_get(make_store: StoreFactory) -> None:
    store = make_store(bandwidth_bytes_per_s=LIMIT_BYTES_PER_S)
    data = os.urandom(PACED_BYTES)
    started = time.monotonic()
    store.put("paced", data)
    upload_s = time.monotonic() - started
    started = time.monotonic()
    assert store.get("paced", max_bytes=PACED_BYTES) == data
    download_s = time.monotonic() - started
    assert upload_s >= lower_bound_s(PACED_BYTES, LIMIT_BYTES_PER_S)
    assert download_s >= lower_bound_s(PACED_BYTES, LIMIT_BYTES_PER_S)


def test_bandwidth_limit_paces_put_file_and_get_file(make_store: StoreFactory, tmp_path: Path) -> None:
    store = make_store(bandwidth_bytes_per_s=LIMIT_BYTES_PER_S)
    source = tmp_path / "up.bin"
    source.write_bytes(os.urandom(PACED_BYTES))
    started = time.monotonic()
    store.put_file("paced", source)
    upload_s = time.monotonic() - started
    started = time.monotonic()
    store.get_file("paced", tmp_path / "down.bin", max_bytes=PACED_BYTES)
    download_s = time.monotonic() - started
    assert (tmp_path / "down.bin").read_bytes() == source.read_bytes()
    assert upload_s >= lower_bound_s(PACED_BYTES, LIMIT_BYTES_PER_S)
    assert download_s >= lower_bound_s(PACED_BYTES, LIMIT_BYTES_PER_S)


def test_token_bucket_books_time_at_the_rate() -> None:
    now = [100.0]
    bucket = TokenBucket(1000.0, burst_bytes=100.0, clock=lambda: now[0])
    assert bucket.reserve(100) == 0.0
    assert bucket.reserve(500) == pytest.approx(0.5)
    assert bucket.reserve(250) == pytest.approx(0.75)
    assert bucket.reserve(0) == 0.0
    assert bucket.reserve(-4096) == 0.0
    now[0] += 10.0
    assert bucket.reserve(100) == 0.0
    assert bucket.reserve(100) == pytest.approx(0.1)


@settings(max_examples=50, deadline=None)
@given(
    rate=st.floats(min_value=1.0, max_value=1e9),
    burst_fraction=st.floats(min_value=0.0, max_value=2.0),
    sizes=st.lists(st.integers(min_value=1, max_value=10**7), min_size=1, max_size=20),
)
def test_token_bucket_never_lets_more_than_rate_plus_burst_through(
    rate: float, burst_fraction: float, sizes: list[int]
) -> None:
    now = [0.0]
    bucket = TokenBucket(rate, burst_bytes=rate * burst_fraction, clock=lambda: now[0], sleep=lambda s: None)
    finished = max(bucket.reserve(size) for size in sizes)
    least = (sum(sizes) - rate * burst_fraction) / rate
    assert finished >= least - 1e-9 * max(1.0, least)


def test_copy_stream_stops_one_byte_past_the_cap() -> None:
    class Source:
        served = 0

        def read(self, size: int = -1) -> bytes:
            self.served += size
            return b"x" * size

    source = Source()
    with open(os.devnull, "wb") as sink, pytest.raises(TooLarge, match="endless"):
        copy_stream(source, sink, max_bytes=1000, pace=lambda n: None, what="endless")
    assert source.served == 1001


def test_bandwidth_must_be_positive() -> None:
    with pytest.raises(ValueError, match="bandwidth"):
        TokenBucket(0)


# --- retries ------------------------------------------------------------------------------------


def test_backoff_doubles_up_to_the_cap_and_jitter_only_shortens() -> None:
    policy = RetryPolicy(attempts=10, base_delay_s=0.5, max_delay_s=3.0, jitter=0.5)
    assert [backoff_delay(policy, i, 0.0) for i in range(5)] == [0.5, 1.0, 2.0, 3.0, 3.0]
    assert backoff_delay(policy, 1, 0.999) == pytest.approx(1.0 * (1 - 0.5 * 0.999))
    assert backoff_delay(policy, 10_000, 0.0) == 3.0
    no_jitter = RetryPolicy(base_delay_s=0.5, max_delay_s=3.0, jitter=0.0)
    assert backoff_delay(no_jitter, 2, 0.9) == 2.0


@pytest.mark.parametrize(
    "fields",
    [{"attempts": 0}, {"base_delay_s": -1.0}, {"base_delay_s": 9.0, "max_delay_s": 1.0}, {"jitter": 1.5}],
)
def test_retry_policy_refuses_nonsense(fields: dict[str, float]) -> None:
    with pytest.raises(ValueError, match="RetryPolicy"):
        RetryPolicy(**fields)


def test_call_with_retries_retries_transient_errors_until_success() -> None:
    failures = [TimeoutError("slow"), TimeoutError("slow")]
    waits: list[float] = []

    def flaky() -> str:
        if failures:
            raise failures.pop()
        return "done"

    result = call_with_retries(
        flaky,
        policy=RetryPolicy(attempts=3, jitter=0.0),
        is_transient=lambda e: True,
        describe="t",
        sleep=waits.append,
    )
    assert result == "done"
    assert waits == [0.25, 0.5]


def test_call_with_retries_gives_up_after_the_last_attempt_and_never_retries_permanent_errors() -> None:
    calls: list[int] = []

    def always(error: Exception) -> Callable[[], None]:
        def operation() -> None:
            calls.append(1)
            raise error

        return operation

    transient = lambda e: isinstance(e, TimeoutError)  # noqa: E731
    with pytest.raises(TimeoutError):
        call_with_retries(
            always(TimeoutError()),
            policy=RetryPolicy(attempts=4),
            is_transient=transient,
            describe="t",
            sleep=lambda s: None,
        )
    assert len(calls) == 4
    calls.clear()
    with pytest.raises(PermissionError):
        call_with_retries(
            always(PermissionError()),
            policy=RetryPolicy(attempts=4),
            is_transient=transient,
            describe="t",
            sleep=lambda s: None,
        )
    assert len(calls) == 1


def client_error(code: str, status: int) -> ClientError:
    return ClientError(
        {"Error": {"Code": code, "Message": code}, "ResponseMetadata": {"HTTPStatusCode": status}},
        "GetObject",
    )


@pytest.mark.parametrize(
    ("error", "transient"),
    [
        (client_error("SlowDown", 503), True),
        (client_error("InternalError", 500), True),
        (client_error("TooManyRequests", 429), True),
        (client_error("RequestTimeout", 400), True),
        (EndpointConnectionError(endpoint_url="http://127.0.0.1:1"), True),
        (ReadTimeoutError(endpoint_url="http://127.0.0.1:1"), True),
        (client_error("NoSuchKey", 404), False),
        (client_error("AccessDenied", 403), False),
        (client_error("InvalidBucketName", 400), False),
        (TooLarge("big"), False),
        (NotFound("gone"), False),
        (ValueError("bug"), False),
    ],
)
def test_s3_transient_errors_are_told_from_permanent_ones(error: BaseException, transient: bool) -> None:
    assert is_transient_s3_error(error) is transient


@pytest.mark.parametrize(
    ("error", "transient"),
    [
        (OSError(errno.ESTALE, "Stale file handle"), True),
        (OSError(errno.EBUSY, "Device or resource busy"), True),
        (TimeoutError(errno.ETIMEDOUT, "timed out"), True),
        (FileNotFoundError(errno.ENOENT, "No such file"), False),
        (PermissionError(errno.EACCES, "Permission denied"), False),
        (OSError(errno.ENOSPC, "No space left"), False),
        (NotFound("gone"), False),
    ],
)
def test_file_transient_errors_are_told_from_permanent_ones(error: BaseException, transient: bool) -> None:
    assert is_transient_os_error(error) is transient


def retry_records(caplog: pytest.LogCaptureFixture) -> list[logging.LogRecord]:
    return [record for record in caplog.records if record.name == RETRY_LOGGER]


def test_s3_connection_errors_are_retried(
    unused_endpoint: str, s3_credentials: dict[str, str], caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG, logger=RETRY_LOGGER)
    dead = S3Store(s3_config(unused_endpoint, "bucket", s3_credentials), retry=FAST_RETRY)
    with pytest.raises(StoreError, match="Could not connect"):
        dead.get("k", max_bytes=10)
    assert len(retry_records(caplog)) == FAST_RETRY.attempts - 1
    assert all("EndpointConnectionError" in record.getMessage() for record in retry_records(caplog))
    assert all(record.levelno == logging.DEBUG for record in retry_records(caplog)), (
        "a try is not a warning: a line a try repeats every fraction of a second in an outage"
    )


def test_s3_not_found_and_too_large_are_not_retried(
    s3_endpoint: str,
    s3_bucket: str,
    s3_credentials: dict[str, str],
    caplog: pytest.LogCaptureFixture,
    tmp_path: Path,
) -> None:
    caplog.set_level(logging.DEBUG, logger=RETRY_LOGGER)
    store = S3Store(s3_config(s3_endpoint, s3_bucket, s3_credentials), retry=FAST_RETRY)
    store.put("k", b"0123456789")
    with pytest.raises(NotFound):
        store.get("absent", max_bytes=10)
    with pytest.raises(TooLarge):
        store.get("k", max_bytes=9)
    with pytest.raises(TooLarge):
        store.get_file("k", tmp_path / "k.bin", max_bytes=9)
    assert retry_records(caplog) == []


def test_s3_missing_bucket_is_a_clear_permanent_error(
    s3_endpoint: str, s3_credentials: dict[str, str], caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG, logger=RETRY_LOGGER)
    store = S3Store(s3_config(s3_endpoint, "no-such-bucket-here", s3_credentials), retry=FAST_RETRY)
    with pytest.raises(StoreError, match="does not exist"):
        store.put("k", b"v")
    assert retry_records(caplog) == []


@dataclass(frozen=True)
class Reply:
    """One scripted HTTP reply; `sent_bytes` below `len(body)` cuts the body short mid-stream."""

    status: int
    body: bytes
    content_type: str = "application/octet-stream"
    sent_bytes: int | None = None


def s3_error(status: int, code: str) -> Reply:
    body = (
        f'<?xml version="1.0" encoding="UTF-8"?><Error><Code>{code}</Code><Message>{code}</Message></Error>'
    )
    return Reply(status, body.encode(), "application/xml")


@contextlib.contextmanager
def scripted_s3_server(replies: list[Reply]) -> Iterator[tuple[str, list[str]]]:
    """A real HTTP server on 127.0.0.1 that answers request i with `replies[i]` (the last repeats).

    Yields its endpoint and the list of request paths it received. It stands in for an S3 provider
    that throttles, fails, refuses or drops connections, which moto cannot be told to do.
    """
    seen: list[str] = []

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            reply = replies[min(len(seen), len(replies) - 1)]
            seen.append(self.path)
            self.send_response(reply.status)
            self.send_header("Content-Type", reply.content_type)
            self.send_header("Content-Length", str(len(reply.body)))
            self.end_headers()
            self.wfile.write(reply.body[: reply.sent_bytes])

        def log_message(self, format: str, *args: object) -> None:
            return

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", seen
    finally:
        server.shutdown()
        server.server_close()
        thread.join()


def test_s3_throttling_is_retried_until_the_server_answers(
    s3_credentials: dict[str, str], caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG, logger=RETRY_LOGGER)
    replies = [s3_error(503, "SlowDown"), s3_error(500, "InternalError"), Reply(200, b"payload")]
    with scripted_s3_server(replies) as (endpoint, seen):
        store = S3Store(s3_config(endpoint, "bucket", s3_credentials), retry=FAST_RETRY)
        assert store.get("k", max_bytes=100) == b"payload"
    assert seen == ["/bucket/run-1/k"] * 3
    assert len(retry_records(caplog)) == 2


@pytest.mark.parametrize(("status", "code", "requests"), [(503, "SlowDown", 3), (403, "AccessDenied", 1)])
def test_s3_gives_up_after_the_attempts_and_does_not_retry_refusals(
    status: int, code: str, requests: int, s3_credentials: dict[str, str]
) -> None:
    with scripted_s3_server([s3_error(status, code)]) as (endpoint, seen):
        store = S3Store(s3_config(endpoint, "bucket", s3_credentials), retry=FAST_RETRY)
        with pytest.raises(StoreError, match=code):
            store.get("k", max_bytes=100)
    assert len(seen) == requests


def test_s3_get_file_retries_a_cut_download_and_leaves_no_partial_file(
    s3_credentials: dict[str, str], tmp_path: Path
) -> None:
    data = os.urandom(300_000)
    cut = Reply(200, data, sent_bytes=100_000)
    folder = tmp_path / "downloads"
    with scripted_s3_server([cut, Reply(200, data)]) as (endpoint, seen):
        store = S3Store(s3_config(endpoint, "bucket", s3_credentials), retry=FAST_RETRY)
        store.get_file("k", folder / "k.bin", max_bytes=len(data))
    assert len(seen) == 2
    assert (folder / "k.bin").read_bytes() == data
    assert list(folder.iterdir()) == [folder / "k.bin"]
    with scripted_s3_server([cut]) as (endpoint, seen):
        store = S3Store(s3_config(endpoint, "bucket", s3_credentials), retry=FAST_RETRY)
        with pytest.raises(StoreError):
            store.get_file("k", folder / "other.bin", max_bytes=len(data))
    assert len(seen) == FAST_RETRY.attempts
    assert list(folder.iterdir()) == [folder / "k.bin"]


# --- the file store's own promises ---------------------------------------------------------------


def test_file_store_never_lists_temp_files(tmp_path: Path) -> None:
    store = FileStore(tmp_path)
    store.put("w/a", b"1")
    (tmp_path / "w" / ".a.0123456789abcdef~tmp").write_bytes(b"half a wri")
    (tmp_path / "w" / "stray name").write_bytes(b"not a key")
    assert store.list() == ["w/a"]


def test_file_store_refuses_a_key_under_another_key(tmp_path: Path) -> None:
    store = FileStore(tmp_path)
    store.put("a", b"value")
    with pytest.raises(StoreError, match="already a key"):
        store.put("a/b", b"value")
    store.put("d/e", b"value")
    with pytest.raises(StoreError, match="directory of other keys"):
        store.put("d", b"value")
    assert store.list() == ["a", "d/e"]
    assert sorted(name for _, _, files in os.walk(tmp_path) for name in files) == ["a", "e"]


# --- open_store ----------------------------------------------------------------------------------


def test_open_store_reads_file_urls_and_plain_paths(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    by_url = open_store(tmp_path.as_uri())
    assert isinstance(by_url, FileStore) and by_url.root == tmp_path
    assert open_store(str(tmp_path)).url == tmp_path.as_uri()
    monkeypatch.chdir(tmp_path)
    relative = open_store("relative/store")
    assert isinstance(relative, FileStore) and relative.root == tmp_path / "relative" / "store"
    relative.put("k", b"v")
    assert (tmp_path / "relative" / "store" / "k").read_bytes() == b"v"


def test_open_store_reads_s3_urls_and_round_trips_them() -> None:
    store = open_store(
        "s3://my-bucket/runs/run-1",
        endpoint="http://127.0.0.1:9000",
        path_style=True,
    )
    assert isinstance(store, S3Store)
    assert (store.config.bucket, store.config.prefix) == ("my-bucket", "runs/run-1/")
    assert (store.config.endpoint_url, store.config.path_style) == ("http://127.0.0.1:9000", True)
    again = open_store(store.url)
    assert isinstance(again, S3Store)
    assert (again.config.bucket, again.config.prefix, again.config.endpoint_url, again.config.path_style) == (
        "my-bucket",
        "runs/run-1/",
        "http://127.0.0.1:9000",
        True,
    )
    r2 = open_store("s3://bucket/p?endpoint=https://acct.r2.cloudflarestorage.com")
    assert isinstance(r2, S3Store) and r2.config.signing_region == "auto"
    assert open_store("s3://bucket", region="eu-west-1").config.prefix == ""


def signing_key(store: S3Store) -> str:
    """The access key id the store's client signs its requests with."""
    return store._client._request_signer._credentials.get_frozen_credentials().access_key


def test_s3_stores_of_the_same_keys_share_a_session_and_never_a_stale_key(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A store's client comes from the process's boto3 session for its keys, region and AWS
    environment (a new session loads botocore's models again): two stores of the same keys share one,
    each with its own client; other keys, or the chain's keys changed in the environment, get another."""
    from distrai.store.s3 import _boto3_session

    endpoint = {"endpoint": "http://127.0.0.1:9", "path_style": True}
    keys = {"access_key_id": "KEY-A", "secret_access_key": "secret-a"}
    first, second = (open_store(f"s3://bucket/{name}", **endpoint, **keys) for name in ("one", "two"))
    assert isinstance(first, S3Store) and isinstance(second, S3Store)
    assert _boto3_session(first.config) is _boto3_session(second.config)
    assert first._client is not second._client
    assert signing_key(first) == signing_key(second) == "KEY-A"
    other = open_store("s3://bucket/one", **endpoint, access_key_id="KEY-B", secret_access_key="secret-b")
    assert isinstance(other, S3Store) and signing_key(other) == "KEY-B"
    assert _boto3_session(other.config) is not _boto3_session(first.config)
    # no keys given: boto3's chain, here the environment, read again once it has changed
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "ENV-1")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "env-secret")
    chained = open_store("s3://bucket/one", **endpoint)
    assert isinstance(chained, S3Store) and signing_key(chained) == "ENV-1"
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "ENV-2")
    changed = open_store("s3://bucket/one", **endpoint)
    assert isinstance(changed, S3Store) and signing_key(changed) == "ENV-2"
    assert signing_key(chained) == "ENV-1"


@pytest.mark.parametrize(
    ("url", "options", "complaint"),
    [
        ("", {}, "empty"),
        ("ftp://host/x", {}, "unsupported"),
        ("file://host/x", {}, "three slashes"),
        ("file:///x?y=1", {}, "no query"),
        ("/tmp/x", {"endpoint": "http://127.0.0.1:1"}, "endpoint apply only to s3"),
        ("s3://Bad_Bucket/x", {}, "invalid S3 bucket"),
        ("s3:///x", {}, "invalid S3 bucket"),
        ("s3://bucket/a/../b", {}, "invalid S3 prefix"),
        ("s3://bucket/x?colour=red", {}, "unknown setting colour"),
        ("s3://bucket/x?region=a&region=b", {}, "more than once"),
        ("s3://bucket/x?path_style=maybe", {}, "path_style"),
        ("s3://bucket/x", {"access_key_id": "only-half"}, "both access_key_id"),
    ],
)
def test_open_store_refuses_bad_urls_clearly(url: str, options: dict[str, str], complaint: str) -> None:
    with pytest.raises(StoreError, match=complaint):
        open_store(url, **options)


@pytest.mark.parametrize(
    "url",
    [
        "file:///srv/distrai/store",
        "file:///srv/a%20store",
        "s3://bucket",
        "s3://my-bucket/runs/run-1/",
        "s3://my-bucket/p?endpoint=http://127.0.0.1:9000&region=eu-west-1&path_style=true",
        "s3://bucket/p?endpoint=https://acct.r2.cloudflarestorage.com",
    ],
)
def test_each_backends_config_round_trips_from_its_url(url: str) -> None:
    """A URL is read by the config class its scheme names in `BACKENDS`; the config's URL reads back
    to the same config."""
    config = store_config(url)
    assert type(config) is BACKENDS[url.partition(":")[0]]()
    assert store_config(config.url) == config
    assert type(config).from_url(config.url) == config


def test_a_plain_path_is_a_file_store_and_its_url_names_the_whole_path(tmp_path: Path) -> None:
    config = store_config(str(tmp_path))
    assert config == FileConfig(str(tmp_path)) and config.url == tmp_path.as_uri()
    assert store_config(config.url) == config


def test_a_setting_given_by_name_overrides_the_urls_own() -> None:
    url = "s3://bucket/p?endpoint=http://127.0.0.1:1&region=a"
    config = store_config(url, endpoint="http://127.0.0.1:2", path_style=True, region=None)
    assert isinstance(config, S3Config)
    assert (config.endpoint_url, config.region, config.path_style) == ("http://127.0.0.1:2", "a", True)
    keys = store_config(url, access_key_id="id", secret_access_key="secret")
    assert keys == replace(store_config(url), access_key_id="id", secret_access_key="secret")


@pytest.mark.parametrize(
    ("url", "settings", "complaint"),
    [
        ("/tmp/x", {"region": "eu-west-1"}, r"^region apply only to s3:// stores, not to '/tmp/x'$"),
        (
            "file:///tmp/x",
            {"path_style": True, "session_token": "t"},
            r"^path_style, session_token apply only to s3:// stores",
        ),
        ("s3://bucket/x", {"colour": "red"}, r"^unknown store setting colour for 's3://bucket/x'$"),
        ("s3://bucket/x", {"directory": "/tmp/x"}, r"^unknown store setting directory"),
        ("/tmp/x", {"create": "no", "colour": "red"}, r"^unknown store setting colour, create"),
    ],
)
def test_a_setting_the_store_does_not_take_is_refused_by_name(
    url: str, settings: dict[str, object], complaint: str
) -> None:
    with pytest.raises(StoreError, match=complaint):
        store_config(url, **settings)


def test_defaults_fill_only_what_the_url_leaves_unset_and_only_where_the_store_takes_them(
    tmp_path: Path,
) -> None:
    """The dashboard's `--store.endpoint` serves the s3:// URLs that name no endpoint (its opener)."""
    from distrai.dashboard.reading import store_opener

    defaults = {"endpoint": "http://127.0.0.1:9", "region": None}
    bare = store_config("s3://bucket/p", defaults=defaults)
    assert isinstance(bare, S3Config) and (bare.endpoint_url, bare.region) == ("http://127.0.0.1:9", None)
    named = store_config("s3://bucket/p?endpoint=http://127.0.0.1:8", defaults=defaults)
    assert isinstance(named, S3Config) and named.endpoint_url == "http://127.0.0.1:8"
    overridden = store_config("s3://bucket/p", endpoint="http://127.0.0.1:7", defaults=defaults)
    assert isinstance(overridden, S3Config) and overridden.endpoint_url == "http://127.0.0.1:7"
    assert store_config(str(tmp_path), defaults=defaults) == FileConfig(str(tmp_path))
    opened = store_opener("http://127.0.0.1:9")
    s3 = opened("s3://bucket/p")
    assert isinstance(s3, S3Store) and s3.config.endpoint_url == "http://127.0.0.1:9"
    own = opened("s3://bucket/p?endpoint=http://127.0.0.1:8&path_style=true")
    assert isinstance(own, S3Store) and own.config.endpoint_url == "http://127.0.0.1:8"
    assert isinstance(opened(tmp_path.as_uri()), FileStore)


def test_file_stores_are_named_and_opened_without_importing_boto3(tmp_path: Path) -> None:
    script = f"""
import sys
from distrai.store import open_store, store_config
store_config({str(tmp_path)!r}, defaults={{"endpoint": "http://127.0.0.1:9"}})
open_store({tmp_path.as_uri()!r}, create=False).exists("k")
loaded = sorted(name for name in sys.modules if name.split(".")[0] in ("boto3", "botocore", "distrai"))
assert not any(name.startswith(("boto", "distrai.store.s3")) for name in loaded), loaded
print("ok")
"""
    done = subprocess.run(
        [sys.executable, "-c", script],
        cwd=Path(__file__).resolve().parents[1],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0 and done.stdout.strip() == "ok", done.stderr[-3000:]
