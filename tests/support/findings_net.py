"""One short local network with a cheating miner, run once per test session and shared: the findings
end-to-end test reads its validators' reports, the dashboard's browser test reads the same network.
It runs while other tests do (`support.background`).

Two honest miners and one that trains on other miners' data (`--miner.adversary wrongdata`), two
validators that share the replays (tests/support/shared-localnet.toml, `replicas = 1`), as separate
processes, for `WINDOWS` windows at 1 s per block, the pace the config's offsets assume: a validator
checks a window in under 3 s of its 12-s validate phase on 2 cores, with room to spare for the tests
running beside it."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

from distrai.localnet.network import Localnet, LocalnetOptions
from support.background import start

WINDOWS = 3
CONFIG = Path(__file__).parent / "shared-localnet.toml"
ADVERSARY = "wrongdata"


def start_findings_net(work: Path, env: Mapping[str, str]) -> Localnet:
    return start(
        Localnet(
            LocalnetOptions(
                work=work,
                miners=2,
                validators=2,
                windows=WINDOWS,
                block_time=1.0,
                adversaries=(ADVERSARY,),
                run_config=CONFIG,
                warm_start=True,
            )
        ),
        env,
    )
