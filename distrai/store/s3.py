"""The S3 store: keys are objects under `s3://bucket/prefix` on AWS S3, Cloudflare R2, MinIO or any
server of the S3 protocol.

Credentials come from explicit arguments or, when none are given, from boto3's standard chain
(environment, shared config files, instance roles). botocore's own retries are switched off so
that `RetryPolicy` is the only retry loop and its count is the real one.

Resumable uploads. `put_file` sends a file below `multipart_threshold_bytes` with one `put_object`;
a larger one goes as a multipart upload of `multipart_chunk_bytes` parts (more if a file would need
over 10,000), each part paced by the bandwidth limit and retried on its own, so a transient failure
re-sends one part, not the file. There is no local journal: the server's state is the journal. Before
starting, `put_file` looks for an unfinished upload of exactly this key; it resumes the newest (and
aborts any others), skips every part whose size and ETag match the MD5 of the same local chunk, and
sends the rest. So after a crash or a failed call, calling `put_file` again sends only what is
missing. The object appears only on `complete_multipart_upload`, whole: a half-sent file is never
listed nor readable. A completion refused for good aborts the upload; a part that fails for good
leaves it open for the next call to resume. Notes:
- one writer per key: two processes uploading the same key at once abort each other's uploads;
- a resumed part is reused only if the server's ETag is the plain MD5 of its bytes (AWS S3 without
  SSE-KMS/SSE-C, MinIO, moto). Cloudflare R2 returns part ETags that are not MD5s, so there a resume
  re-sends every part: correct, just not cheaper;
- uploads that are never resumed keep their parts (and their cost) on the server; give the bucket a
  lifecycle rule that aborts incomplete multipart uploads after a few days.
"""

from __future__ import annotations

import base64
import contextlib
import hashlib
import io
import logging
import os
import re
import threading
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, ClassVar, TypeVar
from urllib.parse import parse_qs, unquote, urlencode, urlsplit

import boto3
from botocore.config import Config
from botocore.exceptions import BotoCoreError, ClientError, HTTPClientError, IncompleteReadError, SSLError
from botocore.exceptions import ConnectionError as BotoConnectionError

from distrai.store.base import NotFound, Store, StoreError, TooLarge, Unreachable, check_key
from distrai.store.file import is_key, write_atomically
from distrai.store.outage import OutageLog
from distrai.store.retry import RetryPolicy, StoreRetries
from distrai.store.throttle import Bandwidth, check_max_bytes, copy_stream
from distrai.store.timeouts import StoreTimeouts

T = TypeVar("T")

log = logging.getLogger(__name__)

MIB = 1024 * 1024
MAX_PARTS = 10_000
BUCKET_PATTERN = re.compile(r"[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]")
R2_HOST_SUFFIX = ".r2.cloudflarestorage.com"
QUERY_FIELDS = ("endpoint", "region", "path_style")
"""the settings an `s3://` URL's query may hold (credentials never travel in a URL)"""
TRUE_WORDS = frozenset({"1", "true", "yes"})
FALSE_WORDS = frozenset({"0", "false", "no"})
MISSING_CODES = frozenset({"NoSuchKey", "NotFound", "404"})
NO_SUCH_UPLOAD = "NoSuchUpload"
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
    """Where an S3 store lives and how to reach it: `s3://bucket/prefix?endpoint=…&region=…&path_style=…`
    (`from_url`), each of `SETTINGS` also given by name to `open_store`, which overrides the URL.

    `prefix` is normalized to `""` or `"some/path/"`. `region` defaults to `"auto"` for Cloudflare R2
    endpoints and otherwise to boto3's chain (us-east-1 when nothing is configured). `path_style`
    addresses buckets as `endpoint/bucket/key`, which MinIO and local servers need.
    """

    SETTINGS: ClassVar[Mapping[str, str]] = {
        "endpoint": "endpoint_url",
        "region": "region",
        "access_key_id": "access_key_id",
        "secret_access_key": "secret_access_key",
        "session_token": "session_token",
        "path_style": "path_style",
    }
    """the settings `open_store` may give by name, each to its field"""

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

    @classmethod
    def from_url(cls, url: str) -> S3Config:
        parts, query = urlsplit(url), s3_query(url)
        return cls(
            bucket=parts.netloc,
            prefix=unquote(parts.path),
            endpoint_url=query.get("endpoint"),
            region=query.get("region"),
            path_style=parse_flag(query.get("path_style", "false")),
        )

    def open(
        self,
        *,
        bandwidth_bytes_per_s: float | None = None,
        retry: RetryPolicy | None = None,
        create: bool = True,
        timeouts: StoreTimeouts | None = None,
    ) -> S3Store:
        """The store, with `timeouts` instead of this config's when given (a node's,
        `distrai.store.timeouts`). Nothing is created: the bucket must exist."""
        config = self
        if timeouts is not None:
            config = replace(self, connect_timeout_s=timeouts.connect_s, read_timeout_s=timeouts.read_s)
        return S3Store(config, bandwidth_bytes_per_s=bandwidth_bytes_per_s, retry=retry)

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


