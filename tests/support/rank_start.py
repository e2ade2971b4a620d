"""One rank of tests/test_train_parallel.py's start-up check, started by torchrun: joins the gloo
group, reports whether it started (every rank but FAILING does), and writes what `all_started`
answered to OUT/rank<R>.txt. Usage: torchrun --nproc-per-node N rank_start.py OUT FAILING"""

from __future__ import annotations

import sys
from pathlib import Path

from distrai.train.parallel import all_started, join, launched, leave


def main(out: Path, failing: int) -> None:
    launch = launched()
    if launch is None:
        raise SystemExit("run me under torchrun with more than one process")
    device = launch.device("cpu")
    join(launch, device)
    try:
        answer = all_started(launch.rank != failing, device)
        (out / f"rank{launch.rank}.txt").write_text(str(answer))
    finally:
        leave()


if __name__ == "__main__":
    main(Path(sys.argv[1]), int(sys.argv[2]))
