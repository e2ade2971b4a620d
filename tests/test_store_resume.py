"""`S3Store.put_file` of large files: our own multipart upload, paced, retried part by part, and
resumed from the parts the server already holds, against a local moto server."""

from __future__ import annotations

import hashlib
import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from botocore.exceptions import ClientError, EndpointConnectionError

from distrai.store import FileStore, RetryPolicy, S3Config, S3Store, StoreError
from distrai.store.s3 import plan_parts
from distrai.store.throttle import TokenBucket

pytest_plugins = ["tests.support.s3server"]

MIB = 1024 * 1024
CHUNK = 5 * MIB
FILE_BYTES = 12 * MIB + 4321  # three parts: 5 MiB, 5 MiB and the rest
KEY = "checkpoints/w7/state.safetensors"
FAST_RETRY = RetryPolicy(attempts=3, base_delay_s=0.01, max_delay_s=0.05)

StoreFactory = Callable[..., S3Store]


def refusal(operation: str, code: str = "AccessDenied", status: int = 403) -> ClientError:
    return ClientError(
        {"Error": {"Code": code, "Message": "injected"}, "ResponseMetadata": {"HTTPStatusCode": status}},
        operation,
    )


class WatchedClient:
    """A boto3 S3 client that records `upload_part` calls and fails the ones it is told to.

    `fail_parts` maps a part number to the errors its next calls raise, one per call, before the
    real request is made (so a failed part never reaches the server)."""

    def __init__(self, client: Any, fail_parts: dict[int, list[BaseException]] | None = None) -> None:
        self._client = client
        self.fail_parts = fail_parts or {}
        self.part_calls: list[int] = []

    def __getattr__(self, name: str) -> Any:
        return getattr(self._client, name)

    def upload_part(self, **request: Any) -> Any:
        number = request["PartNumber"]
        self.part_calls.append(number)
        errors = self.fail_parts.get(number)
        if errors:
            raise errors.pop(0)
        return self._client.upload_part(**request)


def watch(store: S3Store, **options: Any) -> WatchedClient:
    client = WatchedClient(store._client, **options)
    store._client = client
    return client


@pytest.fixture
def make_store(s3_endpoint: str, s3_bucket: str, s3_credentials: dict[str, str]) -> StoreFactory:
    """A new `S3Store` on one fresh bucket per call: each one is a new process's view."""
    config = S3Config(
        bucket=s3_bucket,
        prefix="run-1",
        endpoint_url=s3_endpoint,
        path_style=True,
        multipart_threshold_bytes=CHUNK,
        multipart_chunk_bytes=CHUNK,
        list_page_size=2,
        **s3_credentials,
    )
    return lambda **options: S3Store(config, retry=FAST_RETRY, **options)


def open_uploads(s3_admin: Any, bucket: str) -> list[str]:
    return [upload["Key"] for upload in s3_admin.list_multipart_uploads(Bucket=bucket).get("Uploads", [])]


