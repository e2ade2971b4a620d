"""Object stores: bytes under keys in a directory (`file://`) or an S3 bucket (`s3://`).

`open_store` turns a store URL (as a miner announces it) into a `Store`:
- `file:///abs/path` or a plain path: a `FileStore` in that directory (`FileConfig`);
- `s3://bucket/prefix`: an `S3Store` (`S3Config`); the endpoint, region and path-style addressing
  may come in the URL's query (`?endpoint=https://host&region=auto&path_style=true`) or by name.

A backend is one module with its config class and one entry in `BACKENDS` (its URL scheme, and a
member of the `StoreConfig` union). The class is a frozen dataclass with `from_url(url)`, which
reads its URL, the `url` it round-trips to, `SETTINGS` (the settings that `open_store` and
`store_config` take by name, each to its field) and `open(...)`, which opens the store with what is
common to every store: a bandwidth limit, a retry policy, `create` and a node's `timeouts` (a
backend uses those that mean something to it). A setting given by name to a store that does not
take it is refused, by name.

`distrai.store.s3` (and boto3 with it) is imported only when an S3 store is opened or named: a node
on file stores runs without boto3 installed (as on a lent GPU machine, `bench/device_session.sh`).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Mapping
from dataclasses import fields, replace
from typing import TYPE_CHECKING, Any, TypeAlias
from urllib.parse import urlsplit

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
from distrai.store.file import FileConfig, FileStore
from distrai.store.retry import RetryPolicy
from distrai.store.timeouts import StoreTimeouts, node_store_timeouts

if TYPE_CHECKING:
    from distrai.store.s3 import S3Config

__all__ = [
    "BACKENDS",
    "BLOB_PREFIX",
    "FileConfig",
    "FileStore",
    "IntegrityError",
    "NotFound",
    "RetryPolicy",
    "S3Config",
    "S3Store",
    "Store",
    "StoreConfig",
    "StoreError",
    "StoreTimeouts",
    "TooLarge",
    "blob_key",
    "check_key",
    "node_store_timeouts",
    "open_store",
    "sha256_hex",
    "store_config",
]

StoreConfig: TypeAlias = "FileConfig | S3Config"
"""Where a store lives and how to reach it: one config class per backend."""


def _file_config() -> type[FileConfig]:
    return FileConfig


def _s3_config() -> type[S3Config]:
    from distrai.store.s3 import S3Config

    return S3Config


BACKENDS: dict[str, Callable[[], type[StoreConfig]]] = {
    "": _file_config,
    "file": _file_config,
    "s3": _s3_config,
}
"""Each URL scheme's config class, loaded when a URL of that scheme is read (a plain path has none)."""


def store_config(url: str, *, defaults: Mapping[str, Any] | None = None, **settings: Any) -> StoreConfig:
    """The config of the store at `url`. `settings` (None: not given) override the same setting in
    the URL; one the store does not take is refused. `defaults` fill a setting that the URL and
    `settings` leave at its default, where the store takes it, and are passed over where it does not."""
    scheme = urlsplit(url).scheme
    if scheme not in BACKENDS:
        raise StoreError(
            f"unsupported store URL {url!r}: use file:///absolute/path, a plain path, or s3://bucket/prefix"
        )
    kind = BACKENDS[scheme]()
    given = {name: value for name, value in settings.items() if value is not None}
    if misplaced := sorted(set(given) - set(kind.SETTINGS)):
        raise StoreError(misplaced_settings(url, misplaced))
    config = replace(kind.from_url(url), **{kind.SETTINGS[name]: value for name, value in given.items()})
    unset = {field.name for field in fields(config) if getattr(config, field.name) == field.default}
    filled = {
        kind.SETTINGS[name]: value
        for name, value in (defaults or {}).items()
        if value is not None and kind.SETTINGS.get(name) in unset
    }
    return replace(config, **filled) if filled else config


def misplaced_settings(url: str, names: list[str]) -> str:
    """Why settings `names` are refused for `url`: which stores take them, or that none does. Every
    backend's config class is read for it (a backend whose packages are missing is passed over)."""
    takers = set()
    for scheme, kind in BACKENDS.items():
        with contextlib.suppress(ImportError):
            if scheme and set(names) & set(kind().SETTINGS):
                takers.add(f"{scheme}://")
    if not takers:
        return f"unknown store setting {', '.join(names)} for {url!r}"
    return f"{', '.join(names)} apply only to {' and '.join(sorted(takers))} stores, not to {url!r}"


def open_store(
    url: str,
    *,
    bandwidth_bytes_per_s: float | None = None,
    retry: RetryPolicy | None = None,
    create: bool = True,
    timeouts: StoreTimeouts | None = None,
    defaults: Mapping[str, Any] | None = None,
    **settings: Any,
) -> Store:
    """The store at `url`, its config read by `store_config(url, defaults=defaults, **settings)`
    (an S3 store's `endpoint`, `region`, `path_style` and credentials). `create=False` opens a
    directory store without making its folder (to read another node's store). `timeouts` sets an S3
    store's connect and read timeouts (a node's follow its chain's block time,
    `distrai.store.timeouts`); None keeps `S3Config`'s defaults. A directory store ignores them."""
    return store_config(url, defaults=defaults, **settings).open(
        bandwidth_bytes_per_s=bandwidth_bytes_per_s, retry=retry, create=create, timeouts=timeouts
    )


def __getattr__(name: str):
    if name in ("S3Config", "S3Store"):
        from distrai.store import s3

        return getattr(s3, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
