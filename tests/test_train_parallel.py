"""The data-parallel step: two or four gloo processes under `DistributedDataParallel` end where one
process replaying the same split ends, bit for bit; a split is checked before any work."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from support import ddp_rank, rank_start
from support.ddp_rank import batches
from support.ranks import run_ranks
from support.tiny_models import FAST_LR, tiny_model

from distrai.train.loss import causal_lm_loss
from distrai.train.optimizer import InnerOptimizerConfig, make_inner_optimizer
from distrai.train.parallel import DataParallel
from distrai.train.step import StepConfig, over_ranks, train_step
from distrai.train.train_state import capture_state, state_hash


def run_ranks_records(out: Path, world: int, micro_batches: int) -> list[dict]:
    """tests/support/ddp_rank.py on `world` ranks; every rank's record."""
    run_ranks(world, ddp_rank.main, out, micro_batches)
    return [json.loads((out / f"rank{r}.json").read_text()) for r in range(world)]


def test_one_rank_that_cannot_start_stops_every_rank(tmp_path):
    """A follower that fails at start-up must not leave the leader waiting for it (and the other way
    round): every rank learns that one failed."""
    for failing, expected in ((1, "False"), (0, "False"), (-1, "True")):
        out = tmp_path / f"failing{failing}"
        out.mkdir()
        run_ranks(2, rank_start.main, out, failing)
        assert [(out / f"rank{r}.txt").read_text() for r in range(2)] == [expected] * 2, failing


def replay_in_one_process(ranks: int, micro_batches: int) -> dict:
    model = tiny_model()
    optimizer = make_inner_optimizer(model, InnerOptimizerConfig(lr=FAST_LR))
    losses = [
        train_step(
            model, optimizer, batch, loss_fn=causal_lm_loss, micro_batches=micro_batches, ranks=ranks
        ).loss
        for batch in batches()
    ]
    return {"hash": state_hash(capture_state(model, optimizer, len(losses))), "losses": losses}


@pytest.mark.parametrize(("world", "micro_batches"), [(2, 1), (4, 2)])
def test_gloo_ranks_end_where_one_process_replaying_their_split_ends(tmp_path, world, micro_batches):
    # four ranks: gloo's ring would add their gradients in another order than rank by rank; the
    # ranks' rank-ordered all-reduce (parallel.rank_ordered_all_reduce) is what the replay repeats
    ranks = run_ranks_records(tmp_path, world, micro_batches)
    assert all(rank == ranks[0] for rank in ranks), "the ranks took different optimizer steps"
    assert ranks[0] == replay_in_one_process(world, micro_batches)


def test_a_split_that_does_not_divide_the_batch_is_refused_before_training():
    step = StepConfig(micro_batches=2)
    assert over_ranks(step, 8, 2).ranks == 2
    with pytest.raises(ValueError, match="batch of 8 sequences does not split over 3 ranks of 2"):
        over_ranks(step, 8, 3)
    model = tiny_model()
    before = [p.detach().clone() for p in model.parameters()]
    optimizer = make_inner_optimizer(model, InnerOptimizerConfig(lr=FAST_LR))
    with pytest.raises(ValueError, match="batch of 8 rows cannot be split into 6"):
        train_step(model, optimizer, batches()[0], loss_fn=causal_lm_loss, micro_batches=2, ranks=3)
    assert all(torch.equal(a, b) for a, b in zip(before, model.parameters(), strict=True))


@pytest.mark.parametrize(
    ("fields", "words"),
    [
        ({"ranks": 0}, "ranks must be at least 1"),
        ({"autocast": "float16"}, "unknown autocast dtype 'float16'"),
    ],
)
def test_bad_step_settings_are_named(fields, words):
    with pytest.raises(ValueError, match=words):
        StepConfig(**fields)


def test_a_step_run_by_another_number_of_processes_than_its_split_is_refused():
    model = tiny_model()
    optimizer = make_inner_optimizer(model, InnerOptimizerConfig(lr=FAST_LR))
    parallel = DataParallel(rank=0, world=2, device=torch.device("cpu"), model=model)
    with pytest.raises(ValueError, match="splits the batch over 1 ranks, but 2 processes run it"):
        train_step(model, optimizer, batches()[0], loss_fn=causal_lm_loss, ranks=1, parallel=parallel)