def sha256_of(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def fetched(store: S3Store, tmp_path: Path, size: int) -> str:
    target = tmp_path / "fetched.bin"
    store.get_file(KEY, target, max_bytes=size)
    return sha256_of(target)


@pytest.fixture
def source(tmp_path: Path) -> Path:
    path = tmp_path / "state.bin"
    path.write_bytes(os.urandom(FILE_BYTES))
    return path


def test_plan_parts_cuts_equal_chunks_and_never_more_than_ten_thousand() -> None:
    assert plan_parts(FILE_BYTES, CHUNK) == [
        (1, 0, CHUNK),
        (2, CHUNK, CHUNK),
        (3, 2 * CHUNK, FILE_BYTES - 2 * CHUNK),
    ]
    assert plan_parts(2 * CHUNK, CHUNK) == [(1, 0, CHUNK), (2, CHUNK, CHUNK)]
    huge = plan_parts(20_000 * CHUNK + 1, CHUNK)
    assert len(huge) == 10_000
    assert sum(length for _, _, length in huge) == 20_000 * CHUNK + 1


def test_multipart_put_file_round_trips_and_leaves_no_upload_open(
    make_store: StoreFactory, source: Path, tmp_path: Path, s3_admin: Any, s3_bucket: str
) -> None:
    store = make_store()
    client = watch(store)
    seen: list[int] = []
    store.put_file(KEY, source, progress=seen.append)
    assert client.part_calls == [1, 2, 3]
    assert seen == [CHUNK, 2 * CHUNK, FILE_BYTES]
    assert store.list("checkpoints/") == [KEY]
    assert fetched(store, tmp_path, FILE_BYTES) == sha256_of(source)
    assert open_uploads(s3_admin, s3_bucket) == []


def test_a_small_file_goes_in_one_put(make_store: StoreFactory, tmp_path: Path) -> None:
    store = make_store()
    client = watch(store)
    small = tmp_path / "small.bin"
    small.write_bytes(os.urandom(CHUNK - 1))
    seen: list[int] = []
    store.put_file(KEY, small, progress=seen.append)
    assert client.part_calls == []
    assert seen == [CHUNK - 1]
    assert fetched(store, tmp_path, CHUNK - 1) == sha256_of(small)


def test_a_transient_failure_resends_one_part_not_the_file(
    make_store: StoreFactory, source: Path, tmp_path: Path
) -> None:
    store = make_store()
    client = watch(store, fail_parts={2: [EndpointConnectionError(endpoint_url="http://cut")]})
    store.put_file(KEY, source)
    assert client.part_calls == [1, 2, 2, 3]
    assert fetched(store, tmp_path, FILE_BYTES) == sha256_of(source)


def test_a_failed_upload_is_invisible_and_the_next_run_sends_only_the_missing_parts(
    make_store: StoreFactory, source: Path, tmp_path: Path, s3_admin: Any, s3_bucket: str
) -> None:
    first = make_store()
    watch(first, fail_parts={2: [refusal("UploadPart")]})
    with pytest.raises(StoreError) as failure:
        first.put_file(KEY, source)
    assert (
        KEY in str(failure.value) and first.url in str(failure.value) and "part 2 of 3" in str(failure.value)
    )
    assert first.list() == [] and not first.exists(KEY)
    assert open_uploads(s3_admin, s3_bucket) == ["run-1/" + KEY]

    second = make_store()
    client = watch(second)
    seen: list[int] = []
    second.put_file(KEY, source, progress=seen.append)
    assert client.part_calls == [2, 3]
    assert seen == [CHUNK, 2 * CHUNK, FILE_BYTES]
    assert second.list() == [KEY]
    assert fetched(second, tmp_path, FILE_BYTES) == sha256_of(source)
    assert open_uploads(s3_admin, s3_bucket) == []


def test_a_changed_file_does_not_reuse_stale_parts(
    make_store: StoreFactory, source: Path, tmp_path: Path, s3_admin: Any, s3_bucket: str
) -> None:
    first = make_store()
    watch(first, fail_parts={3: [refusal("UploadPart")]})
    with pytest.raises(StoreError):
        first.put_file(KEY, source)
    data = bytearray(source.read_bytes())
    data[CHUNK + 100 : CHUNK + 200] = os.urandom(100)  # part 2 changes, same size; part 1 does not
    source.write_bytes(bytes(data))

    second = make_store()
    client = watch(second)
    second.put_file(KEY, source)
    assert client.part_calls == [2, 3]
    assert fetched(second, tmp_path, FILE_BYTES) == hashlib.sha256(data).hexdigest()
    assert open_uploads(s3_admin, s3_bucket) == []


def test_the_newest_of_several_uploads_is_resumed_and_the_others_aborted(
    make_store: StoreFactory, source: Path, tmp_path: Path, s3_admin: Any, s3_bucket: str
) -> None:
    object_key = "run-1/" + KEY
    chunk_1 = source.read_bytes()[:CHUNK]
    older = s3_admin.create_multipart_upload(Bucket=s3_bucket, Key=object_key)["UploadId"]
    s3_admin.upload_part(Bucket=s3_bucket, Key=object_key, UploadId=older, PartNumber=2, Body=b"x" * CHUNK)
    newer = s3_admin.create_multipart_upload(Bucket=s3_bucket, Key=object_key)["UploadId"]
    s3_admin.upload_part(Bucket=s3_bucket, Key=object_key, UploadId=newer, PartNumber=1, Body=chunk_1)
    s3_admin.create_multipart_upload(Bucket=s3_bucket, Key=object_key + ".other")  # not this key

    store = make_store()
    client = watch(store)
    store.put_file(KEY, source)
    assert client.part_calls == [2, 3]
    assert fetched(store, tmp_path, FILE_BYTES) == sha256_of(source)
    assert open_uploads(s3_admin, s3_bucket) == [object_key + ".other"]


def test_a_completion_refused_for_good_aborts_the_upload(
    make_store: StoreFactory, source: Path, s3_admin: Any, s3_bucket: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = make_store()
    client = watch(store)
    calls: list[str] = []

    def refuse(**request: Any) -> Any:
        calls.append(request["UploadId"])
        raise refusal("CompleteMultipartUpload", "InvalidPart", 400)

    monkeypatch.setattr(client, "complete_multipart_upload", refuse, raising=False)
    with pytest.raises(StoreError, match="InvalidPart") as failure:
        store.put_file(KEY, source)
    assert KEY in str(failure.value) and store.url in str(failure.value)
    assert len(calls) == 1
    assert open_uploads(s3_admin, s3_bucket) == []
    assert store.list() == [] and not store.exists(KEY)


def test_a_file_changed_while_uploading_is_not_completed(
    make_store: StoreFactory, source: Path, tmp_path: Path, s3_admin: Any, s3_bucket: str
) -> None:
    """The file is rewritten (same size) after part 1 went: no mixed object is completed, and the
    next call reuses what still matches and sends the rest."""
    final = bytearray(source.read_bytes())
    final[:100] = os.urandom(100)  # part 1, already sent, changes

    def rewrite_after_part_1(done: int) -> None:
        if done == CHUNK:
            source.write_bytes(bytes(final))

    first = make_store()
    with pytest.raises(StoreError, match="changed while"):
        first.put_file(KEY, source, progress=rewrite_after_part_1)
    assert first.list() == []
    assert open_uploads(s3_admin, s3_bucket) == ["run-1/" + KEY]

    second = make_store()
    client = watch(second)
    second.put_file(KEY, source)
    assert client.part_calls == [1]
    assert fetched(second, tmp_path, FILE_BYTES) == hashlib.sha256(final).hexdigest()


@pytest.mark.parametrize("completed", [True, False])
def test_a_retried_completion_that_finds_the_upload_gone_checks_the_object(
    completed: bool,
    make_store: StoreFactory,
    source: Path,
    tmp_path: Path,
    s3_admin: Any,
    s3_bucket: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The first completion's reply is lost; the retry is told `NoSuchUpload` (moto, like AWS for a
    while, would answer a repeat with success; other servers forget the upload). If the first one had
    in fact completed, the object is in place and put_file succeeds; if not, it fails clearly."""
    store = make_store()
    client = watch(store)
    real = client._client.complete_multipart_upload
    calls: list[str] = []

    def complete_and_lose_the_reply(**request: Any) -> Any:
        calls.append(request["UploadId"])
        if len(calls) > 1:
            raise refusal("CompleteMultipartUpload", "NoSuchUpload", 404)
        if completed:
            real(**request)
        raise EndpointConnectionError(endpoint_url="http://cut")

    monkeypatch.setattr(client, "complete_multipart_upload", complete_and_lose_the_reply, raising=False)
    if completed:
        store.put_file(KEY, source)
        assert fetched(store, tmp_path, FILE_BYTES) == sha256_of(source)
    else:
        with pytest.raises(StoreError, match="NoSuchUpload"):
            store.put_file(KEY, source)
        assert store.list() == []
    assert len(calls) == 2
    assert open_uploads(s3_admin, s3_bucket) == []


PACE_BYTES = 6 * MIB  # two parts
PACE_BYTES_PER_S = 2.5 * MIB  # about 2.3 s


def test_the_bandwidth_limit_paces_a_multipart_put_file(make_store: StoreFactory, tmp_path: Path) -> None:
    store = make_store(bandwidth_bytes_per_s=PACE_BYTES_PER_S)
    client = watch(store)
    paced = tmp_path / "paced.bin"
    paced.write_bytes(os.urandom(PACE_BYTES))
    started = time.monotonic()
    store.put_file(KEY, paced)
    upload_s = time.monotonic() - started
    assert client.part_calls == [1, 2]
    assert upload_s >= (PACE_BYTES - TokenBucket(PACE_BYTES_PER_S).burst_bytes) / PACE_BYTES_PER_S
    assert fetched(make_store(), tmp_path, PACE_BYTES) == sha256_of(paced)


def test_the_file_store_reports_progress_too(tmp_path: Path) -> None:
    store = FileStore(tmp_path / "store")
    data = os.urandom(600_000)
    (tmp_path / "up.bin").write_bytes(data)
    seen: list[int] = []
    store.put_file(KEY, tmp_path / "up.bin", progress=seen.append)
    assert seen == sorted(seen) and len(seen) > 1 and seen[-1] == len(data)
    assert store.get(KEY, max_bytes=len(data)) == data
