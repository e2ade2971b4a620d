"""Reading prepared data: the manifest the run names, its tokenizer, and only the shards a node
uses, each checked against its hash before use, cached and memory-mapped; a bad or missing shard is
named and never used; a run config trains from it."""

from __future__ import annotations

import hashlib
import logging
import threading
import time
import tomllib

import numpy as np
import pytest
import torch
from support.tiny_models import save_tiny_model

from distrai.data.access import DataAccess, load_manifest, open_prepared
from distrai.data.byte_tokenizer import byte_tokenizer
from distrai.data.cache import FIRST_PAUSE_S, MAX_PAUSE_S, ShardDeadline, ShardError, next_pause
from distrai.data.corpus import offline_documents
from distrai.data.manifest import DataManifestError
from distrai.data.prepare import PrepareOptions, prepare
from distrai.data.tokenizers import tokenizer_sha256
from distrai.protocol.run import RunConfigError, parse_run_config, shipped_config_path
from distrai.protocol.runtime import build_runtime
from distrai.store import open_store
from distrai.store.base import blob_key
from distrai.train.assignment import assigned_indices

pytest_plugins = ["tests.support.s3server"]
SEQ = 32
SHARD = 512


@pytest.fixture
def prepared(tmp_path):
    store = open_store(f"file://{tmp_path / 'store'}")
    manifest = prepare(
        offline_documents(120),
        byte_tokenizer(),
        "byte",
        "builtin",
        store,
        PrepareOptions(shard_tokens=SHARD, heldout_fraction=0.1),
    )
    return store, manifest


def access(store, tmp_path, name="cache", patience_s: float = 0.0) -> DataAccess:
    return DataAccess(store, tmp_path / name, patience_s=patience_s)


def stream(store, manifest) -> np.ndarray:
    return np.concatenate([np.frombuffer(store.get_blob(s.sha256, 1 << 20), "<u2") for s in manifest.train])


