"""The S3 store: keys are objects under `s3://bucket/prefix` on AWS S3, Cloudflare R2, MinIO or any
server of the S3 protocol.

Credentials come from explicit arguments or, when none are given, from boto3's standard chain
(environment, shared config files, instance roles). botocore's own retries are switched off so
that `RetryPolicy` is the only retry loop and its count is the real one.
"""

from __future__ import annotations

import contextlib
import io
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar
from urllib.parse import urlencode

import boto3
from boto3.s3.transfer import TransferConfig
from botocore.config import Config
from botocore.exceptions import BotoCoreError, ClientError, HTTPClientError, IncompleteReadError, SSLError
from botocore.exceptions import ConnectionError as BotoConnectionError

from distrai.store.base import NotFound, Store, StoreError, TooLarge, check_key
from distrai.store.file import is_key, write_atomically
from distrai.store.retry import RetryPolicy, call_with_retries
from distrai.store.throttle import Bandwidth, check_max_bytes, copy_stream

T = TypeVar("T")

MIB = 1024 * 1024
BUCKET_PATTERN = re.compile(r"[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]")
R2_HOST_SUFFIX = ".r2.cloudflarestorage.com"
MISSING_CODES = frozenset({"NoSuchKey", "NotFound", "404"})
TRANSIENT_CODES = frozenset(
    {
        "SlowDown",
        "Throttling",
        "ThrottlingException",
        "ThrottledException",
        "RequestThrottled",
        "RequestThrottledException",
        "TooManyRequests",
        "TooManyRequestsException",
        "RequestLimitExceeded",
        "BandwidthLimitExceeded",
        "RequestTimeout",
        "RequestTimeoutException",
        "PriorRequestNotComplete",
        "InternalError",
        "ServiceUnavailable",
    }
)


@dataclass(frozen=True)
class S3Config:
    """Where an S3 store lives and how to reach it.

    `prefix` is normalized to `""` or `"some/path/"`. `region` defaults to `"auto"` for Cloudflare R2
    endpoints and otherwise to boto3's chain (us-east-1 when nothing is configured). `path_style`
    addresses buckets as `endpoint/bucket/key`, which MinIO and local servers need.
    """

    bucket: str
    prefix: str = ""
    endpoint_url: str | None = None
    region: str | None = None
    access_key_id: str | None = field(default=None, repr=False)
    secret_access_key: str | None = field(default=None, repr=False)
    session_token: str | None = field(default=None, repr=False)
    path_style: bool = False
    connect_timeout_s: float = 10.0
    read_timeout_s: float = 60.0
    multipart_threshold_bytes: int = 64 * MIB
    multipart_chunk_bytes: int = 16 * MIB
    list_page_size: int = 1000

    def __post_init__(self) -> None:
        if not BUCKET_PATTERN.fullmatch(self.bucket):
            raise StoreError(
                f"invalid S3 bucket name {self.bucket!r}: use 3 to 63 lowercase letters, digits, `.` and `-`"
            )
        prefix = self.prefix.strip("/")
        if prefix:
            try:
                check_key(prefix)
            except StoreError as error:
                raise StoreError(f"invalid S3 prefix {self.prefix!r}: {error}") from error
        object.__setattr__(self, "prefix", prefix + "/" if prefix else "")
        if (self.access_key_id is None) != (self.secret_access_key is None):
            raise StoreError(
                "give both access_key_id and secret_access_key, or neither (to use boto3's chain)"
            )
        if self.multipart_chunk_bytes < 5 * MIB:
            raise StoreError(
                f"multipart_chunk_bytes must be at least 5 MiB (S3's minimum part), got {self.multipart_chunk_bytes}"
            )
        if self.list_page_size < 1:
            raise StoreError(f"list_page_size must be positive, got {self.list_page_size}")

    @property
    def signing_region(self) -> str | None:
        if self.region is not None:
            return self.region
        if self.endpoint_url and R2_HOST_SUFFIX in self.endpoint_url:
            return "auto"
        return None

    @property
    def url(self) -> str:
        """`s3://bucket/prefix`, with the endpoint, region and addressing in the query when set."""
        query = {
            name: value
            for name, value in (
                ("endpoint", self.endpoint_url),
                ("region", self.region),
                ("path_style", "true" if self.path_style else None),
            )
            if value is not None
        }
        return f"s3://{self.bucket}/{self.prefix}" + ("?" + urlencode(query, safe=":/") if query else "")


def error_code(error: ClientError) -> str:
    return str(error.response.get("Error", {}).get("Code", ""))


def http_status(error: ClientError) -> int:
    return int(error.response.get("ResponseMetadata", {}).get("HTTPStatusCode", 0))


def is_transient_s3_error(error: BaseException) -> bool:
    """Connection failures, timeouts, cut streams, throttling and server errors (5xx)."""
    if isinstance(error, ClientError):
        status = http_status(error)
        return error_code(error) in TRANSIENT_CODES or status == 429 or status >= 500
    if isinstance(error, SSLError):
        return False
    return isinstance(
        error, BotoConnectionError | HTTPClientError | IncompleteReadError | ConnectionError | TimeoutError
    )


def make_client(config: S3Config) -> Any:
    """A boto3 S3 client for `config`, with botocore's retries off and checksums only where required."""
    session = boto3.session.Session(
        aws_access_key_id=config.access_key_id,
        aws_secret_access_key=config.secret_access_key,
        aws_session_token=config.session_token,
        region_name=config.signing_region,
    )
    return session.client(
        "s3",
        endpoint_url=config.endpoint_url,
        config=Config(
            s3={"addressing_style": "path" if config.path_style else "auto"},
            retries={"mode": "standard", "total_max_attempts": 1},
            connect_timeout=config.connect_timeout_s,
            read_timeout=config.read_timeout_s,
            request_checksum_calculation="when_required",
            response_checksum_validation="when_required",
        ),
    )


