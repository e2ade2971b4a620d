"""One local network with steering leaders and miners on two processes, run once per test session and
shared: the malicious-leader end-to-end test reads the honest validator's reports and every node's log,
the parallel-miner test the two-rank miners' manifests and the validators' replays of them. It runs
while other tests do (`support.background`).

Three honest miners, the first as two data-parallel processes (`torchrun`, gloo on CPU), the second as
two processes that shard the model over them (FSDP2), a fourth miner that publishes poisoned updates
(`poison`), and four validators, as separate processes: the one with the most stake colludes with the
poisoning miner (its report passes that miner's update and fails the honest ones, and its aggregate is
what that report implies), the next poisons its aggregates, the next re-weights them, the fourth is
honest (tests/support/parallel-localnet.toml: the shipped cpu-localnet config with SDPA attention and
fused AdamW, every miner replayed in every window), for `WINDOWS` windows at `BLOCK_TIME` seconds per
block: a validator checks a window in about 3.5 s alone, and beside the suite in up to 22 s."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

from distrai.localnet.network import Localnet, LocalnetOptions
from support.background import start

WINDOWS = 5
BLOCK_TIME = 1.5
"""Seconds per block: the validate phase's 12 blocks are 18 s. At 1 s per block the honest validator
checked windows in 11-22 s of its 12 in fresh-clone CI runs (it waits for the other validators'
measurements until the score patience), published late, and its reports named no refusal."""
CONFIG = Path(__file__).parent / "parallel-localnet.toml"
LEADERS = ("collude", "poison", "reweight")
MINER_ADVERSARIES = ("poison",)
"""The colluding leader's miner."""


def start_leader_net(work: Path, env: Mapping[str, str]) -> Localnet:
    return start(
        Localnet(
            LocalnetOptions(
                work=work,
                miners=3,
                validators=4,
                windows=WINDOWS,
                block_time=BLOCK_TIME,
                miner_ranks=2,
                sharded_miner_ranks=2,
                adversaries=MINER_ADVERSARIES,
                leader_adversaries=LEADERS,
                run_config=CONFIG,
                warm_start=True,
            )
        ),
        env,
    )
