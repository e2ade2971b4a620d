"""A TCP gate on 127.0.0.1: it forwards every connection made to its port to an upstream port, and
can be shut, so that the upstream server looks unreachable to its clients, then opened again.

A local network's chaos run puts one in front of its S3 server to make the store unreachable the way
a host that went away is: while shut, nothing listens on the gate's port (a new connection is
refused at once) and every connection that was open is reset, while the server itself and what it
holds are untouched. (Pausing the server's process is the other S3 outage, `s3server.pause`: there
the kernel still accepts connections and requests hang.)

A few sockets and threads rather than a fault-injecting proxy such as Toxiproxy: that is a server
of its own, a Go binary outside PyPI, which the suite's machines cannot fetch at run time.
"""

from __future__ import annotations

import contextlib
import socket
import struct
import threading

BUFFER_BYTES = 1 << 16


class TcpGate:
    def __init__(self, port: int, upstream_port: int, host: str = "127.0.0.1"):
        self.host = host
        self.port = port
        self.upstream_port = upstream_port
        self._lock = threading.Lock()
        self._listener: socket.socket | None = None
        self._open: set[socket.socket] = set()

    @property
    def is_open(self) -> bool:
        return self._listener is not None

    def open(self) -> None:
        """Listen on the gate's port and forward what connects (nothing changes when already open)."""
        with self._lock:
            if self._listener is not None:
                return
            listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            try:
                listener.bind((self.host, self.port))
                listener.listen(64)
            except OSError as exc:
                listener.close()
                raise OSError(f"the TCP gate could not listen on {self.host}:{self.port}: {exc}") from exc
            self._listener = listener
        threading.Thread(target=self._accept, args=(listener,), name=f"gate-{self.port}", daemon=True).start()

    def shut(self) -> None:
        """Stop listening (new connections are refused) and reset every open connection."""
        with self._lock:
            listener, self._listener = self._listener, None
            live, self._open = self._open, set()
        if listener is not None:
            _drop(listener)
        for sock in live:
            _reset(sock)

    def _accept(self, listener: socket.socket) -> None:
        while True:
            try:
                client, _ = listener.accept()
            except OSError:  # shut: the listener was shut down under this accept
                return
            try:
                upstream = socket.create_connection((self.host, self.upstream_port))
            except OSError:
                _reset(client)
                continue
            with self._lock:
                if self._listener is not listener:  # shut while this connection was being made
                    _reset(client)
                    _reset(upstream)
                    return
                self._open.update((client, upstream))
            ends = [2]  # the directions still flowing; the last to end closes both sockets
            for source, sink in ((client, upstream), (upstream, client)):
                threading.Thread(target=self._pump, args=(source, sink, ends), daemon=True).start()

    def _pump(self, source: socket.socket, sink: socket.socket, ends: list[int]) -> None:
        """Copy `source` to `sink` until `source` ends, then end `sink`'s sending side; the second
        direction to end closes both. An error (a reset by either end, or the gate's shut) resets both."""
        try:
            while data := source.recv(BUFFER_BYTES):
                sink.sendall(data)
            sink.shutdown(socket.SHUT_WR)
        except OSError:
            with self._lock:
                self._open.difference_update((source, sink))
            _reset(source)
            _reset(sink)
            return
        with self._lock:
            ends[0] -= 1
            if ends[0]:
                return
            self._open.difference_update((source, sink))
        source.close()  # both sides ended: what is still queued to send goes before the FIN
        sink.close()


def _drop(listener: socket.socket) -> None:
    """Stop a listening socket now: shutting it down wakes the `accept` blocked on it (Linux)."""
    with contextlib.suppress(OSError):
        listener.shutdown(socket.SHUT_RDWR)
    listener.close()


def _reset(sock: socket.socket) -> None:
    """Close `sock` with a reset (no lingering FIN), waking any thread blocked on it."""
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        sock.shutdown(socket.SHUT_RDWR)
    except OSError:
        pass
    sock.close()
