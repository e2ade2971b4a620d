"""The bounded chaos run of tests/test_chaos.py as a background job (`support.background`): bench/chaos.py's
harness drives its own local network in a thread while other tests run, and keeps what it says for
the tests that read it (a thread that printed would write into whichever test is running).

3 miners and 2 validators on the pipelined cpu-localnet config at `BLOCK_TIME` s per block, `WINDOWS`
windows, `KILLS` SIGKILLs at moments drawn from `SEED`, each followed at once by a restart with the
same command (forked from a warm interpreter, `distrai.localnet.warm_start`, as every start of it); the `OUTAGES`: the store unreachable across a reveal deadline (the validate phase), while the
challenged miners upload their reveals (the reveal phase) and while the miners fetch their shards
(the train phase), and the chain locked across a window's first block."""

from __future__ import annotations

import sys
import threading
from collections.abc import Mapping
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))
from _chaos_plan import ChaosOptions, OutageSpec  # noqa: E402
from _chaos_records import ChaosResult  # noqa: E402
from _chaos_run import Harness  # noqa: E402
from chaos import run_chaos  # noqa: E402

SEED = 1
KILLS = 7
WINDOWS = 8
BLOCK_TIME = 0.7
OUTAGES = (
    OutageSpec("store outage", "validate", 10.4),
    OutageSpec("store outage", "reveal", 10.4),
    OutageSpec("store outage", "train", 10.4),
    OutageSpec("chain stall", "train", 7.0),
)
"""The store out of reach for just under half a window (14.9 of 30 blocks) at each placement, and the
chain locked for a third of one (10 blocks): the share of a window that the 30-s store outages and
the 20-s chain lock of docs/reliability.md take at 2-s blocks (15 and 10 of 30 blocks), at the block
time the suite can afford (30 s at 0.7-s blocks would be more than a window)."""
STOP_S = 120.0
"""How long a stopped run may take to end its checks."""


def chaos_options(work: Path, **changes) -> ChaosOptions:
    """The run's options, with `changes` (the tests of the plan vary them)."""
    options = dict(
        work=work,
        kills=KILLS,
        windows=WINDOWS,
        seed=SEED,
        block_time=BLOCK_TIME,
        outages=OUTAGES,
        warm_start=True,
    )
    options.update(changes)
    return ChaosOptions(**options)


class ChaosJob:
    """One chaos run in a thread: running while the thread is (`neurons`), its `outcome` or `error` after."""

    def __init__(self, work: Path, env: Mapping[str, str]):
        self.options = chaos_options(work)
        self.said: list[str] = []
        self.harness = Harness(self.options, self.said.append, base_env=env)
        self.outcome: ChaosResult | None = None
        self.error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, name="chaos run", daemon=True)
        self.neurons = [self]

    def start(self) -> ChaosJob:
        self._thread.start()
        return self

    def running(self) -> bool:
        return self._thread.is_alive()

    def stop(self) -> None:
        """Stop the run's nodes if it is still under way (the session is over), and wait for its end."""
        if self._thread.is_alive():
            self.harness.net.stop()
        self._thread.join(timeout=STOP_S)

    def _run(self) -> None:
        try:
            self.outcome = run_chaos(self.options, self.said.append, harness=self.harness)
        except BaseException as exc:
            self.error = exc


def start_chaos_run(work: Path, env: Mapping[str, str]) -> ChaosJob:
    return ChaosJob(work, env).start()
