"""A DisTrAI miner: trains its share of the global model every window and publishes the update.

    python neurons/miner.py --run.config RUN.toml --wallet.name NAME --wallet.hotkey HOTKEY \
        --subtensor.network finney --store.url s3://bucket/prefix --store.endpoint URL --device cuda
"""

from __future__ import annotations

import logging
import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from distrai.chain.base import ChainError  # noqa: E402
from distrai.node import build_node, build_parser, stop_on_signals  # noqa: E402
from miners.behaviour import ADVERSARIES  # noqa: E402
from miners.miner import Miner  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    parser = build_parser("neurons/miner.py", __doc__)
    parser.add_argument(
        "--miner.idle",
        action="store_true",
        default=False,
        help="publish a zero update every window without training (the same as --miner.adversary idle)",
    )
    parser.add_argument(
        "--miner.adversary",
        default=os.environ.get("DISTRAI_MINER_ADVERSARY", "honest"),
        choices=["honest", *ADVERSARIES],
        help="cheat in one of the ways validators must catch, for demonstrations and tests "
        "[env DISTRAI_MINER_ADVERSARY]",
    )
    args = parser.parse_args(argv)
    adversary = "idle" if getattr(args, "miner.idle") else getattr(args, "miner.adversary")
    try:
        node = build_node(args, "miner")
    except (ValueError, FileNotFoundError, ChainError) as exc:
        print(f"miner cannot start: {exc}", file=sys.stderr)
        return 2
    miner = Miner.from_node(node, adversary)
    miner.announce()
    logging.getLogger("distrai.miner").info(
        "miner %s (%s) started on run %s…",
        node.wallet.hotkey.ss58_address,
        adversary,
        node.runtime.run_id[:12],
    )
    try:
        miner.run(stop_on_signals(), node.max_windows)
    finally:
        node.metrics.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