def s3_query(url: str) -> dict[str, str]:
    """The settings in an `s3://` URL's query, each given once and known."""
    fields = parse_qs(urlsplit(url).query, keep_blank_values=True, strict_parsing=False)
    unknown = sorted(set(fields) - set(QUERY_FIELDS))
    if unknown:
        raise StoreError(
            f"unknown setting {', '.join(unknown)} in {url!r}: known are {', '.join(QUERY_FIELDS)}"
        )
    repeated = sorted(name for name, values in fields.items() if len(values) > 1)
    if repeated:
        raise StoreError(f"setting {', '.join(repeated)} given more than once in {url!r}")
    return {name: values[0] for name, values in fields.items()}


def parse_flag(text: str) -> bool:
    word = text.strip().lower()
    if word in TRUE_WORDS:
        return True
    if word in FALSE_WORDS:
        return False
    raise StoreError(f"invalid path_style {text!r}: use true or false")


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


_SESSIONS: dict[tuple[object, ...], boto3.session.Session] = {}
_SESSIONS_LOCK = threading.Lock()


def _boto3_session(config: S3Config) -> boto3.session.Session:
    """The process's boto3 session for `config`'s keys and region in the present AWS environment (the
    `AWS_*` variables and HOME, where boto3's chain looks): a new session loads botocore's service
    models again, about 0.1 CPU-s, and a node opens a client per store it reads (a validator one per
    miner's store). Call it under `_SESSIONS_LOCK`: a boto3 session is not thread-safe."""
    environment = tuple(sorted((k, v) for k, v in os.environ.items() if k.startswith("AWS_")))
    key = (
        config.access_key_id,
        config.secret_access_key,
        config.session_token,
        config.signing_region,
        environment,
        os.environ.get("HOME"),
    )
    session = _SESSIONS.get(key)
    if session is None:
        session = _SESSIONS[key] = boto3.session.Session(
            aws_access_key_id=config.access_key_id,
            aws_secret_access_key=config.secret_access_key,
            aws_session_token=config.session_token,
            region_name=config.signing_region,
        )
    return session


