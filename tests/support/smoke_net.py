"""The GPU smoke window's command on a CPU, run once per test session while other tests do
(`support.background`); tests/test_gpu_smoke.py reads it.

`distrai localnet --device cpu --run.config tests/support/gpu-smoke-cpu.toml --miners 2 --validators 1
--windows 3 --data.files …` as one process: the command itself prepares the run's data from local
files (the first `FILES` modules of this Python's standard library, a BPE of the config's 1,024
tokens), runs the nodes, computes the held-out curve and writes the report. The chain runs at 1 s per
block, the config's pace: the tiny model trains a window's 20 steps in about 4 s of its 40-s train
phase and the validator checks a window in about 3 s of its 22-s validate phase on 2 cores (measured
alone), room enough beside the other background jobs (at 0.5 s per block, a miner beside the
adversary network's start trained 10 of its 20 steps); the whole command runs in about 3 minutes."""

from __future__ import annotations

import subprocess
import sysconfig
from collections.abc import Mapping
from pathlib import Path

from distrai.localnet.network import Neuron

CONFIG = Path(__file__).parent / "gpu-smoke-cpu.toml"
WINDOWS = 3
FILES = 40
BLOCK_TIME = 1.0
KEPT_STATES = 2
"""The miners keep boundary 0 and the last of a window's 3 on disk (`miners.kept_states`): a challenge
of segment 1 (half of them) reveals a state rebuilt by replay after the draw, which the validator's
replay must then match bit for bit."""


def data_files() -> list[str]:
    """Local text: the first `FILES` top-level modules of this Python's standard library."""
    return [str(p) for p in sorted(Path(sysconfig.get_paths()["stdlib"]).glob("*.py"))[:FILES]]


def smoke_command(work: Path) -> list[str]:
    """The arguments of `python -m distrai.cli localnet …` for the smoke window on a CPU."""
    return [
        "-m", "distrai.cli", "localnet", "--device", "cpu", "--run.config", str(CONFIG),
        "--miners", "2", "--validators", "1", "--windows", str(WINDOWS), "--block-time", str(BLOCK_TIME),
        "--work", str(work), "--data.files", *data_files(),
    ]  # fmt: skip


class CommandNet:
    """`distrai localnet` running as a command: the one process `support.background` waits for
    (`neurons`), which starts the nodes and stops them on SIGINT (`stop`)."""

    def __init__(self, work: Path):
        self.work = work
        self.command = Neuron(
            "localnet", "command", "", work.parent, work.parent / "localnet.log", smoke_command(work)
        )
        self.neurons = [self.command]

    def wait(self, timeout: float) -> bool:
        try:
            self.command.process.wait(timeout)
        except subprocess.TimeoutExpired:
            return False
        return True

    def stop(self) -> None:
        self.command.stop(timeout=60.0)

    @property
    def output(self) -> str:
        return self.command.log_path.read_text(errors="replace") if self.command.log_path.exists() else ""


def start_smoke_net(work: Path, env: Mapping[str, str]) -> CommandNet:
    net = CommandNet(work)
    net.command.start({**env, "COLUMNS": "160", "DISTRAI_MINER_KEPT_STATES": str(KEPT_STATES)})
    return net
