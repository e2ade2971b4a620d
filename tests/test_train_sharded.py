"""A miner's window on several gloo processes, through the leader's inner loop and the followers'
`train_rank_zero_steps`: under DDP and with the model, gradients and AdamW state sharded (FSDP2), the window ends
where one process replaying its split ends, bit for bit (every boundary hash and sketch, every loss,
the update); the boundary states the leader gathers from the shards restore into one unsharded
model, and a validator's replay of a segment from one reaches the next committed boundary."""

from __future__ import annotations

import json

import pytest
import torch
from support import window_rank
from support.ranks import run_ranks
from support.window_rank import batches, config, model, record, window_base

from distrai.train.inner import InnerResult, inner_loop
from distrai.train.loss import causal_lm_loss
from distrai.train.replay import replay_segment
from distrai.train.train_state import load_state, state_hash


def one_process(ranks: int, sharded: bool, micro_batches: int, kind: str) -> InnerResult:
    """The window in one process with the ranks' split."""
    replay = model(kind)
    base = window_base(kind)
    with torch.no_grad():
        for name, p in replay.named_parameters():
            p.copy_(base[name])
    work = batches()
    return inner_loop(replay, lambda t: work[t], causal_lm_loss, config(ranks, sharded, micro_batches, kind))


@pytest.mark.parametrize(
    ("mode", "world", "micro_batches", "kind"),
    [
        ("ddp", 2, 2, "reference"),
        ("fsdp", 2, 2, "reference"),
        # the GPU config's kernels on data-parallel ranks: each follower rounds its own moments at a
        # boundary, or its next steps leave the leader's
        ("ddp", 2, 1, "fast"),
        # three ranks: uneven shards (torch.chunk of 260 rows), a sum of three, and the GPU config's
        # kernels with activation checkpointing and moments rounded at the boundaries, shard by shard
        ("fsdp", 3, 1, "fast"),
    ],
)
def test_a_window_on_ranks_ends_where_one_process_replaying_its_split_ends(
    tmp_path, mode, world, micro_batches, kind
):
    sharded = mode == "fsdp"
    run_ranks(world, window_rank.main, tmp_path, mode, micro_batches, kind)
    ranks = json.loads((tmp_path / "record.json").read_text())
    assert ranks == record(one_process(world, sharded, micro_batches, kind))

    # a validator: restore the revealed boundary 2 into one unsharded model, replay segment 1 and
    # reach the committed boundary 4 and losses
    inner = config(world, sharded, micro_batches, kind)
    start = load_state(tmp_path / "2.safetensors")
    replayed = replay_segment(model(kind), start, batches()[2:4], causal_lm_loss, inner, window_base(kind))
    assert state_hash(replayed.end) == ranks["boundaries"][2][1]
    assert replayed.losses == ranks["losses"][2:4]

    if sharded:
        # the sharding is part of what a replay follows: the unsharded clip's norm gives other bits
        unsharded = record(one_process(world, False, micro_batches, kind))
        assert unsharded["boundaries"][1][1] != ranks["boundaries"][1][1]
