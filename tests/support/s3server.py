"""Pytest fixtures for a real S3 protocol server on 127.0.0.1: moto's standalone server.

The server runs as a child process (`python -m moto.server`) once per test session, so the stores
talk to it over real HTTP exactly as they would to S3, R2 or MinIO. It accepts any credentials;
the tests use the obviously fake ones below and never read real ones.

Use with `pytest_plugins = ["tests.support.s3server"]`; fixtures: `s3_endpoint` (the URL),
`s3_bucket` (a fresh, empty bucket per test), `s3_credentials` (the fake keys, as keyword arguments
of `S3Config` and `open_store`) and `unused_endpoint` (a URL where nothing listens). A background
network runs a server of its own (`start_server`, `stop_server`).
"""

from __future__ import annotations

import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Iterator
from pathlib import Path

import boto3
import pytest

FAKE_ACCESS_KEY_ID = "moto-test-access-key"
FAKE_SECRET_ACCESS_KEY = "moto-test-secret-key"
STARTUP_TIMEOUT_S = 30.0


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on at the moment of asking."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def wait_until_serving(endpoint: str, process: subprocess.Popen[bytes], log_path: Path) -> None:
    deadline = time.monotonic() + STARTUP_TIMEOUT_S
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(
                f"moto server exited with {process.returncode}: {log_path.read_text()[-2000:]}"
            )
        try:
            with urllib.request.urlopen(endpoint + "/moto-api/", timeout=1):
                return
        except (urllib.error.URLError, ConnectionError, TimeoutError):
            time.sleep(0.1)
    raise RuntimeError(f"moto server at {endpoint} did not answer within {STARTUP_TIMEOUT_S} s")


def start_server(log_path: Path) -> tuple[str, subprocess.Popen[bytes]]:
    """A moto server on a free port of 127.0.0.1, serving once this returns: its URL and process,
    which `stop_server` ends; its output goes to `log_path`."""
    port = free_port()
    endpoint = f"http://127.0.0.1:{port}"
    with open(log_path, "wb") as log:
        process = subprocess.Popen(
            [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
            stdout=log,
            stderr=subprocess.STDOUT,
        )
    try:
        wait_until_serving(endpoint, process, log_path)
    except BaseException:
        stop_server(process)
        raise
    return endpoint, process


def stop_server(process: subprocess.Popen[bytes]) -> None:
    process.terminate()
    try:
        process.wait(timeout=10)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()


@pytest.fixture(scope="session")
def s3_endpoint(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """The URL of a moto S3 server started for this test session."""
    endpoint, process = start_server(tmp_path_factory.mktemp("moto") / "server.log")
    try:
        yield endpoint
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
