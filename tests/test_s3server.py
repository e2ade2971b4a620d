"""The local S3 server's start (`distrai.localnet.s3server.start_server`) when another program holds
its port: a port it was given is named in the error; a free port that another program took between
the probe and the server's bind (a busy machine starts many servers and nodes) is replaced by
another, a few times at most. The other program is a real listening socket."""

from __future__ import annotations

import socket
from collections.abc import Iterator

import pytest

from distrai.localnet import s3server
from distrai.localnet.s3server import PortTaken, free_port, make_bucket, start_server, stop_server


@pytest.fixture
def taken() -> Iterator[int]:
    """A port of 127.0.0.1 that another program listens on."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        yield holder.getsockname()[1]


def test_a_given_port_that_is_taken_is_named(tmp_path, taken):
    with pytest.raises(PortTaken, match=rf"127\.0\.0\.1:{taken} exited with 1: .*Address already in use"):
        start_server(tmp_path / "server.log", port=taken)


def test_a_free_port_taken_before_the_server_binds_it_is_replaced(tmp_path, taken, monkeypatch):
    probes = iter([taken])
    asked: list[int] = []

    def racing_probe() -> int:
        asked.append(next(probes, None) or free_port())
        return asked[-1]

    monkeypatch.setattr(s3server, "free_port", racing_probe)
    endpoint, process = start_server(tmp_path / "server.log")
    try:
        assert len(asked) == 2 and asked[0] == taken
        assert endpoint == f"http://127.0.0.1:{asked[1]}"
        make_bucket(endpoint, "serving")
    finally:
        stop_server(process)


def test_it_gives_up_after_its_attempts(tmp_path, taken, monkeypatch):
    monkeypatch.setattr(s3server, "PORT_ATTEMPTS", 2)
    asked: list[int] = []
    monkeypatch.setattr(s3server, "free_port", lambda: asked.append(taken) or taken)
    with pytest.raises(PortTaken, match=rf"127\.0\.0\.1:{taken}"):
        start_server(tmp_path / "server.log")
    assert asked == [taken, taken]
