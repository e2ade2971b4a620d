"""One rank of a data-parallel step test (tests/test_train_parallel.py, `support.ranks.run_ranks(N,
main, OUT, MICRO_BATCHES)`): trains a tiny model for a few steps over gloo and writes its end state's
hash and its losses to OUT/rank<R>.json."""

from __future__ import annotations

import json
from pathlib import Path

from distrai.train.loss import causal_lm_loss
from distrai.train.optimizer import InnerOptimizerConfig, make_inner_optimizer
from distrai.train.parallel import DataParallel, Launch, join, launched, leave
from distrai.train.step import train_step
from distrai.train.train_state import capture_state, state_hash
from support.tiny_models import FAST_LR, tiny_data, tiny_model

STEPS, ROWS = 3, 8


def batches() -> list:
    data = tiny_data(seq_len=32, documents=120)
    return [data.train[i * ROWS : (i + 1) * ROWS] for i in range(STEPS)]


def train(launch: Launch, out: Path, micro_batches: int) -> None:
    """This rank's steps (its objects, DDP's included, are gone when it returns, before the process
    group is: DDP's destructor may hang on a group destroyed first)."""
    device = launch.device("cpu")
    model = tiny_model()
    optimizer = make_inner_optimizer(model, InnerOptimizerConfig(lr=FAST_LR))
    parallel = DataParallel(launch.rank, launch.world, device, model)
    losses = [
        train_step(
            model,
            optimizer,
            batch,
            loss_fn=causal_lm_loss,
            micro_batches=micro_batches,
            ranks=launch.world,
            parallel=parallel,
        ).loss
        for batch in batches()
    ]
    record = {"hash": state_hash(capture_state(model, optimizer, STEPS)), "losses": losses}
    (out / f"rank{launch.rank}.json").write_text(json.dumps(record))


def main(out: Path, micro_batches: int) -> None:
    launch = launched()
    if launch is None:
        raise SystemExit("run me on more than one rank (support.ranks.run_ranks)")
    join(launch, launch.device("cpu"))
    try:
        train(launch, out, micro_batches)
    finally:
        leave()
