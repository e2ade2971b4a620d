"""A store that gives up in an outage is not waited on again for the rest of a pass of reads
(`distrai.store.breaker`), and the stores say when an operation gave up in an outage (`Unreachable`).

Real stores throughout: file stores in temp folders whose objects answer reads with EIO
(`support.io_errors`), and S3 stores on moto's server or on an endpoint where nothing listens. The
retries are counted by their log lines (one a wait), never timed."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest
from support.io_errors import serve_again, serve_io_errors

from distrai.store import FileStore, NotFound, RetryPolicy, S3Config, S3Store, StoreError
from distrai.store.base import Unreachable
from distrai.store.breaker import PassBreaker

pytest_plugins = ["tests.support.s3server"]

RETRY_LOGGER = "distrai.store.retry"
NO_WAIT = RetryPolicy(attempts=5, base_delay_s=0.0, max_delay_s=0.0)
BUDGET = NO_WAIT.attempts - 1
"""the waits one operation spends before it gives up"""
KEYS = [f"window-1/miner-{i}/manifest.json" for i in range(4)]


def retries(caplog: pytest.LogCaptureFixture) -> int:
    return sum(record.name == RETRY_LOGGER for record in caplog.records)


def filled(root: Path) -> FileStore:
    store = FileStore(root, retry=NO_WAIT)
    for key in KEYS:
        store.put(key, b"{}")
    return store


def read_all(store, keys: list[str]) -> dict[str, str]:
    """Each key's bytes, or the name of the error its read ended with."""
    outcome = {}
    for key in keys:
        try:
            outcome[key] = store.get(key, 100).decode()
        except StoreError as error:
            outcome[key] = type(error).__name__
    return outcome


def test_a_store_that_gives_up_in_an_outage_says_so(tmp_path, caplog):
    caplog.set_level(logging.DEBUG, logger=RETRY_LOGGER)
    store = filled(tmp_path / "store")
    serve_io_errors(store.root)
    with pytest.raises(Unreachable, match="Input/output error"):
        store.get(KEYS[0], 100)
    assert retries(caplog) == BUDGET
    looped = tmp_path / "looped"
    looped.symlink_to(looped)  # ELOOP: not transient, so not retried, and not an outage either
    with pytest.raises(StoreError) as refused:
        FileStore(looped, retry=NO_WAIT, create=False).get(KEYS[0], 100)
    assert not isinstance(refused.value, Unreachable)
    with pytest.raises(NotFound):
        FileStore(tmp_path / "other", retry=NO_WAIT).get(KEYS[0], 100)


def test_a_file_store_cut_off_answers_exists_with_an_error_not_with_no(tmp_path):
    """A probe of a store in an outage must not read as "the object is not there"."""
    store = filled(tmp_path / "store")
    away = store.root.rename(tmp_path / "away")
    store.root.symlink_to(store.root)  # every path under the root fails (ELOOP)
    with pytest.raises(StoreError, match="exists"):
        store.exists(KEYS[0])
    store.root.unlink()
    away.rename(store.root)
    assert store.exists(KEYS[0]) and not store.exists("window-1/absent.json")


def test_an_s3_store_out_of_reach_says_so_and_a_missing_object_does_not(
    unused_endpoint, s3_endpoint, s3_bucket, s3_credentials
):
    dead = S3Store(S3Config(bucket="bucket", endpoint_url=unused_endpoint, **s3_credentials), retry=NO_WAIT)
    with pytest.raises(Unreachable, match="Could not connect"):
        dead.get(KEYS[0], 100)
    alive = S3Store(S3Config(bucket=s3_bucket, endpoint_url=s3_endpoint, **s3_credentials), retry=NO_WAIT)
    with pytest.raises(NotFound) as missing:
        alive.get(KEYS[0], 100)
    assert not isinstance(missing.value, Unreachable)


def test_one_pass_over_a_store_in_an_outage_spends_one_operations_retries(tmp_path, caplog):
    caplog.set_level(logging.DEBUG, logger=RETRY_LOGGER)
    breaker = PassBreaker()
    store = breaker.guard(filled(tmp_path / "store"))
    serve_io_errors(tmp_path / "store")

    with breaker.one_pass():
        outcome = read_all(store, KEYS)

    assert outcome == dict.fromkeys(KEYS, "Unreachable"), "every read ends as it would after its retries"
    assert retries(caplog) == BUDGET, "the first read spent the retries; the others were not waited on"


def test_a_store_that_gave_up_stops_only_its_own_reads(tmp_path, caplog):
    caplog.set_level(logging.DEBUG, logger=RETRY_LOGGER)
    breaker = PassBreaker()
    dead = breaker.guard(filled(tmp_path / "dead"))
    healthy = breaker.guard(filled(tmp_path / "healthy"))
    also_dead = breaker.guard(filled(tmp_path / "also-dead"))
    serve_io_errors(tmp_path / "dead")
    serve_io_errors(tmp_path / "also-dead")

    with breaker.one_pass():
        assert read_all(dead, KEYS) == dict.fromkeys(KEYS, "Unreachable")
        assert read_all(healthy, KEYS) == dict.fromkeys(KEYS, "{}")
        assert read_all(also_dead, KEYS) == dict.fromkeys(KEYS, "Unreachable")

    assert retries(caplog) == 2 * BUDGET, "each dead store spent one operation's retries of its own"


def test_the_next_pass_asks_the_store_again_and_reads_it_once_it_is_back(tmp_path, caplog):
    caplog.set_level(logging.DEBUG, logger=RETRY_LOGGER)
    breaker = PassBreaker()
    root = tmp_path / "store"
    store = breaker.guard(filled(root))
    away = serve_io_errors(root)

    with breaker.one_pass():
        assert read_all(store, KEYS) == dict.fromkeys(KEYS, "Unreachable")
    with breaker.one_pass():  # still out: asked again, and given up on again after one operation
        assert read_all(store, KEYS) == dict.fromkeys(KEYS, "Unreachable")
    assert retries(caplog) == 2 * BUDGET
    serve_again(root, away)
    with breaker.one_pass():
        assert read_all(store, KEYS) == dict.fromkeys(KEYS, "{}")
    assert read_all(store, KEYS) == dict.fromkeys(KEYS, "{}"), "between passes reads go through"


def test_outside_a_pass_every_operation_is_tried():
    breaker = PassBreaker()
    breaker.gave_up("file:///a", Unreachable("out"))
    assert breaker.refusal("file:///a") is None
    with breaker.one_pass():
        breaker.gave_up("file:///a", Unreachable("out"))
        assert breaker.refusal("file:///a") == "out"
        assert breaker.refusal("file:///b") is None
        with pytest.raises(RuntimeError), breaker.one_pass():
            pass
    assert breaker.refusal("file:///a") is None
