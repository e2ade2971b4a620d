"""Local networks that run while other tests do.

A local network's nodes spend most of a run waiting for the chain's blocks, which follow the wall
clock: a network whose tests only read it once it has ended need not hold the session up while it
runs. `Networks` starts the session's networks one at a time, each between two tests once the one
before it has ended, and the tests that read a network wait for its end (tests/conftest.py runs
them after the others).

A network is set up and started between two tests, never during one, so its nodes start from the
session's environment and working directory, not from a test's monkeypatched ones; the tests that
read it see what a network started by the test itself would have left: every node exited on its
own within `TIMEOUT_S` of the start, or was stopped then."""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import pytest

from distrai.localnet import Localnet

TIMEOUT_S = 600.0
"""How long a network may run before it is stopped and counted as unfinished."""


@dataclass(frozen=True)
class FinishedNet:
    net: Localnet
    finished: bool
    """whether every node exited on its own within `TIMEOUT_S` of the start"""


@dataclass
class _Running:
    name: str
    net: Localnet
    started: float


class Networks:
    """The networks `names` (keys of `starters`, in the order they run). A starter sets a network up
    in the folder it is given and starts its nodes, without waiting for them."""

    def __init__(
        self,
        starters: Mapping[str, Callable[[Path], Localnet]],
        names: Sequence[str],
        folders: pytest.TempPathFactory,
    ):
        self._starters = starters
        self._queue = list(names)
        self._folders = folders
        self._running: _Running | None = None
        self._done: dict[str, FinishedNet | Exception] = {}

    def tick(self) -> None:
        """Between two tests: end the running network if every node has exited (or its time is
        up), then start the next."""
        if self._running is not None:
            if not any(n.running() for n in self._running.net.neurons):
                self._end(finished=True)
            elif time.monotonic() - self._running.started > TIMEOUT_S:
                self._end(finished=False)
        if self._running is None and self._queue:
            self._start(self._queue.pop(0))

    def result(self, name: str) -> FinishedNet:
        """The network `name` run to its end; the networks queued before it run first."""
        running = self._running.name if self._running is not None else None
        if name not in self._done and name not in self._queue and name != running:
            self._queue.append(name)
        while name not in self._done:
            self._run_one()
        done = self._done[name]
        if isinstance(done, Exception):
            raise done
        return done

    def drain(self) -> None:
        """Run every queued network to its end (before a test that runs a network of its own)."""
        while self._running is not None or self._queue:
            self._run_one()

    def close(self) -> None:
        """Stop the running network and start no other (the session is over)."""
        self._queue.clear()
        if self._running is not None:
            self._end(finished=False)

    def _run_one(self) -> None:
        """Wait for the running network's end, or start the next if none runs."""
        if self._running is None:
            self._start(self._queue.pop(0))
            return
        left = TIMEOUT_S - (time.monotonic() - self._running.started)
        self._end(finished=self._running.net.wait(max(left, 0.0)))

    def _start(self, name: str) -> None:
        try:
            net = self._starters[name](self._folders.mktemp(name) / "net")
        except Exception as exc:
            self._done[name] = exc
            return
        self._running = _Running(name, net, time.monotonic())

    def _end(self, finished: bool) -> None:
        running, self._running = self._running, None
        running.net.stop()
        self._done[running.name] = FinishedNet(running.net, finished)


def start(net: Localnet) -> Localnet:
    """Set `net` up and start its nodes; if they cannot all start, stop those that did."""
    net.setup()
    try:
        net.start()
    except BaseException:
        net.stop()
        raise
    return net
