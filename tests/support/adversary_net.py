"""Every adversary of the threat model on one local network, run once per test session while other
tests do (`support.background`); tests/test_adversaries_e2e.py reads it.

The network of `bench/verification.py`'s adversary run: 3 honest miners and one miner per adversary
type, as separate processes through `neurons/miner.py --miner.adversary TYPE`, and two validators
that challenge every segment of every miner (tests/support/adversary-localnet.toml), for `WINDOWS`
windows at 1 s per block, the pace the config's offsets assume: each validator checks the 18 miners
in about 6 s of its 32-s validate phase on 2 cores, with room to spare for the tests running beside
it."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

from distrai.localnet.network import Localnet
from miners.adversaries import ADVERSARIES
from support.bench_jobs import bench_module

WINDOWS = 3
HONEST = 3
NAME = "adversary run"
CONFIG = Path(__file__).parent / "adversary-localnet.toml"


def start_adversary_net(work: Path, env: Mapping[str, str]) -> Localnet:
    """`bench/verification.py`'s network of its adversary run, with the suite's config and windows,
    set up and started by the bench's own `launch`."""
    verification = bench_module("verification")
    net = verification.network(work, CONFIG, HONEST, tuple(ADVERSARIES), WINDOWS, warm_start=True)
    return verification.launch(NAME, net, env)
