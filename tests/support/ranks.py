"""Gloo ranks for the training tests, forked from a warm process instead of started by torchrun.

torchrun starts a fresh interpreter for itself and for every rank, and each spends ~4 CPU-s importing
torch and transformers before its first step: the training tests start ~20 ranks. Here every rank
is forked by multiprocessing's fork server, which imports those modules once for the whole test
session and has run no torch operation (so no thread pool is forked). Each rank gets the
environment torchrun gives it (RANK, LOCAL_RANK, WORLD_SIZE, LOCAL_WORLD_SIZE, MASTER_ADDR,
MASTER_PORT), so the code under test (`distrai.train.parallel.launched`, `join`, `leave`) runs as it
does under torchrun. The neurons' own launch by torchrun is tested with torchrun
(tests/test_neurons.py, the leader network's two-rank miner).
"""

from __future__ import annotations

import multiprocessing
import os
import socket
from collections.abc import Callable

PRELOAD = ["torch", "transformers.modeling_utils", "distrai.train.parallel", "distrai.train.inner"]
"""What the fork server imports once, before it forks any rank."""

TIMEOUT_S = 300
"""A guard against a hung collective, far above what a rank takes even on a busy machine."""

_context: multiprocessing.context.BaseContext | None = None


def fork_server() -> multiprocessing.context.BaseContext:
    global _context
    if _context is None:
        _context = multiprocessing.get_context("forkserver")
        _context.set_forkserver_preload(PRELOAD)
    return _context


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _rank(target: Callable[..., None], rank: int, world: int, port: int, args: tuple) -> None:
    os.environ.update(
        RANK=str(rank),
        LOCAL_RANK=str(rank),
        WORLD_SIZE=str(world),
        LOCAL_WORLD_SIZE=str(world),
        MASTER_ADDR="127.0.0.1",
        MASTER_PORT=str(port),
    )
    target(*args)


def run_ranks(world: int, target: Callable[..., None], *args: object) -> None:
    """`target(*args)` on `world` gloo ranks (a module-level function, as a rank's `main`); every
    rank must return. A rank's traceback goes to the test's captured stderr."""
    context = fork_server()
    port = free_port()
    ranks = [context.Process(target=_rank, args=(target, r, world, port, args)) for r in range(world)]
    for process in ranks:
        process.start()
    for process in ranks:
        process.join(TIMEOUT_S)
    hung = [r for r, process in enumerate(ranks) if process.is_alive()]
    for process in ranks:
        if process.is_alive():
            process.kill()
            process.join()
    assert not hung, f"rank(s) {hung} of {world} still running after {TIMEOUT_S} s"
    codes = [process.exitcode for process in ranks]
    assert codes == [0] * world, f"the ranks exited with {codes} (tracebacks in the captured stderr)"
