"""A local S3 server for a network on one machine: moto's standalone server (`python -m moto.server`)
on 127.0.0.1, as a child process, so stores talk to it over real HTTP as they would to S3, R2 or
MinIO. It accepts any credentials; `FAKE_ACCESS_KEY_ID` and `FAKE_SECRET_ACCESS_KEY` are obviously
fake ones to sign with.

moto is a development dependency (`pip install -e ".[dev]"`), not a node's: `start_server` says so
when it is missing. `pause` and `resume` stop and continue the server's process (SIGSTOP, SIGCONT):
the kernel still accepts connections on its port, so a client's requests hang unanswered until it
resumes or the client's read timeout passes, as with a server that stalls.
"""

from __future__ import annotations

import contextlib
import importlib.util
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

FAKE_ACCESS_KEY_ID = "moto-test-access-key"
FAKE_SECRET_ACCESS_KEY = "moto-test-secret-key"
STARTUP_TIMEOUT_S = 30.0
PORT_ATTEMPTS = 5
"""Free ports tried in turn: another program may take the one probed before the server binds it."""


class PortTaken(RuntimeError):
    """The server exited at start because another program listens on its port."""


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on at the moment of asking."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def wait_until_serving(endpoint: str, process: subprocess.Popen[bytes], log_path: Path) -> None:
    deadline = time.monotonic() + STARTUP_TIMEOUT_S
    while time.monotonic() < deadline:
        if process.poll() is not None:
            said = log_path.read_text()[-2000:]
            error = PortTaken if "Address already in use" in said else RuntimeError
            raise error(f"moto server at {endpoint} exited with {process.returncode}: {said}")
        try:
            with urllib.request.urlopen(endpoint + "/moto-api/", timeout=1):
                return
        except (urllib.error.URLError, ConnectionError, TimeoutError):
            time.sleep(0.1)
    raise RuntimeError(f"moto server at {endpoint} did not answer within {STARTUP_TIMEOUT_S} s")


def start_server(log_path: Path, port: int | None = None) -> tuple[str, subprocess.Popen[bytes]]:
    """A moto server on `port` of 127.0.0.1, serving once this returns: its URL and process, which
    `stop_server` ends; its output goes to `log_path`. Without a port, a free one: when another program
    takes it between the probe and the server's bind (a busy machine starts many servers), another, up
    to `PORT_ATTEMPTS` in all. A given port that is taken is an error (`PortTaken`)."""
    if importlib.util.find_spec("moto") is None:
        raise RuntimeError(
            'a local S3 server needs moto\'s server: pip install "moto[server]" (pip install -e ".[dev]")'
        )
    for _ in range(PORT_ATTEMPTS - 1 if port is None else 0):
        with contextlib.suppress(PortTaken):
            return _start_on(free_port(), log_path)
    return _start_on(free_port() if port is None else port, log_path)


def _start_on(port: int, log_path: Path) -> tuple[str, subprocess.Popen[bytes]]:
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


def make_bucket(endpoint: str, bucket: str) -> None:
    """Create `bucket` on the server at `endpoint` (with the fake credentials)."""
    import boto3

    boto3.session.Session(
        aws_access_key_id=FAKE_ACCESS_KEY_ID,
        aws_secret_access_key=FAKE_SECRET_ACCESS_KEY,
        region_name="us-east-1",
    ).client("s3", endpoint_url=endpoint).create_bucket(Bucket=bucket)


def pause(process: subprocess.Popen[bytes]) -> None:
    """Stop the server's process (SIGSTOP): it answers nothing until `resume`."""
    os.kill(process.pid, signal.SIGSTOP)


def resume(process: subprocess.Popen[bytes]) -> None:
    """Continue a paused server's process (SIGCONT)."""
    os.kill(process.pid, signal.SIGCONT)


def stop_server(process: subprocess.Popen[bytes]) -> None:
    """End the server, a paused one too (it is continued first, so that it can exit)."""
    if process.poll() is None:
        resume(process)
    process.terminate()
    try:
        process.wait(timeout=10)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()
