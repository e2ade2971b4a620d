"""Opening a run's prepared data: the manifest the run config names, its tokenizer, its shards."""

from __future__ import annotations

import hashlib
import logging
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from transformers import PreTrainedTokenizerFast

from distrai.data.cache import FIRST_PAUSE_S, PATIENCE_S, ShardCache, next_pause
from distrai.data.dataset import PreparedData
from distrai.data.manifest import MAX_MANIFEST_BYTES, DataManifest, DataManifestError, parse_manifest
from distrai.data.tokenizers import rebuild_tokenizer
from distrai.store import Store, StoreTimeouts, open_store
from distrai.store.base import NotFound, StoreError
from distrai.store.file import write_atomically
from distrai.store.outage import OutageLog

MAX_TOKENIZER_BYTES = 64 << 20


log = logging.getLogger("distrai.data")


class DataSource(Protocol):
    """Where the run config says its prepared data is published (the run config's `data` section)."""

    store: str | None
    endpoint: str | None


@dataclass(frozen=True)
class DataAccess:
    """Where a node reads prepared data from (`store`, any mirror: every byte is checked against
    its hash) and where it keeps the shards it fetched (`cache_dir`)."""

    store: Store
    cache_dir: Path
    patience_s: float = PATIENCE_S
    """how long to keep trying a shard the store cannot give (`ShardCache`)"""


def open_data_access(
    data: DataSource,
    cache_dir: Path,
    own_url: str | None,
    own_endpoint: str | None = None,
    mirror_url: str | None = None,
    mirror_endpoint: str | None = None,
    bandwidth_bytes_per_s: float | None = None,
    timeouts: StoreTimeouts | None = None,
) -> DataAccess:
    """Where a node reads the run's prepared data: a mirror it names, else the run config's
    `data.store`, else its own store; `timeouts` for an S3 store (a node's follow its chain's block
    time, `distrai.store.timeouts`; None keeps the defaults)."""
    url: str | None
    if mirror_url:
        url, endpoint = mirror_url, mirror_endpoint
    elif data.store:
        url, endpoint = data.store, mirror_endpoint or data.endpoint
    else:
        url, endpoint = own_url, mirror_endpoint or own_endpoint
    if not url:
        raise ValueError(
            "no data store: pass --data.store or --store.url (the run trains from prepared data)"
        )
    return DataAccess(
        open_store(url, endpoint=endpoint, bandwidth_bytes_per_s=bandwidth_bytes_per_s, timeouts=timeouts),
        cache_dir,
    )


def _blob(access: DataAccess, digest: str, max_bytes: int, what: str) -> bytes:
    """The blob `digest` of the data store. A store that does not answer is tried again, as a shard
    is (`ShardCache`), until `access.patience_s` has passed: a node that starts during a short outage
    of its data store waits for it instead of exiting."""
    source = f"the data store {access.store.url}"
    outages = OutageLog(log)
    deadline, pause = time.monotonic() + access.patience_s, FIRST_PAUSE_S
    while True:
        try:
            blob = access.store.get_blob(digest, max_bytes)
            outages.answered(source)
            return blob
        except NotFound:
            outages.answered(source)
            raise DataManifestError(
                f"{what} {digest} is not in the data store {access.store.url}: the run's owner publishes it "
                "with `distrai data prepare --store.url …`"
            ) from None
        except StoreError as exc:
            if time.monotonic() + pause > deadline:
                outages.gave_up(source, f"patience of {access.patience_s:.0f} s spent")
                raise DataManifestError(
                    f"{what} {digest} could not be read from {access.store.url}: {exc}"
                ) from None
            outages.failed(source, f"the {what} could not be read: {exc}")
            time.sleep(pause)
            pause = next_pause(pause)


def load_manifest(access: DataAccess, manifest_sha256: str) -> DataManifest:
    """The manifest, from the local copy kept beside the shards when there is a good one, else the
    store (and then kept)."""
    local = access.cache_dir / f"manifest-{manifest_sha256}.json"
    if local.is_file():
        try:
            return parse_manifest(local.read_bytes(), manifest_sha256)
        except DataManifestError:
            local.unlink(missing_ok=True)
    data = _blob(access, manifest_sha256, MAX_MANIFEST_BYTES, "data manifest")
    manifest = parse_manifest(data, manifest_sha256)
    write_atomically(local, lambda out: out.write(data))
    return manifest


def load_tokenizer_blob(access: DataAccess, digest: str) -> bytes:
    """The tokenizer's bytes, from the local copy kept beside the shards when it hashes to `digest`,
    else the store (and then kept): a node restarted while the store is out of reach starts."""
    local = access.cache_dir / f"tokenizer-{digest}"
    if local.is_file():
        data = local.read_bytes()
        if hashlib.sha256(data).hexdigest() == digest:
            return data
        local.unlink(missing_ok=True)
    data = _blob(access, digest, MAX_TOKENIZER_BYTES, "tokenizer")
    write_atomically(local, lambda out: out.write(data))
    return data


def open_prepared(
    access: DataAccess, manifest_sha256: str, seq_len: int
) -> tuple[PreparedData, PreTrainedTokenizerFast]:
    """The run's training data and the tokenizer that made it. Only the manifest and the tokenizer
    are fetched now; each shard when it is first used."""
    manifest = load_manifest(access, manifest_sha256)
    tokenizer = rebuild_tokenizer(manifest.tokenizer, load_tokenizer_blob(access, manifest.tokenizer.sha256))
    cache = ShardCache(access.store, access.cache_dir, manifest.dtype, patience_s=access.patience_s)
    return PreparedData(manifest, cache, seq_len), tokenizer
