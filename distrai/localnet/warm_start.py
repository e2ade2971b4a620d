"""Node processes forked from a warm interpreter: the local network's nodes import torch and
transformers once, not once each.

A node spends ~4 CPU-s importing torch and transformers' modelling code before its first step
(docs/startup.md), and a local network starts a handful of them, then again after every restart.
`WarmStarter` runs one server process (`python -m distrai.localnet.warm_start SOCKET`) in the
environment the network gives its nodes; the server imports those modules once, runs no torch
operation (so no thread pool exists to be forked), and for each request forks a child that is the
node: its own session, its output appended to the node's log, its working folder, `sys.argv` and
`sys.path[0]` as `python SCRIPT ARGS...` sets them, and the script run as `__main__`. The child is
an ordinary process: it is signalled and killed by its pid; the server reaps it and tells the one
who asked its exit status, as the kernel tells a parent (negative: the signal that ended it).
`WarmProcess` is that asker's handle, with the `subprocess.Popen` methods the local network uses.

Only `python SCRIPT ...` commands are forked; others (a torchrun launch) start as usual. Operators'
nodes are started by hand and stay plain processes; this is how `distrai localnet` starts its own.
"""

from __future__ import annotations

import atexit
import contextlib
import json
import os
import runpy
import select
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import traceback
from collections.abc import Mapping, Sequence
from pathlib import Path

PRELOAD = ("torch", "transformers.modeling_utils")
"""What the server imports once: the bulk of a node's start (docs/startup.md)."""
READY_TIMEOUT_S = 120.0
"""How long the server may take to import `PRELOAD` and listen, on a busy machine."""
REAP_EVERY_S = 0.05


def cold_start(args: Sequence[str], env: Mapping[str, str], cwd: Path, log_path: Path) -> subprocess.Popen:
    """`python *args` as a fresh interpreter in a session of its own, appending to `log_path`."""
    with log_path.open("ab") as log:
        return subprocess.Popen(
            [sys.executable, *args],
            stdout=log,
            stderr=subprocess.STDOUT,
            env=dict(env),
            cwd=cwd,
            start_new_session=True,
        )


class WarmProcess:
    """A node forked by the server: `subprocess.Popen`'s `pid`, `returncode`, `poll`, `wait`,
    `send_signal` and `kill`. Its exit status arrives on the connection that asked for it."""

    def __init__(self, args: Sequence[str], connection: socket.socket, pid: int):
        self.args = list(args)
        self.pid = pid
        self.returncode: int | None = None
        self._connection = connection
        self._buffer = b""

    def poll(self) -> int | None:
        if self.returncode is None:
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.wait(0.0)
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        """The exit status, waiting up to `timeout` seconds (for ever when None); past it,
        `subprocess.TimeoutExpired`, as `Popen.wait` raises."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while self.returncode is None:
            left = None if deadline is None else max(0.0, deadline - time.monotonic())
            readable, _, _ = select.select([self._connection], [], [], left)
            if not readable:
                raise subprocess.TimeoutExpired(self.args, timeout or 0.0)
            chunk = self._connection.recv(4096)
            self._buffer += chunk
            if b"\n" in self._buffer:
                self.returncode = int(json.loads(self._buffer.split(b"\n", 1)[0])["status"])
                self._connection.close()
            elif not chunk:
                raise ConnectionError(f"the warm-start server went away while node {self.pid} ran")
        return self.returncode

    def send_signal(self, sig: int) -> None:
        if self.poll() is None:
            os.kill(self.pid, sig)

    def terminate(self) -> None:
        self.send_signal(signal.SIGTERM)

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)


class WarmStarter:
    """The server, started on first use in `env` (the environment every node it forks runs in),
    and the handles of what it forked. `stop` ends the server; nodes it forked keep running."""

    def __init__(self, env: Mapping[str, str], cwd: Path, log_path: Path):
        self.env = dict(env)
        self.cwd = cwd
        self.log_path = log_path
        self._folder: Path | None = None
        self._server: subprocess.Popen[bytes] | None = None
        self._lock = threading.Lock()

    @property
    def socket_path(self) -> Path:
        """In a folder of its own under the system's temp folder: a Unix socket's path is limited to
        107 bytes, and a network's folder may be deeper."""
        if self._folder is None:
            self._folder = Path(tempfile.mkdtemp(prefix="distrai-warm-"))
        return self._folder / "server.sock"

    def start(self, args: Sequence[str], env: Mapping[str, str], cwd: Path, log_path: Path):
        """`python *args` as a node, appending to `log_path`: forked from the warm server when
        `args` is `SCRIPT ...` and `env` is the server's; else an ordinary `subprocess.Popen`."""
        if not args or not str(args[0]).endswith(".py") or dict(env) != self.env:
            return cold_start(args, env, cwd, log_path)
        self._ensure_server()
        connection = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        connection.connect(str(self.socket_path))
        request = {"argv": [str(a) for a in args], "cwd": str(cwd), "log": str(log_path)}
        connection.sendall(json.dumps(request).encode() + b"\n")
        reply = b""
        while b"\n" not in reply:
            chunk = connection.recv(4096)
            if not chunk:
                raise ConnectionError(f"the warm-start server refused {args[0]}: {self._server_log()}")
            reply += chunk
        line, rest = reply.split(b"\n", 1)
        process = WarmProcess(args, connection, int(json.loads(line)["pid"]))
        process._buffer = rest
        return process

    def stop(self) -> None:
        with self._lock:
            if self._server is not None and self._server.poll() is None:
                self._server.terminate()
                self._server.wait(30)
            self._server = None
            if self._folder is not None:
                shutil.rmtree(self._folder, ignore_errors=True)
                self._folder = None

    def _ensure_server(self) -> None:
        with self._lock:
            if self._server is not None and self._server.poll() is None:
                return
            self.socket_path.unlink(missing_ok=True)
            with self.log_path.open("ab") as log:
                self._server = subprocess.Popen(
                    [sys.executable, "-m", "distrai.localnet.warm_start", str(self.socket_path)],
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    env=self.env,
                    cwd=self.cwd,
                    start_new_session=True,
                )
            deadline = time.monotonic() + READY_TIMEOUT_S
            while not self.socket_path.exists():
                if self._server.poll() is not None:
                    raise RuntimeError(f"the warm-start server exited: {self._server_log()}")
                if time.monotonic() > deadline:
                    raise RuntimeError(f"the warm-start server did not listen in {READY_TIMEOUT_S:.0f} s")
                time.sleep(0.05)

    def _server_log(self) -> str:
        return self.log_path.read_text(errors="replace")[-2000:] if self.log_path.exists() else "no log"


