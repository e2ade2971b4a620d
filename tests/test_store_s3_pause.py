"""An S3 server that stalls (bench/chaos.py's `s3` outage): a moto server of the test's own, stopped
with SIGSTOP, answers no request, yet the kernel still accepts connections on its port, so an
operation hangs until the store's read timeout; the store tries again as its retry policy says,
then gives up with `Unreachable`, and the same store serves once the server continues (SIGCONT).
The retries are counted by their log lines; time is measured only to bound the hang: each try
waits out the read timeout (the connection was accepted), none more than its timeouts."""

from __future__ import annotations

import logging
import time

import pytest

from distrai.localnet.s3server import make_bucket, pause, resume
from distrai.store import RetryPolicy, S3Config, S3Store
from distrai.store.base import Unreachable

pytest_plugins = ["tests.support.s3server"]

RETRY_LOGGER = "distrai.store.retry"
READ_TIMEOUT_S = 1.0
SLACK_S = 25.0
"""Scheduling delays on a loaded machine, over the hang's bound; far below the 2 x 60 s that botocore's default read timeout would take."""
RETRY = RetryPolicy(attempts=2, base_delay_s=0.0, max_delay_s=0.0)


def test_a_paused_server_fails_a_read_after_its_timeouts_and_retries_and_serves_it_once_continued(
    own_s3_server, s3_credentials, caplog
):
    endpoint, server = own_s3_server
    make_bucket(endpoint, "paused")
    config = S3Config(
        bucket="paused",
        endpoint_url=endpoint,
        path_style=True,
        connect_timeout_s=READ_TIMEOUT_S,
        read_timeout_s=READ_TIMEOUT_S,
        **s3_credentials,
    )
    store = S3Store(config, retry=RETRY)
    store.put("window-1/manifest.json", b"before")
    caplog.set_level(logging.DEBUG, logger=RETRY_LOGGER)

    pause(server)
    try:
        started = time.monotonic()
        with pytest.raises(
            Unreachable, match=r"s3 get 'window-1/manifest.json' in s3://paused/.* failed: Read timeout"
        ):
            store.get("window-1/manifest.json", 1024)
        hung = time.monotonic() - started
    finally:
        resume(server)

    tries = [r.getMessage() for r in caplog.records if r.name == RETRY_LOGGER]
    assert len(tries) == RETRY.attempts - 1 and "ReadTimeoutError" in tries[0], tries
    assert RETRY.attempts * READ_TIMEOUT_S <= hung < RETRY.attempts * 2 * READ_TIMEOUT_S + SLACK_S, hung
    assert store.get("window-1/manifest.json", 1024) == b"before"
    store.put("window-2/manifest.json", b"after")
    assert store.list("window-") == ["window-1/manifest.json", "window-2/manifest.json"]