class S3Store(Store):
    """A `Store` in an S3 bucket under a prefix. The bucket must exist."""

    def __init__(
        self,
        config: S3Config,
        *,
        bandwidth_bytes_per_s: float | None = None,
        retry: RetryPolicy | None = None,
    ) -> None:
        self.config = config
        self.url = config.url
        self._client = make_client(config)
        self._transfer = TransferConfig(
            multipart_threshold=config.multipart_threshold_bytes,
            multipart_chunksize=config.multipart_chunk_bytes,
            max_concurrency=4,
        )
        self._bandwidth = Bandwidth.limited(bandwidth_bytes_per_s)
        self._retry = retry or RetryPolicy()

    def __repr__(self) -> str:
        return f"S3Store({self.config!r})"

    def put(self, key: str, data: bytes) -> None:
        object_key = self._object_key(key)

        def send() -> None:
            self._bandwidth.sent(len(data))
            self._client.put_object(Bucket=self.config.bucket, Key=object_key, Body=data)

        self._run(f"put {key!r}", key, send)

    def get(self, key: str, max_bytes: int) -> bytes:
        object_key, max_bytes = self._object_key(key), check_max_bytes(max_bytes)

        def read() -> bytes:
            buffer = io.BytesIO()
            with self._open_for_read(object_key, key, max_bytes) as body:
                copy_stream(
                    body, buffer, max_bytes=max_bytes, pace=self._bandwidth.received, what=self._what(key)
                )
            return buffer.getvalue()

        return self._run(f"get {key!r}", key, read)

    def exists(self, key: str) -> bool:
        object_key = self._object_key(key)

        def head() -> bool:
            try:
                self._client.head_object(Bucket=self.config.bucket, Key=object_key)
            except ClientError as error:
                if error_code(error) in MISSING_CODES or http_status(error) == 404:
                    return False
                raise
            return True

        return self._run(f"exists {key!r}", key, head)

    def list(self, prefix: str = "") -> list[str]:
        def list_all() -> list[str]:
            pages = self._client.get_paginator("list_objects_v2").paginate(
                Bucket=self.config.bucket,
                Prefix=self.config.prefix + prefix,
                PaginationConfig={"PageSize": self.config.list_page_size},
            )
            names = (
                item["Key"][len(self.config.prefix) :] for page in pages for item in page.get("Contents", [])
            )
            return sorted(name for name in names if is_key(name))

        return self._run(f"list {prefix!r}", prefix, list_all)

    def delete(self, key: str) -> None:
        object_key = self._object_key(key)
        self._run(
            f"delete {key!r}",
            key,
            lambda: self._client.delete_object(Bucket=self.config.bucket, Key=object_key),
        )

    def put_file(self, key: str, path: Path) -> None:
        object_key = self._object_key(key)
        pace = self._bandwidth.sent if self._bandwidth.upload is not None else None

        def send() -> None:
            with open(path, "rb") as source:
                self._client.upload_fileobj(
                    source, self.config.bucket, object_key, Config=self._transfer, Callback=pace
                )

        self._run(f"put_file {key!r}", key, send)

    def get_file(self, key: str, path: Path, max_bytes: int) -> None:
        object_key, max_bytes, target = self._object_key(key), check_max_bytes(max_bytes), Path(path)

        def download() -> None:
            with self._open_for_read(object_key, key, max_bytes) as body:
                write_atomically(
                    target,
                    lambda out: copy_stream(
                        body, out, max_bytes=max_bytes, pace=self._bandwidth.received, what=self._what(key)
                    ),
                )

        self._run(f"get_file {key!r}", key, download)

    def _object_key(self, key: str) -> str:
        return self.config.prefix + check_key(key)

    def _what(self, key: str) -> str:
        return f"{key!r} in {self.url}"

    def _run(self, describe: str, key: str, operation: Callable[[], T]) -> T:
        """Run with retries; a boto error that is left becomes a `StoreError` (or `NotFound`)."""
        try:
            return call_with_retries(
                operation, policy=self._retry, is_transient=is_transient_s3_error, describe=describe
            )
        except ClientError as error:
            code = error_code(error)
            if code in MISSING_CODES:
                raise NotFound(f"no key {key!r} in {self.url}") from error
            if code == "NoSuchBucket":
                raise StoreError(f"bucket {self.config.bucket!r} does not exist at {self.url}") from error
            message = error.response.get("Error", {}).get("Message", "")
            raise StoreError(f"s3 {describe} in {self.url} failed: {code} {message}".rstrip()) from error
        except (BotoCoreError, OSError) as error:
            raise StoreError(f"s3 {describe} in {self.url} failed: {error}") from error

    @contextlib.contextmanager
    def _open_for_read(self, object_key: str, key: str, max_bytes: int) -> Iterator[Any]:
        """The object's body, after checking its length against `max_bytes`; closed on exit."""
        response = self._client.get_object(Bucket=self.config.bucket, Key=object_key)
        body = response["Body"]
        try:
            size = int(response["ContentLength"])
            if size > max_bytes:
                raise TooLarge(f"{self._what(key)} is {size} bytes, over the limit of {max_bytes}")
            yield body
        finally:
            body.close()
