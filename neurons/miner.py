"""A DisTrAI miner, as a script: `python neurons/miner.py --help`, or under torchrun
(`torchrun --standalone --nproc-per-node N neurons/miner.py … --device cuda`). The miner is
`miners.main` (installed as the `distrai-miner` command), which says how to run it."""

import sys

from distrai.node.stopping import stop_on_signals

if __name__ == "__main__":
    # before the miner's modules load: a Ctrl-C while they load stops cleanly too
    stop = stop_on_signals()
    from miners.main import main

    sys.exit(main(stop=stop))