# -- the server ------------------------------------------------------------------------------------


def _exit_status(status: int) -> int:
    return -os.WTERMSIG(status) if os.WIFSIGNALED(status) else os.WEXITSTATUS(status)


def _run_node(request: dict) -> int:
    """In the forked child: become `python SCRIPT ARGS...` and run it; its exit code."""
    os.setsid()
    for sig in (signal.SIGCHLD, signal.SIGTERM):
        signal.signal(sig, signal.SIG_DFL)
    signal.signal(signal.SIGINT, signal.default_int_handler)
    log = os.open(request["log"], os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    devnull = os.open(os.devnull, os.O_RDONLY)
    os.dup2(devnull, 0)
    os.dup2(log, 1)
    os.dup2(log, 2)
    os.close(log)
    os.close(devnull)
    sys.stdout = open(1, "w", buffering=1, closefd=False)  # noqa: SIM115 - the process's own stdout
    sys.stderr = open(2, "w", buffering=1, closefd=False)  # noqa: SIM115
    os.chdir(request["cwd"])
    script = request["argv"][0]
    sys.argv = list(request["argv"])
    sys.path[0] = os.path.dirname(os.path.abspath(script))
    code = 0
    try:
        runpy.run_path(script, run_name="__main__")
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
        if exc.code is not None and not isinstance(exc.code, int):
            print(exc.code, file=sys.stderr)
    except BaseException:  # noqa: BLE001 - printed and turned into the exit code, as the interpreter does
        traceback.print_exc()
        code = 1
    threading._shutdown()  # type: ignore[attr-defined]  # as the interpreter does at exit: join non-daemon threads
    atexit._run_exitfuncs()
    sys.stdout.flush()
    sys.stderr.flush()
    return code


def serve(socket_path: str) -> None:
    """Import `PRELOAD`, then fork a node for each request until SIGTERM; one thread only."""
    for name in PRELOAD:
        __import__(name)
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    temporary = os.path.join(os.path.dirname(socket_path), f".{os.getpid()}.sock")
    listener.bind(temporary)
    listener.listen(64)
    os.rename(temporary, socket_path)  # listening once the path exists
    stopping = False

    def stop(*_):
        nonlocal stopping
        stopping = True

    signal.signal(signal.SIGTERM, stop)
    waiting: dict[int, socket.socket] = {}
    while not stopping:
        try:
            readable, _, _ = select.select([listener], [], [], REAP_EVERY_S)
        except InterruptedError:
            continue
        if readable:
            connection, _ = listener.accept()
            request = json.loads(connection.makefile("rb").readline())
            pid = os.fork()
            if pid == 0:
                listener.close()
                connection.close()
                for other in waiting.values():
                    other.close()
                os._exit(_run_node(request))
            connection.sendall(json.dumps({"pid": pid}).encode() + b"\n")
            waiting[pid] = connection
        while waiting:
            pid, status = os.waitpid(-1, os.WNOHANG)
            if pid == 0:
                break
            told = waiting.pop(pid, None)
            if told is not None:
                with contextlib.suppress(OSError):  # the asker is gone: nobody to tell
                    told.sendall(json.dumps({"status": _exit_status(status)}).encode() + b"\n")
                told.close()
    os.unlink(socket_path)


if __name__ == "__main__":
    serve(sys.argv[1])
