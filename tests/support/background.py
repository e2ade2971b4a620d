"""Local networks that run while other tests do.

A local network's nodes spend most of a run waiting for the chain's blocks, which follow the wall
clock: a network whose tests only read it once it has ended need not hold the session up while it
runs. `Networks` runs the session's networks in lanes: one network at a time in each lane, the next
started as soon as the one before it has ended (by a watcher thread, or between two tests), and the
tests that read a network wait for its end (tests/conftest.py runs them after the others). Jobs
that may run in any lane (`shared`) go, in their order, to the first lane that has started all of
its own: which lane runs them follows how long the jobs take on the machine at hand, not a split
made for one machine's speed.

A network starts from the session's environment, captured when the session began, never from a
test's monkeypatched one, and never while a test that patches process-wide state runs (`hold`): the
tests that read it see what a network started by the test itself would have left: every node exited
on its own within `TIMEOUT_S` of the start, or was stopped then."""

from __future__ import annotations

import shutil
import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

import pytest

if TYPE_CHECKING:
    from distrai.localnet.network import Localnet

TIMEOUT_S = 600.0
"""How long a network may run before it is stopped and counted as unfinished."""
POLL_S = 0.5
"""How often the watcher looks for a network's end."""


class Node(Protocol):
    def running(self) -> bool: ...


class Net(Protocol):
    """What a starter returns: a network whose nodes (or one job) run on their own."""

    neurons: Sequence[Node]

    def stop(self) -> None: ...


Starter = Callable[[Path, Mapping[str, str]], Net]
"""Sets a network up in the folder it is given and starts it in the environment it is given, without
waiting for it."""


@dataclass(frozen=True)
class FinishedNet:
    net: Net
    finished: bool
    """whether every node exited on its own within `TIMEOUT_S` of the start"""


@dataclass
class _Running:
    name: str
    net: Net
    started: float


class Networks:
    """The networks of `lanes` (each a sequence of keys of `starters`, in the order they run), then
    those of `shared`, each in the first lane free of its own, started in `env`."""

    listeners: list[Callable[..., None]] = []
    """Called with `job`, `lane`, `ev` and, at an end, `finished`, as each job starts ("start", in the
    thread that then starts its processes), has started them ("launched", the same thread) and ends
    ("end") (`support.timeline` writes them down)."""

    def __init__(
        self,
        starters: Mapping[str, Starter],
        lanes: Sequence[Sequence[str]],
        folders: pytest.TempPathFactory,
        env: Mapping[str, str],
        shared: Sequence[str] = (),
    ):
        self._starters = starters
        self._queues = [list(lane) for lane in lanes]
        self._shared = list(shared)
        self._running: list[_Running | None] = [None] * len(self._queues)
        self._folders = folders
        self._env = dict(env)
        self._done: dict[str, FinishedNet | Exception] = {}
        self._homes: dict[str, Path] = {}
        self._lock = threading.Lock()
        self._held = False
        self._closed = threading.Event()
        self._watcher = threading.Thread(target=self._watch, name="background networks", daemon=True)
        self._watcher.start()

    def hold(self, held: bool) -> None:
        """While held, the watcher starts no network (a test that patches process-wide state runs)."""
        with self._lock:
            self._held = held

    def tick(self) -> None:
        """Between two tests: end the networks whose nodes have all exited, start the next in each lane."""
        with self._lock:
            self._advance()

    def result(self, name: str) -> FinishedNet:
        """The network `name` run to its end; the networks queued before it in its lane run first."""
        while True:
            with self._lock:
                self._advance()
                if name in self._done:
                    done = self._done[name]
                    break
                if not self._pending(name):
                    raise KeyError(f"{name} is in no lane of this session")
            time.sleep(POLL_S)
        if isinstance(done, Exception):
            raise done
        return done

    def discard(self, name: str) -> None:
        """Remove the folder of `name`, which has ended and which no test reads any more: a network's
        stores and its miners' states take up to several hundred MB each, and kept to the session's
        end the folders came to about 2 GB together (docs/testing.md, "Disk")."""
        with self._lock:
            if name not in self._done:
                raise ValueError(f"{name} has not ended; its folder is still in use")
            home = self._homes.pop(name, None)
        if home is not None:
            shutil.rmtree(home, ignore_errors=True)

    def drain(self) -> None:
        """Run every queued network to its end (before a test that runs a network of its own)."""
        while True:
            with self._lock:
                self._advance()
                if not any(self._queues) and not self._shared and not any(self._running):
                    return
            time.sleep(POLL_S)

    def close(self) -> None:
        """Stop the running networks and start no other (the session is over)."""
        self._closed.set()
        self._watcher.join()
        with self._lock:
            for queue in [*self._queues, self._shared]:
                queue.clear()
            for lane, running in enumerate(self._running):
                if running is not None:
                    self._end(lane, finished=False)

    def _watch(self) -> None:
        while not self._closed.wait(POLL_S):
            with self._lock:
                if not self._held:
                    self._advance()

    def _pending(self, name: str) -> bool:
        return any(name in queue for queue in [*self._queues, self._shared]) or any(
            r is not None and r.name == name for r in self._running
        )

    def _advance(self) -> None:
        for lane, running in enumerate(self._running):
            if running is not None:
                if not any(n.running() for n in running.net.neurons):
                    self._end(lane, finished=True)
                elif time.monotonic() - running.started > TIMEOUT_S:
                    self._end(lane, finished=False)
            queue = self._queues[lane] or self._shared
            if self._running[lane] is None and queue and not self._closed.is_set():
                self._start(lane, queue.pop(0))

    def _tell(self, **event) -> None:
        for listener in self.listeners:
            listener(**event)

    def _start(self, lane: int, name: str) -> None:
        self._tell(job=name, lane=lane, ev="start")
        try:
            self._homes[name] = self._folders.mktemp(name)
            net = self._starters[name](self._homes[name] / "net", self._env)
        except Exception as exc:
            self._done[name] = exc
            return
        finally:
            self._tell(job=name, lane=lane, ev="launched")
        self._running[lane] = _Running(name, net, time.monotonic())

    def _end(self, lane: int, finished: bool) -> None:
        running, self._running[lane] = self._running[lane], None
        self._tell(job=running.name, lane=lane, ev="end", finished=finished)
        running.net.stop()
        self._done[running.name] = FinishedNet(running.net, finished)


def start(net: Localnet, env: Mapping[str, str]) -> Localnet:
    """Set `net` up and start its nodes in `env`."""
    net.setup()
    net.start(env)
    return net


def last_readers(items: Iterable[pytest.Item], names: Iterable[str]) -> dict[str, list[str]]:
    """For each item (by node id) that is the last of `items` to read one of the jobs `names`, those
    jobs: after it, no test of the session reads them."""
    last: dict[str, str] = {}
    for item in items:
        for name in names:
            if name in item.fixturenames:
                last[name] = item.nodeid
    readers: dict[str, list[str]] = {}
    for name, nodeid in last.items():
        readers.setdefault(nodeid, []).append(name)
    return readers
