"""Keep one core busy for a share of its time, to run the suite as a busy CI machine would:

    python tests/support/busy.py 0.6 &    # 60% of one core, until killed
    bash .ci/run; kill %1

A test that passes quiet and fails beside this waits for time, not for an event (docs/testing.md,
"On a busy machine"). The loop spins for `share` of each 50-ms slice and sleeps the rest."""

from __future__ import annotations

import argparse
import time

SLICE_S = 0.05


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("share", type=float, help="the share of one core to keep busy, in (0, 1]")
    share = parser.parse_args().share
    if not 0 < share <= 1:
        parser.error(f"share must be in (0, 1], got {share}")
    while True:
        started = time.perf_counter()
        while time.perf_counter() - started < SLICE_S * share:
            pass
        time.sleep(SLICE_S * (1 - share))


if __name__ == "__main__":
    main()