def test_sequences_are_at_their_shard_and_offset(prepared, tmp_path):
    store, manifest = prepared
    data, tokenizer = open_prepared(access(store, tmp_path), manifest.sha256(), SEQ)
    assert data.unit == SHARD // SEQ
    assert data.n_train == (len(manifest.train) - (manifest.train[-1].tokens < SHARD)) * data.unit
    tokens = stream(store, manifest)
    for index in (0, 1, data.unit - 1, data.unit, data.n_train - 1):
        shard, offset = divmod(index, data.unit)
        start = shard * SHARD + offset * SEQ
        assert data.batch([index])[0].tolist() == tokens[start : start + SEQ].tolist()
    assert data.batch([3, 0]).dtype == torch.int64
    with pytest.raises(IndexError, match="outside"):
        data.batch([data.n_train])
    assert tokenizer_sha256(tokenizer) == tokenizer_sha256(byte_tokenizer())
    assert data.heldout.shape == (sum(s.tokens // SEQ for s in manifest.heldout), SEQ)


def test_a_node_fetches_only_the_shards_its_assignment_reaches(prepared, tmp_path):
    store, manifest = prepared
    data, _ = open_prepared(access(store, tmp_path), manifest.sha256(), SEQ)
    miners = ["a", "b", "c"]
    indices = assigned_indices("run", 0, "b", 4, 4, data.n_train, miners, data.unit)
    data.batch(indices)
    cached = {p.stem for p in (tmp_path / "cache").glob("*.bin")}
    assert cached == {manifest.train[i // data.unit].sha256 for i in indices}
    assert len(cached) < len(manifest.train)


def test_a_truncated_or_changed_cached_shard_is_fetched_again(prepared, tmp_path):
    store, manifest = prepared
    data, _ = open_prepared(access(store, tmp_path), manifest.sha256(), SEQ)
    expected = data.batch([0, data.unit])
    for damage in (lambda b: b[:100], lambda b: bytes([b[0] ^ 1]) + b[1:]):
        for path in (tmp_path / "cache").glob("*.bin"):
            path.write_bytes(damage(path.read_bytes()))
        fresh, _ = open_prepared(access(store, tmp_path), manifest.sha256(), SEQ)
        assert torch.equal(fresh.batch([0, data.unit]), expected)
        assert fresh.cache.fetched_bytes == 2 * SHARD * 2


def test_a_bad_or_missing_shard_in_the_store_is_named_and_never_used(prepared, tmp_path):
    store, manifest = prepared
    root = tmp_path / "store"
    bad = root / blob_key(manifest.train[1].sha256)
    bad.write_bytes(b"\0" * bad.stat().st_size)
    data, _ = open_prepared(access(store, tmp_path), manifest.sha256(), SEQ)
    with pytest.raises(ShardError, match=f"train shard 1 \\({manifest.train[1].sha256}\\).*hashes to"):
        data.batch([data.unit])
    assert not list((tmp_path / "cache").glob(f"{manifest.train[1].sha256}*"))
    (root / blob_key(manifest.train[2].sha256)).unlink()
    with pytest.raises(ShardError, match="train shard 2 .* is missing from the data store"):
        data.batch([2 * data.unit])
    assert data.batch([0]).shape == (1, SEQ)


def test_a_shard_the_store_gives_again_within_the_patience_is_fetched(prepared, tmp_path):
    store, manifest = prepared
    blob = tmp_path / "store" / blob_key(manifest.train[0].sha256)
    aside = tmp_path / "aside"
    blob.rename(aside)
    data, _ = open_prepared(access(store, tmp_path, patience_s=30.0), manifest.sha256(), SEQ)
    restore = threading.Timer(1.5, lambda: aside.rename(blob))
    restore.start()
    try:
        rows = data.batch([0, 1])
    finally:
        restore.join()
    tokens = stream(store, manifest)
    assert rows[1].tolist() == tokens[SEQ : 2 * SEQ].tolist()


class Said(logging.Handler):
    def __init__(self, words: str):
        super().__init__()
        self.words, self.lines, self.seen = words, [], threading.Event()

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(record.getMessage())
        if self.words in record.getMessage():
            self.seen.set()


def test_a_fetch_waits_through_a_data_store_outage_says_so_once_and_goes_on_when_it_ends(prepared, tmp_path):
    store, manifest = prepared
    root, away = tmp_path / "store", tmp_path / "store.away"
    data, _ = open_prepared(access(store, tmp_path, patience_s=120.0), manifest.sha256(), SEQ)
    root.rename(away)
    root.symlink_to(root)  # ELOOP on every path
    said, logger, rows = Said("out of reach"), logging.getLogger("distrai.data"), []
    logger.addHandler(said)
    try:
        fetch = threading.Thread(target=lambda: rows.append(data.batch([0, 1])))
        fetch.start()
        assert said.seen.wait(60), said.lines
        root.unlink()
        away.rename(root)
        fetch.join(60)
    finally:
        logger.removeHandler(said)
    assert rows and rows[0][1].tolist() == stream(store, manifest)[SEQ : 2 * SEQ].tolist()
    assert data.waited_s > 0  # what the miner's pacer leaves out of a segment's time
    assert len(said.lines) == 2, said.lines
    assert said.lines[0].startswith(f"the data store {store.url} is out of reach: train shard 0")
    assert said.lines[1].startswith(f"the data store {store.url} answered again after")


def test_a_fetch_out_of_reach_gives_up_when_the_training_time_is_up_whatever_its_patience(prepared, tmp_path):
    """A miner's stop time bounds a shard fetch: past it the window cannot use the shard."""
    store, manifest = prepared
    root = tmp_path / "store"
    data, _ = open_prepared(access(store, tmp_path, patience_s=3600.0), manifest.sha256(), SEQ)
    root.rename(tmp_path / "store.away")
    root.symlink_to(root)
    data.give_up_at(time.monotonic())  # the time is up already: no pause, no wait of the patience
    with pytest.raises(ShardDeadline, match="train shard 0"):
        data.batch([0, 1])
    data.give_up_at(None)
    root.unlink()
    (tmp_path / "store.away").rename(root)
    assert data.batch([0, 1])[1].tolist() == stream(store, manifest)[SEQ : 2 * SEQ].tolist()


def test_the_pauses_between_tries_of_a_shard_grow_to_a_few_seconds_and_no_further():
    pauses = [FIRST_PAUSE_S]
    for _ in range(8):
        pauses.append(next_pause(pauses[-1]))
    assert pauses[:4] == [0.25, 0.5, 1.0, 2.0]
    assert max(pauses) == MAX_PAUSE_S == 2.0


def test_a_node_that_read_its_data_once_opens_it_again_while_the_store_is_out_of_reach(prepared, tmp_path):
    store, manifest = prepared
    root, away = tmp_path / "store", tmp_path / "store.away"
    open_prepared(access(store, tmp_path), manifest.sha256(), SEQ)
    local = tmp_path / "cache" / f"tokenizer-{manifest.tokenizer.sha256}"
    root.rename(away)
    root.symlink_to(root)  # ELOOP on every path
    _, tokenizer = open_prepared(access(store, tmp_path), manifest.sha256(), SEQ)
    assert tokenizer.encode("ab") == byte_tokenizer().encode("ab")
    local.write_bytes(b"{}")
    with pytest.raises(DataManifestError, match="tokenizer .* could not be read"):
        open_prepared(access(store, tmp_path), manifest.sha256(), SEQ)
    with pytest.raises(DataManifestError, match="could not be read"):
        open_prepared(access(store, tmp_path, "fresh"), manifest.sha256(), SEQ)
    root.unlink()
    away.rename(root)
    open_prepared(access(store, tmp_path), manifest.sha256(), SEQ)
    assert hashlib.sha256(local.read_bytes()).hexdigest() == manifest.tokenizer.sha256


def test_the_manifest_must_be_the_one_the_run_names(prepared, tmp_path):
    store, manifest = prepared
    with pytest.raises(DataManifestError, match="is not in the data store"):
        load_manifest(access(store, tmp_path), "0" * 64)
    forged = manifest.to_bytes().replace(b'"shard_tokens":512', b'"shard_tokens":256')
    digest = store.put_blob(forged)
    with pytest.raises(DataManifestError, match="is invalid"):
        load_manifest(access(store, tmp_path), digest)
    junk = store.put_blob(b"not json")
    with pytest.raises(DataManifestError, match="is invalid"):
        load_manifest(access(store, tmp_path), junk)
    local = tmp_path / "cache" / f"manifest-{manifest.sha256()}.json"
    assert load_manifest(access(store, tmp_path), manifest.sha256()) == manifest
    local.write_bytes(b"{}")
    assert load_manifest(access(store, tmp_path), manifest.sha256()) == manifest
    assert hashlib.sha256(local.read_bytes()).hexdigest() == manifest.sha256()


def test_open_maps_are_bounded(prepared, tmp_path):
    store, manifest = prepared
    data, _ = open_prepared(access(store, tmp_path), manifest.sha256(), SEQ)
    data.cache.open_limit = 3
    data.batch([u * data.unit for u in range(6)])
    assert len(data.cache._open) == 3


def test_shards_come_from_a_real_s3_server(prepared, tmp_path, s3_endpoint, s3_bucket, s3_credentials):
    _, manifest = prepared
    s3 = open_store(f"s3://{s3_bucket}/data", endpoint=s3_endpoint, **s3_credentials)
    made = prepare(
        offline_documents(120),
        byte_tokenizer(),
        "byte",
        "builtin",
        s3,
        PrepareOptions(shard_tokens=SHARD, heldout_fraction=0.1),
    )
    assert made.sha256() == manifest.sha256()
    data, _ = open_prepared(access(s3, tmp_path), made.sha256(), SEQ)
    local, _ = open_prepared(access(prepared[0], tmp_path, "local"), manifest.sha256(), SEQ)
    assert torch.equal(data.batch([5, data.unit + 1]), local.batch([5, data.unit + 1]))


def prepared_config(manifest_sha256: str, tokenizer: str = "data") -> dict:
    document = tomllib.loads(shipped_config_path("cpu-localnet").read_text())
    document["tokenizer"] = tokenizer
    document["data"] = {"source": "prepared", "manifest": manifest_sha256, "seq_len": SEQ}
    if tokenizer == "data":
        document["data"]["vocab_size"] = 260
    return document


def test_a_run_trains_from_prepared_data_with_its_tokenizer(prepared, tmp_path):
    store, manifest = prepared
    runtime = build_runtime(
        parse_run_config(prepared_config(manifest.sha256())), data_access=access(store, tmp_path)
    )
    assert runtime.model.get_input_embeddings().num_embeddings == manifest.tokenizer.vocab_size
    assert runtime.data.unit == SHARD // SEQ
    byte_run = parse_run_config(prepared_config(manifest.sha256(), tokenizer="byte"))
    assert build_runtime(byte_run, data_access=access(store, tmp_path)).data.n_train == runtime.data.n_train
    with pytest.raises(ValueError, match="needs a data store"):
        build_runtime(byte_run)
    wrong_size = prepared_config(manifest.sha256())
    wrong_size["data"]["vocab_size"] = 261
    with pytest.raises(
        ValueError, match="data.vocab_size is 261, but its data was prepared by byte with 260"
    ):
        build_runtime(parse_run_config(wrong_size), data_access=access(store, tmp_path))
    template = prepared_config(manifest.sha256())
    del template["data"]["manifest"]
    with pytest.raises(ValueError, match="names no prepared data"):
        build_runtime(parse_run_config(template), data_access=access(store, tmp_path))


def test_a_run_whose_tokenizer_did_not_prepare_the_data_is_refused(tmp_path):
    folder = save_tiny_model(tmp_path / "model")
    other = byte_tokenizer()
    other.add_special_tokens({"additional_special_tokens": ["<|sep|>"]})
    store = open_store(f"file://{tmp_path / 'store'}")
    options = PrepareOptions(shard_tokens=SHARD, heldout_fraction=0.1)
    manifest = prepare(offline_documents(60), other, "byte+sep", "b", store, options)
    document = prepared_config(manifest.sha256(), tokenizer="model")
    document["model"] = {"path_or_id": str(folder), "revision": "v1"}
    with pytest.raises(ValueError, match="not the one that prepared its data"):
        build_runtime(parse_run_config(document), data_access=access(store, tmp_path))


@pytest.mark.parametrize(
    ("data", "message"),
    [
        ({"source": "files", "seq_len": 8}, "turn it into token shards with `distrai data prepare`"),
        ({"source": "hub", "seq_len": 8}, "turn it into token shards"),
        ({"source": "prepared", "seq_len": 8, "manifest": "abc"}, "should match pattern"),
        (
            {"source": "builtin", "seq_len": 8, "manifest": "a" * 64},
            "manifest applies only to source 'prepared'",
        ),
        (
            {"source": "prepared", "seq_len": 8, "manifest": "a" * 64, "endpoint": "http://x"},
            "endpoint applies only with store",
        ),
    ],
)
def test_bad_data_sections_are_refused(data, message):
    document = prepared_config("a" * 64)
    document["data"] = data
    document["tokenizer"] = "byte"
    with pytest.raises(RunConfigError, match=message):
        parse_run_config(document, "run.toml")


def test_tokenizer_data_needs_prepared_data_and_its_size():
    document = prepared_config("a" * 64)
    document["data"] = {"source": "builtin", "seq_len": 8, "vocab_size": 260}
    with pytest.raises(RunConfigError, match="tokenizer 'data' needs data.source 'prepared'"):
        parse_run_config(document)
    document = prepared_config("a" * 64)
    del document["data"]["vocab_size"]
    with pytest.raises(RunConfigError, match="data.vocab_size goes with tokenizer 'data'"):
        parse_run_config(document)


def test_a_node_that_opens_its_data_during_an_outage_waits_for_the_store_instead_of_failing(
    prepared, tmp_path
):
    store, manifest = prepared
    root, away = tmp_path / "store", tmp_path / "store.away"
    root.rename(away)
    root.symlink_to(root)  # ELOOP on every path
    said, logger, opened = Said("out of reach"), logging.getLogger("distrai.data"), []
    logger.addHandler(said)
    try:
        opening = threading.Thread(
            target=lambda: opened.append(
                open_prepared(access(store, tmp_path, patience_s=120.0), manifest.sha256(), SEQ)
            )
        )
        opening.start()
        assert said.seen.wait(60), said.lines
        root.unlink()
        away.rename(root)
        opening.join(60)
    finally:
        logger.removeHandler(said)
    assert opened and opened[0][0].manifest.sha256() == manifest.sha256()
    assert said.lines[0].startswith(
        f"the data store {store.url} is out of reach: the data manifest could not be read"
    )
    assert said.lines[-1].startswith(f"the data store {store.url} answered again after")


def test_a_data_store_that_stays_out_of_reach_past_the_patience_is_refused_by_name(prepared, tmp_path):
    store, manifest = prepared
    root = tmp_path / "store"
    root.rename(tmp_path / "store.away")
    root.symlink_to(root)
    with pytest.raises(DataManifestError, match="data manifest .* could not be read from"):
        open_prepared(access(store, tmp_path, patience_s=0.0), manifest.sha256(), SEQ)
