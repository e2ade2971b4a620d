"""One local network with steering leaders and a miner on two data-parallel processes, run once per test
session and shared: the malicious-leader end-to-end test reads the honest validator's reports and every
node's log, the parallel-miner test the two-rank miner's manifests and the validators' replays of it.

Three honest miners, the first as two data-parallel processes (`torchrun`, gloo on CPU), and three
validators, as separate processes: the one with the most stake poisons its aggregates, the next
re-weights them, the third is honest (tests/support/parallel-localnet.toml: the shipped cpu-localnet
config with SDPA attention and fused AdamW, every miner replayed in every window), for `WINDOWS`
windows at 0.7 s per block, as test_localnet_e2e.py runs the shipped config (21-s windows: a miner
trains its 90 steps in about 8 s, a validator checks a window in about 3.5 s of its 8.4-s
validate phase, on 2 cores)."""

from __future__ import annotations

from pathlib import Path

from distrai.localnet import Localnet, LocalnetOptions
from support.findings_net import FinishedNet

WINDOWS = 3
CONFIG = Path(__file__).parent / "parallel-localnet.toml"
LEADERS = ("poison", "reweight")


def run_leader_net(work: Path) -> FinishedNet:
    net = Localnet(
        LocalnetOptions(
            work=work,
            miners=3,
            validators=3,
            windows=WINDOWS,
            block_time=0.7,
            miner_ranks=2,
            leader_adversaries=LEADERS,
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
