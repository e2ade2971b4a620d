"""The bounded chaos run of tests/test_chaos.py as a background job (`support.background`): bench/chaos.py's
harness drives its own local network in a thread while other tests run, and keeps what it says for
the tests that read it (a thread that printed would write into whichever test is running).

3 miners and 2 validators on the pipelined cpu-localnet config with the micro model
(`micro_run_config`) at `BLOCK_TIME` s per block, `WINDOWS` windows, `KILLS` SIGKILLs at moments
drawn from `SEED`, each followed at once by a restart with the same command (forked from a warm
interpreter, `distrai.localnet.warm_start`, as every start of it); the `OUTAGES`: the store
unreachable while the challenged miners upload their reveals, the chain locked across a window's
first block."""

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

from distrai.protocol.run import shipped_config_path  # noqa: E402
from support.tiny_models import with_micro_model  # noqa: E402

SEED = 1
KILLS = 7
WINDOWS = 5
BLOCK_TIME = 0.7
OUTAGES = (OutageSpec("store outage", "reveal", 8.0), OutageSpec("chain stall", "train", 5.0))
"""Outages of 11 and 7 blocks: the suite's run keeps them short. With the store out of reach for
just under half a window at each of its three placements and the chain locked for a third of one
(the share of a window the 30-s and 20-s outages of docs/reliability.md take at 2-s blocks), over 8
windows at 0.7-s blocks, every check passed alone (206 s), but in a fresh-clone CI run beside the
rest of the suite the validators fell 20 and more blocks behind, so two outages met in one window
and two windows were lost: at 0.7-s blocks on 2 busy cores a half-window outage leaves the nodes no
slack, and 2-s blocks would add some 7 minutes to the suite. The long outages run in
`bench/chaos.py` at 2-s blocks (docs/reliability.md, four runs)."""
STOP_S = 120.0
"""How long a stopped run may take to end its checks."""


def micro_run_config(folder: Path) -> Path:
    """The shipped cpu-localnet config with the `micro` model (`with_micro_model`), written into
    `folder`."""
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "chaos-run.toml"
    path.write_text(with_micro_model(shipped_config_path("cpu-localnet").read_text()))
    return path


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
        self.options = chaos_options(work, run_config=micro_run_config(work.parent))
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
