"""Pytest fixtures for a real S3 protocol server on 127.0.0.1: moto's standalone server.

The server runs as a child process (`python -m moto.server`) once per test session, so the stores
talk to it over real HTTP exactly as they would to S3, R2 or MinIO. It accepts any credentials;
the tests use the obviously fake ones of `distrai.localnet.s3server` and never read real ones.

Use with `pytest_plugins = ["tests.support.s3server"]`; fixtures: `s3_endpoint` (the URL),
`s3_bucket` (a fresh, empty bucket per test), `s3_credentials` (the fake keys, as keyword arguments
of `S3Config` and `open_store`), `unused_endpoint` (a URL where nothing listens) and `own_s3_server`
(a server of the test's own, to pause: its URL and process). A background
network runs a server of its own (`start_server`, `stop_server`, from `distrai.localnet.s3server`).
"""

from __future__ import annotations

import subprocess
import uuid
from collections.abc import Iterator
from pathlib import Path

import boto3
import pytest

from distrai.localnet.s3server import (
    FAKE_ACCESS_KEY_ID,
    FAKE_SECRET_ACCESS_KEY,
    free_port,
    start_server,
    stop_server,
)

__all__ = ["FAKE_ACCESS_KEY_ID", "FAKE_SECRET_ACCESS_KEY", "free_port", "start_server", "stop_server"]


@pytest.fixture(scope="session")
def s3_endpoint(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """The URL of a moto S3 server started for this test session."""
    endpoint, process = start_server(tmp_path_factory.mktemp("moto") / "server.log")
    try:
        yield endpoint
    finally:
        stop_server(process)


@pytest.fixture
def own_s3_server(tmp_path: Path) -> Iterator[tuple[str, subprocess.Popen[bytes]]]:
    """A moto server of this test's own (its URL and process), which it may pause without
    disturbing the session's."""
    endpoint, process = start_server(tmp_path / "own-server.log")
    try:
        yield endpoint, process
    finally:
        stop_server(process)


@pytest.fixture(scope="session")
def s3_admin(s3_endpoint: str):
    """A plain boto3 client of the session's server, for setting up buckets."""
    return boto3.session.Session(
        aws_access_key_id=FAKE_ACCESS_KEY_ID,
        aws_secret_access_key=FAKE_SECRET_ACCESS_KEY,
        region_name="us-east-1",
    ).client("s3", endpoint_url=s3_endpoint)


@pytest.fixture
def s3_bucket(s3_admin) -> str:
    """A new, empty bucket on the session's server; its name."""
    name = f"test-{uuid.uuid4().hex[:20]}"
    s3_admin.create_bucket(Bucket=name)
    return name


@pytest.fixture
def s3_credentials() -> dict[str, str]:
    return {"access_key_id": FAKE_ACCESS_KEY_ID, "secret_access_key": FAKE_SECRET_ACCESS_KEY}


@pytest.fixture
def unused_endpoint() -> str:
    """An HTTP endpoint on 127.0.0.1 where nothing listens, for connection failures."""
    return f"http://127.0.0.1:{free_port()}"
