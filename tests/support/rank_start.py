"""One rank of tests/test_train_parallel.py's start-up check (`support.ranks.run_ranks(N, main, OUT,
FAILING)`): joins the gloo group, reports whether it started (every rank but FAILING does), and
writes what `all_started` answered to OUT/rank<R>.txt."""

from __future__ import annotations

from pathlib import Path

from distrai.train.parallel import all_started, join, launched, leave


def main(out: Path, failing: int) -> None:
    launch = launched()
    if launch is None:
        raise SystemExit("run me on more than one rank (support.ranks.run_ranks)")
    device = launch.device("cpu")
    join(launch, device)
    try:
        answer = all_started(launch.rank != failing, device)
        (out / f"rank{launch.rank}.txt").write_text(str(answer))
    finally:
        leave()
