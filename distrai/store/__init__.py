"""Object stores: bytes under keys in a directory (`file://`) or an S3 bucket (`s3://`).

`open_store` turns a store URL (as a miner announces it) into a `Store`:
- `file:///abs/path` or a plain path: a `FileStore` in that directory;
- `s3://bucket/prefix`: an `S3Store`; the endpoint, region and path-style addressing may come as
  keyword arguments or in the URL's query (`?endpoint=https://host&region=auto&path_style=true`).

`distrai.store.s3` (and boto3 with it) is imported only when an S3 store is opened or named: a node
on file stores runs without boto3 installed (as on a lent GPU machine, `bench/device_session.sh`).
"""

from __future__ import annotations

from dataclasses import replace
from urllib.parse import parse_qs, unquote, urlsplit

from distrai.store.base import (
    BLOB_PREFIX,
    IntegrityError,
    NotFound,
    Store,
    StoreError,
    TooLarge,
    blob_key,
    check_key,
    sha256_hex,
)
from distrai.store.file import FileStore
from distrai.store.retry import RetryPolicy
from distrai.store.timeouts import StoreTimeouts, node_store_timeouts

__all__ = [
    "BLOB_PREFIX",
    "FileStore",
    "IntegrityError",
    "NotFound",
    "RetryPolicy",
    "S3Config",
    "S3Store",
    "Store",
    "StoreError",
    "StoreTimeouts",
    "TooLarge",
    "blob_key",
    "check_key",
    "node_store_timeouts",
    "open_store",
    "sha256_hex",
]

S3_QUERY_FIELDS = ("endpoint", "region", "path_style")
TRUE_WORDS = frozenset({"1", "true", "yes"})
FALSE_WORDS = frozenset({"0", "false", "no"})


def open_store(
    url: str,
    *,
    endpoint: str | None = None,
    bandwidth_bytes_per_s: float | None = None,
    region: str | None = None,
    access_key_id: str | None = None,
    secret_access_key: str | None = None,
    session_token: str | None = None,
    path_style: bool | None = None,
    retry: RetryPolicy | None = None,
    create: bool = True,
    timeouts: StoreTimeouts | None = None,
) -> Store:
    """The store at `url`. Keyword arguments override the same setting in an `s3://` URL's query;
    `create=False` opens a directory store without making its folder (to read another node's store).
    `timeouts` sets an S3 store's connect and read timeouts (a node's follow its chain's block time,
    `distrai.store.timeouts`); None keeps `S3Config`'s defaults. A directory store ignores them."""
    parts = urlsplit(url)
    if parts.scheme in ("", "file"):
        s3_only = {
            "endpoint": endpoint,
            "region": region,
            "access_key_id": access_key_id,
            "secret_access_key": secret_access_key,
            "session_token": session_token,
            "path_style": path_style,
        }
        given = sorted(name for name, value in s3_only.items() if value is not None)
        if given:
            raise StoreError(f"{', '.join(given)} apply only to s3:// stores, not to {url!r}")
        return FileStore(
            file_path(url), bandwidth_bytes_per_s=bandwidth_bytes_per_s, retry=retry, create=create
        )
    if parts.scheme == "s3":
        from distrai.store.s3 import S3Config, S3Store

        query = s3_query(url)
        config = S3Config(
            bucket=parts.netloc,
            prefix=unquote(parts.path),
            endpoint_url=endpoint if endpoint is not None else query.get("endpoint"),
            region=region if region is not None else query.get("region"),
            access_key_id=access_key_id,
            secret_access_key=secret_access_key,
            session_token=session_token,
            path_style=path_style if path_style is not None else parse_flag(query.get("path_style", "false")),
        )
        if timeouts is not None:
            config = replace(config, connect_timeout_s=timeouts.connect_s, read_timeout_s=timeouts.read_s)
        return S3Store(config, bandwidth_bytes_per_s=bandwidth_bytes_per_s, retry=retry)
    raise StoreError(
        f"unsupported store URL {url!r}: use file:///absolute/path, a plain path, or s3://bucket/prefix"
    )


def __getattr__(name: str):
    if name in ("S3Config", "S3Store"):
        from distrai.store import s3

        return getattr(s3, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


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


def s3_query(url: str) -> dict[str, str]:
    """The settings in an `s3://` URL's query, each given once and known."""
    fields = parse_qs(urlsplit(url).query, keep_blank_values=True, strict_parsing=False)
    unknown = sorted(set(fields) - set(S3_QUERY_FIELDS))
    if unknown:
        raise StoreError(
            f"unknown setting {', '.join(unknown)} in {url!r}: known are {', '.join(S3_QUERY_FIELDS)}"
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
