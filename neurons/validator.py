"""A DisTrAI validator: checks and scores every miner's update, aggregates the best into the next
global model, and sets weights on chain.

    python neurons/validator.py --run.config RUN.toml --wallet.name NAME --wallet.hotkey HOTKEY \
        --subtensor.network finney --store.url s3://bucket/prefix --store.endpoint URL

Torch and the model code load after the flags are parsed and the checks that need no model have
passed (`distrai.node.build`): `--help` and those refusals answer in well under a second.
"""

from __future__ import annotations

import logging
import os
import sys
import threading
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from distrai.node.stopping import chain_lost, stop_on_signals  # noqa: E402

if __name__ == "__main__":
    STOP = stop_on_signals()  # before the imports below: a Ctrl-C while they load stops cleanly too

from distrai.chain.base import ChainError  # noqa: E402
from distrai.node.build import build_node, build_parser  # noqa: E402
from validators.leader_adversary_names import LEADER_ADVERSARY_NAMES, check_leader_adversary  # noqa: E402


def main(argv: list[str] | None = None, stop: threading.Event | None = None) -> int:
    """Run a validator until `stop` (by default, set by SIGINT or SIGTERM from here on)."""
    stop = stop or stop_on_signals()
    parser = build_parser("neurons/validator.py", __doc__)
    parser.add_argument(
        "--validator.adversary",
        default=os.environ.get("DISTRAI_VALIDATOR_ADVERSARY", "honest"),
        choices=["honest", *LEADER_ADVERSARY_NAMES],
        help="as the aggregating leader, try to steer the global model in one of the ways every "
        "follower must refuse, for demonstrations and tests [env DISTRAI_VALIDATOR_ADVERSARY]",
    )
    parser.add_argument(
        "--validator.colluder",
        default=os.environ.get("DISTRAI_VALIDATOR_COLLUDER"),
        metavar="HOTKEY",
        help="with --validator.adversary collude: the ss58 hotkey of the colluding miner whose update the "
        "report passes (distrai localnet gives the poison adversary's) [env DISTRAI_VALIDATOR_COLLUDER]",
    )
    args = parser.parse_args(argv)
    adversary, colluder = getattr(args, "validator.adversary"), getattr(args, "validator.colluder")
    try:
        check_leader_adversary(adversary, colluder)
    except ValueError as exc:
        print(f"validator cannot start: {exc}", file=sys.stderr)
        return 2
    try:
        node = build_node(args, "validator", stop=stop)
    except (ValueError, FileNotFoundError, ChainError) as exc:
        print(f"validator cannot start: {exc}", file=sys.stderr)
        return 2
    if stop.is_set():
        node.metrics.close()
        return 0
    from distrai.data.cache import ShardError
    from validators.leader_adversaries import leader_behaviour
    from validators.validator import Validator, ValidatorOptions

    behaviour = leader_behaviour(adversary, colluder)
    validator = Validator(
        node.runtime,
        node.chain,
        node.wallet,
        node.store,
        node.store_url,
        ValidatorOptions(work_dir=node.work_dir, behaviour=behaviour),
        node.metrics,
        node.stores,
    )
    validator.announce()
    logging.getLogger("distrai.validator").info(
        "validator %s started on run %s…, %s",
        node.wallet.hotkey.ss58_address,
        node.runtime.run_id[:12],
        f"its last window checked {validator.state.window}"
        if validator.state.window >= 0
        else "no window checked yet",
    )
    try:
        validator.run(stop, node.max_windows)
    except ShardError as exc:
        print(f"validator stopped: the run's data cannot be read: {exc}", file=sys.stderr)
        return 1
    except ChainError as exc:
        return chain_lost("validator", exc, stop)
    finally:
        node.metrics.close()
    return 0


if __name__ == "__main__":
    sys.exit(main(stop=STOP))
