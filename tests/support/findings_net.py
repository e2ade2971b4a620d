"""One short local network with a cheating miner, run once per test session and shared: the findings
end-to-end test reads its validators' reports, the dashboard's browser test reads the same network.

Two honest miners and one that trains on other miners' data (`--miner.adversary wrongdata`), two
validators that share the replays (tests/support/shared-localnet.toml, `replicas = 1`), as separate
processes, for `WINDOWS` windows at 0.7 s per block, as test_localnet_e2e.py runs the shipped config
(21-s windows: a miner trains its 90 steps in about 7 s, a validator checks a window in under 3 s of
its 8.4-s validate phase, on 2 cores)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from distrai.localnet import Localnet, LocalnetOptions

WINDOWS = 3
CONFIG = Path(__file__).parent / "shared-localnet.toml"
ADVERSARY = "wrongdata"


@dataclass(frozen=True)
class FinishedNet:
    net: Localnet
    finished: bool
    """whether every node exited on its own within the time allowed"""


def run_findings_net(work: Path) -> FinishedNet:
    net = Localnet(
        LocalnetOptions(
            work=work,
            miners=2,
            validators=2,
            windows=WINDOWS,
            block_time=0.7,
            adversaries=(ADVERSARY,),
            run_config=CONFIG,
        )
    )
    net.setup()
    net.start()
    try:
        finished = net.wait(600)
    finally:
        net.stop()
    return FinishedNet(net, finished)