def make_client(config: S3Config) -> Any:
    """A boto3 S3 client for `config`, with botocore's retries off and checksums only where required."""
    with _SESSIONS_LOCK:
        return _boto3_session(config).client(
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
        self._bandwidth = Bandwidth.limited(bandwidth_bytes_per_s)
        self._retries = StoreRetries(retry or RetryPolicy(), OutageLog(log), f"the store {self.url}")
        """this store's outages are said once when a try first fails and once when it answers again"""

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

    def put_file(self, key: str, path: Path, *, progress: Callable[[int], None] | None = None) -> None:
        """Upload a local file; a large one as a resumable multipart upload (see the module's notes).

        `progress`, if given, is called with the number of the file's bytes stored so far: after the
        whole file for a small one, after each part (sent or found already stored) for a large one.
        """
        object_key, source = self._object_key(key), Path(path)
        describe = f"put_file {key!r}"
        try:
            size = source.stat().st_size
        except OSError as error:
            raise self._store_error(describe, key, error) from error
        if size == 0 or size < self.config.multipart_threshold_bytes:

            def send() -> None:
                with open(source, "rb") as body:
                    self._bandwidth.sent(size)
                    self._client.put_object(Bucket=self.config.bucket, Key=object_key, Body=body)

            self._run(describe, key, send)
            if progress is not None:
                progress(size)
            return
        ResumableUpload(self, key, source, size, progress).run()

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
            return self._retrying(describe, operation)
        except (ClientError, BotoCoreError, OSError) as error:
            raise self._store_error(describe, key, error) from error

    def _retrying(
        self,
        describe: str,
        operation: Callable[[], T],
        is_transient: Callable[[BaseException], bool] = is_transient_s3_error,
    ) -> T:
        return self._retries.call(operation, is_transient, describe)

    def _store_error(self, describe: str, key: str, error: BaseException) -> StoreError:
        """The `StoreError` (or `NotFound`) that names `key`, this store and what `error` says;
        `Unreachable` when `error` is a transient one (the retries were spent on an outage)."""
        failed = Unreachable if is_transient_s3_error(error) else StoreError
        if isinstance(error, ClientError):
            code = error_code(error)
            if code in MISSING_CODES:
                return NotFound(f"no key {key!r} in {self.url}")
            if code == "NoSuchBucket":
                return StoreError(f"bucket {self.config.bucket!r} does not exist at {self.url}")
            message = error.response.get("Error", {}).get("Message", "")
            return failed(f"s3 {describe} in {self.url} failed: {code} {message}".rstrip())
        return failed(f"s3 {describe} in {self.url} failed: {error}")

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


def plan_parts(size: int, chunk_bytes: int) -> list[tuple[int, int, int]]:
    """The parts of a `size`-byte file as (part number, offset, length), all of `chunk_bytes` but the
    last, and never more than S3's 10,000: a larger file gets larger parts. A function of `size` and
    `chunk_bytes` alone, so a later run cuts the same file the same way and can reuse parts."""
    chunk = max(chunk_bytes, -(-size // MAX_PARTS))
    return [
        (index + 1, offset, min(chunk, size - offset)) for index, offset in enumerate(range(0, size, chunk))
    ]


def plain_etag(etag: str) -> str:
    """An ETag without its quotes, lowercased: the hex MD5 of a plain part's bytes on AWS S3."""
    return etag.strip().strip('"').lower()


def multipart_etag(part_etags: list[str]) -> str | None:
    """The ETag S3 gives an object completed from parts with these ETags (the MD5 of their MD5s, then
    `-N`); `None` when a part's ETag is not an MD5, as on providers that make up their own."""
    digests = [plain_etag(etag) for etag in part_etags]
    if not all(re.fullmatch(r"[0-9a-f]{32}", digest) for digest in digests):
        return None
    joined = b"".join(bytes.fromhex(digest) for digest in digests)
    return f"{hashlib.md5(joined, usedforsecurity=False).hexdigest()}-{len(digests)}"


def file_signature(path: Path) -> tuple[int, int]:
    status = os.stat(path)
    return status.st_size, status.st_mtime_ns


class ResumableUpload:
    """One call's multipart upload of a local file to one key of an `S3Store`; see the module's notes.

    Every request goes through the store's retry policy on its own. `step` names the request under
    way, so that a failure says which one failed.
    """

    def __init__(
        self, store: S3Store, key: str, path: Path, size: int, progress: Callable[[int], None] | None
    ) -> None:
        self.store = store
        self.client = store._client
        self.bucket = store.config.bucket
        self.key = key
        self.object_key = store._object_key(key)
        self.path = path
        self.size = size
        self.progress = progress
        self.parts = plan_parts(size, store.config.multipart_chunk_bytes)
        self.step = f"put_file {key!r}"

    def run(self) -> None:
        try:
            self._upload()
        except (ClientError, BotoCoreError, OSError) as error:
            raise self.store._store_error(self.step, self.key, error) from error

    def _upload(self) -> None:
        signature = file_signature(self.path)
        upload_id, stored = self._resume_or_create()
        try:
            etags = self._send_parts(upload_id, stored)
        except ClientError as error:
            if error_code(error) != NO_SUCH_UPLOAD:
                raise
            log.warning("upload %s of %r vanished (aborted elsewhere?); starting anew", upload_id, self.key)
            upload_id, stored = self._create(), {}
            etags = self._send_parts(upload_id, stored)
        if file_signature(self.path) != signature:
            raise StoreError(
                f"{self.path} changed while it was being uploaded to {self.key!r} in {self.store.url}; "
                "put_file it again once it is final (the parts that still match will be reused)"
            )
        self._complete(upload_id, etags)

    def _resume_or_create(self) -> tuple[str, dict[int, tuple[int, str, str]]]:
        """The newest unfinished upload of this key with its stored parts, others aborted; or a new one."""
        uploads = self._unfinished_uploads()
        if not uploads:
            return self._create(), {}
        *older, newest = uploads
        for upload in older:
            self._abort(upload["UploadId"])
        upload_id = newest["UploadId"]
        try:
            stored = self._stored_parts(upload_id)
        except ClientError as error:
            if error_code(error) != NO_SUCH_UPLOAD:
                raise
            return self._create(), {}
        log.info("resuming upload %s of %r: %d parts on the server", upload_id, self.key, len(stored))
        return upload_id, stored

    def _unfinished_uploads(self) -> list[dict[str, Any]]:
        """This exact key's unfinished uploads, oldest first. A server without the listing (HTTP 501)
        has none to offer: every upload there starts anew."""
        self.step = f"put_file {self.key!r}: list unfinished uploads"

        def list_uploads() -> list[dict[str, Any]]:
            pages = self.client.get_paginator("list_multipart_uploads").paginate(
                Bucket=self.bucket,
                Prefix=self.object_key,
                PaginationConfig={"PageSize": self.store.config.list_page_size},
            )
            return [
                upload
                for page in pages
                for upload in page.get("Uploads", [])
                if upload.get("Key") == self.object_key
            ]

        try:
            uploads = self.store._retrying(self.step, list_uploads, is_transient=transient_unless_unsupported)
        except ClientError as error:
            if not is_unsupported(error):
                raise
            return []
        # S3 lists one key's uploads oldest first; sort by initiation time, keeping that order on ties.
        order = sorted(range(len(uploads)), key=lambda index: (uploads[index]["Initiated"], index))
        return [uploads[index] for index in order]

    def _stored_parts(self, upload_id: str) -> dict[int, tuple[int, str, str]]:
        """Part number -> (size, MD5 hex as the ETag says, the ETag as sent) of every stored part."""
        self.step = f"put_file {self.key!r}: list the parts of upload {upload_id}"

        def list_parts() -> dict[int, tuple[int, str, str]]:
            pages = self.client.get_paginator("list_parts").paginate(
                Bucket=self.bucket,
                Key=self.object_key,
                UploadId=upload_id,
                PaginationConfig={"PageSize": self.store.config.list_page_size},
            )
            return {
                int(part["PartNumber"]): (int(part["Size"]), plain_etag(part["ETag"]), part["ETag"])
                for page in pages
                for part in page.get("Parts", [])
            }

        return self.store._retrying(self.step, list_parts)

    def _create(self) -> str:
        self.step = f"put_file {self.key!r}: create a multipart upload"
        response = self.store._retrying(
            self.step, lambda: self.client.create_multipart_upload(Bucket=self.bucket, Key=self.object_key)
        )
        return str(response["UploadId"])

    def _send_parts(self, upload_id: str, stored: dict[int, tuple[int, str, str]]) -> list[str]:
        """Each part's ETag, in order: a stored part's if its size and MD5 match our chunk, else the
        one the server gives the part we send."""
        etags: list[str] = []
        done = reused = 0
        with open(self.path, "rb") as source:
            for number, offset, length in self.parts:
                source.seek(offset)
                body = source.read(length)
                if len(body) != length:
                    raise StoreError(
                        f"{self.path} shrank while it was being uploaded to {self.key!r} in {self.store.url}"
                    )
                digest = hashlib.md5(body, usedforsecurity=False)
                found = stored.get(number)
                if found is not None and found[:2] == (length, digest.hexdigest()):
                    etags.append(found[2])
                    reused += 1
                else:
                    etags.append(self._send_part(upload_id, number, body, digest.digest()))
                done += length
                if self.progress is not None:
                    self.progress(done)
        if reused:
            log.info("upload of %r reused %d of %d parts", self.key, reused, len(self.parts))
        return etags

    def _send_part(self, upload_id: str, number: int, body: bytes, md5: bytes) -> str:
        self.step = f"put_file {self.key!r}: part {number} of {len(self.parts)}"
        content_md5 = base64.b64encode(md5).decode("ascii")

        def send() -> str:
            self.store._bandwidth.sent(len(body))
            response = self.client.upload_part(
                Bucket=self.bucket,
                Key=self.object_key,
                UploadId=upload_id,
                PartNumber=number,
                Body=body,
                ContentMD5=content_md5,
            )
            return str(response["ETag"])

        return self.store._retrying(self.step, send)

    def _complete(self, upload_id: str, etags: list[str]) -> None:
        """Complete the upload. If a retry finds it gone because a lost reply hid an earlier success,
        the object is checked instead; a refusal for good aborts the upload."""
        self.step = f"put_file {self.key!r}: complete upload {upload_id}"
        parts = [
            {"PartNumber": number, "ETag": etag}
            for (number, _, _), etag in zip(self.parts, etags, strict=True)
        ]
        try:
            self.store._retrying(
                self.step,
                lambda: self.client.complete_multipart_upload(
                    Bucket=self.bucket,
                    Key=self.object_key,
                    UploadId=upload_id,
                    MultipartUpload={"Parts": parts},
                ),
            )
        except ClientError as error:
            if error_code(error) == NO_SUCH_UPLOAD and self._is_in_place(etags):
                return
            if not is_transient_s3_error(error):
                self._abort(upload_id)
            raise

    def _is_in_place(self, etags: list[str]) -> bool:
        """Whether the object under the key is the one these parts make (by size and ETag)."""
        expected = multipart_etag(etags)
        if expected is None:
            return False
        try:
            head = self.client.head_object(Bucket=self.bucket, Key=self.object_key)
        except (ClientError, BotoCoreError):
            return False
        return (
            int(head.get("ContentLength", -1)) == self.size and plain_etag(head.get("ETag", "")) == expected
        )

    def _abort(self, upload_id: str) -> None:
        """Abort an upload, best effort: one already gone is fine, any other failure is logged."""

        def abort() -> None:
            try:
                self.client.abort_multipart_upload(
                    Bucket=self.bucket, Key=self.object_key, UploadId=upload_id
                )
            except ClientError as error:
                if error_code(error) != NO_SUCH_UPLOAD:
                    raise

        try:
            self.store._retrying(f"put_file {self.key!r}: abort upload {upload_id}", abort)
        except (ClientError, BotoCoreError) as error:
            log.warning(
                "could not abort upload %s of %r in %s: %s", upload_id, self.key, self.store.url, error
            )


def is_unsupported(error: BaseException) -> bool:
    """A server that does not implement the request (HTTP 501, `NotImplemented`)."""
    return isinstance(error, ClientError) and (
        error_code(error) == "NotImplemented" or http_status(error) == 501
    )


def transient_unless_unsupported(error: BaseException) -> bool:
    return is_transient_s3_error(error) and not is_unsupported(error)
