"""A DisTrAI validator: checks and scores every miner's update, aggregates the best into the next
global model, and sets weights on chain.

    distrai-validator --run.config RUN.toml --wallet.name NAME --wallet.hotkey HOTKEY \
        --subtensor.network finney --store.url s3://bucket/prefix --store.endpoint URL

(`python neurons/validator.py …` runs the same.) Torch and the model code load after the flags are
read (`validators.settings.ValidatorSettings`) and the checks that need no model have passed
(`distrai.node.build`): `--help` and those refusals answer in well under a second. The honest
validator loads none of the leader's cheats (`validators.leader_adversaries`).
"""

from __future__ import annotations

import logging
import sys
import threading
from typing import TYPE_CHECKING

from distrai.chain.base import ChainError
from distrai.node.build import build_node, run_node
from distrai.node.stopping import stop_on_signals
from validators.settings import ValidatorSettings

if TYPE_CHECKING:
    from validators.leader_behaviour import LeaderBehaviour


def main(argv: list[str] | None = None, stop: threading.Event | None = None) -> int:
    """Run a validator until `stop` (by default, set by SIGINT or SIGTERM from here on)."""
    stop = stop or stop_on_signals()
    args = ValidatorSettings.parser(description=__doc__).parse_args(argv)
    try:
        settings = ValidatorSettings.from_args(args)
        node = build_node(settings, "validator", stop=stop)
    except (ValueError, FileNotFoundError, ChainError) as exc:
        print(f"validator cannot start: {exc}", file=sys.stderr)
        return 2
    if stop.is_set():
        node.metrics.close()
        return 0
    from validators.validator import Validator, ValidatorOptions

    options = ValidatorOptions(work_dir=node.work_dir, behaviour=leader_behaviour(settings))
    validator = Validator(node, options)
    validator.announce()
    logging.getLogger("distrai.validator").info(
        "validator %s started on run %s…, %s",
        node.wallet.hotkey.ss58_address,
        node.runtime.run_id[:12],
        f"its last window checked {validator.state.window}"
        if validator.state.window >= 0
        else "no window checked yet",
    )
    return run_node("validator", node, lambda: validator.run(stop, node.max_windows), stop)


def leader_behaviour(settings: ValidatorSettings) -> LeaderBehaviour:
    """The honest leader's behaviour, or the cheat of --validator.adversary
    (`validators.leader_adversaries`, loaded only for one)."""
    from validators.leader_behaviour import LeaderBehaviour

    if settings.validator_adversary == "honest":
        return LeaderBehaviour()
    from validators.leader_adversaries import leader_behaviour as cheat

    return cheat(settings.validator_adversary, settings.validator_colluder)


if __name__ == "__main__":
    sys.exit(main())
