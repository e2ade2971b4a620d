"""Many miners in one process, for benchmarks of a subnet with more miners than a laptop holds
processes (each Python process with torch takes about 0.5 GB; a tiny model's miner adds about 8 MB).

Each miner is the project's own `Miner`, built from the same flags as `neurons/miner.py`, with its
own wallet, chain connection, work dir, runtime, uploader thread and metrics; it runs in its own
thread. Only the process is shared, so the miners share the GIL (torch releases it while it computes).

    python bench/_miner_swarm.py MINER[=ADVERSARY] ... --work.root DIR [the flags of neurons/miner.py]
"""

from __future__ import annotations

import sys
import threading
from pathlib import Path

from distrai.node.build import build_node
from distrai.node.settings import NodeSettings
from distrai.node.stopping import stop_on_signals
from miners.adversaries import behaviour
from miners.miner import Miner, MinerOptions


def main(argv: list[str] | None = None) -> int:
    parser = NodeSettings.parser("bench/_miner_swarm.py", __doc__)
    parser.add_argument("miners", nargs="+", help="wallet names, each optionally =ADVERSARY")
    parser.add_argument("--work.root", required=True, help="each miner works in DIR/<wallet name>")
    args = parser.parse_args(argv)
    shared = NodeSettings.from_args(args)
    root = Path(vars(args)["work.root"])
    stop = stop_on_signals()
    built = []
    for entry in args.miners:
        name, _, adversary = entry.partition("=")
        settings = shared.model_copy(update={"wallet_name": name, "work_dir": str(root / name)})
        node = build_node(settings, "miner")
        miner = Miner(node, MinerOptions(node.work_dir, behaviour(adversary or "honest")))
        miner.announce()
        built.append((name, miner, node))
    threads = [
        threading.Thread(target=miner.run, args=(stop, node.max_windows), name=name, daemon=True)
        for name, miner, node in built
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        while thread.is_alive():
            thread.join(0.5)
    for _, _, node in built:
        node.metrics.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
