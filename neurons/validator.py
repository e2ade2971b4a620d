"""A DisTrAI validator, as a script: `python neurons/validator.py --help`. The validator is
`validators.main` (installed as the `distrai-validator` command), which says how to run it."""

import sys

from distrai.node.stopping import stop_on_signals

if __name__ == "__main__":
    # before the validator's modules load: a Ctrl-C while they load stops cleanly too
    stop = stop_on_signals()
    from validators.main import main

    sys.exit(main(stop=stop))
