"""The TCP gate (`distrai.localnet.tcp_gate`) that a chaos run puts in front of its S3 server: open,
it forwards both ways, half-closes included; shut, a new connection is refused and an open one is
reset while the server behind it runs on; opened again, it forwards again. Then the store's view of
it: an S3 store behind a shut gate fails with `Unreachable` that names the refused connection, says
so once however many tries fail (and once when it answers again), and serves what it held once the
gate opens."""

from __future__ import annotations

import logging
import socket
import threading

import pytest

from distrai.localnet.s3server import free_port, make_bucket
from distrai.localnet.tcp_gate import TcpGate
from distrai.store import RetryPolicy, S3Config, S3Store
from distrai.store.base import Unreachable

pytest_plugins = ["tests.support.s3server"]


@pytest.fixture
def echo_port():
    """An upstream server that echoes every connection until its client ends sending."""
    server = socket.create_server(("127.0.0.1", 0))

    def serve(conn: socket.socket) -> None:
        with conn:
            while data := conn.recv(4096):
                conn.sendall(data)

    def accept() -> None:
        while True:
            try:
                conn, _ = server.accept()
            except OSError:
                return
            threading.Thread(target=serve, args=(conn,), daemon=True).start()

    threading.Thread(target=accept, daemon=True).start()
    yield server.getsockname()[1]
    server.shutdown(socket.SHUT_RDWR)
    server.close()


@pytest.fixture
def gate(echo_port):
    gate = TcpGate(free_port(), echo_port)
    gate.open()
    yield gate
    gate.shut()


def talk(port: int, data: bytes) -> bytes:
    """Send `data`, end sending, and read until the other side ends."""
    with socket.create_connection(("127.0.0.1", port), timeout=10) as conn:
        conn.sendall(data)
        conn.shutdown(socket.SHUT_WR)
        received = b""
        while chunk := conn.recv(4096):
            received += chunk
        return received


def test_an_open_gate_forwards_what_is_sent_and_the_end_of_it(gate):
    big = bytes(range(256)) * 4096  # 1 MiB: many reads and writes each way
    assert talk(gate.port, big) == big
    assert talk(gate.port, b"again") == b"again"


def test_a_shut_gate_refuses_new_connections_and_resets_open_ones_then_opens_again(gate):
    held = socket.create_connection(("127.0.0.1", gate.port), timeout=10)
    held.sendall(b"ping")
    assert held.recv(4) == b"ping"

    gate.shut()
    assert not gate.is_open
    with pytest.raises(ConnectionRefusedError):
        socket.create_connection(("127.0.0.1", gate.port), timeout=10)
    try:
        ended = held.recv(4)
    except ConnectionResetError:
        ended = b""
    assert ended == b"", "a connection open when the gate shut must end"
    held.close()

    gate.open()
    assert talk(gate.port, b"back") == b"back"


def test_an_s3_store_behind_a_shut_gate_is_unreachable_and_serves_again_once_open(
    own_s3_server, s3_credentials, caplog
):
    endpoint, _ = own_s3_server
    make_bucket(endpoint, "gated")
    gate = TcpGate(free_port(), int(endpoint.rsplit(":", 1)[1]))
    gate.open()
    config = S3Config(
        bucket="gated", endpoint_url=f"http://127.0.0.1:{gate.port}", path_style=True, **s3_credentials
    )
    store = S3Store(config, retry=RetryPolicy(attempts=2, base_delay_s=0.0, max_delay_s=0.0))
    try:
        store.put("w1/manifest.json", b"before")
        caplog.set_level(logging.WARNING, logger="distrai.store")
        gate.shut()
        for _ in range(2):
            with pytest.raises(
                Unreachable, match=r"s3 get 'w1/manifest.json' in s3://gated/.* failed: Could not connect"
            ):
                store.get("w1/manifest.json", 1024)
        gate.open()
        assert store.get("w1/manifest.json", 1024) == b"before"
        assert store.get("w1/manifest.json", 1024) == b"before"
    finally:
        gate.shut()
    said = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
    # two operations of two tries each failed: one line when the first failed, one when it answered
    assert len(said) == 2, said
    assert said[0].startswith(f"the store {store.url} is out of reach: get 'w1/manifest.json' failed"), said
    assert said[1].startswith(f"the store {store.url} answered again after"), said
    assert said[1].endswith("(4 failed tries)"), said
