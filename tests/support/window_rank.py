"""One rank of a miner's window on several processes (tests/test_train_sharded.py,
`support.ranks.run_ranks(N, main, OUT, MODE, MICRO_BATCHES, KIND)`): the ranks train under DDP
(MODE ddp) or shard the model (MODE fsdp, FSDP2); the leader loads the window's base, runs the inner
loop and keeps every boundary state; the other ranks follow its commands. Rank 0 writes the boundaries, losses and the update's digest to OUT/record.json and every
boundary state to OUT/<step>.safetensors.

KIND is "reference" (eager attention, fp32, single-tensor AdamW) or "fast" (the GPU config's
kernels: SDPA, bf16 autocast over fp32 weights, fused AdamW; activation checkpointing; and AdamW's
moments rounded to bfloat16 at every boundary, on every rank)."""

from __future__ import annotations

import json
from pathlib import Path

import torch

from distrai.train.hashing import hash_tensors
from distrai.train.inner import InnerConfig, InnerResult, inner_loop, train_rank_zero_steps
from distrai.train.loss import causal_lm_loss
from distrai.train.memory import set_checkpointing
from distrai.train.model import ModelSpec, load_model
from distrai.train.optimizer import InnerOptimizerConfig
from distrai.train.parallel import DataParallel, FullyShardedParallel, Launch, join, launched, leave
from distrai.train.step import StepConfig
from distrai.train.train_state import save_state
from support.tiny_models import FAST_LR, tiny_data

STEPS, SEGMENT, ROWS = 4, 2, 12


def batches() -> list[torch.Tensor]:
    data = tiny_data(seq_len=32, documents=120)
    return [data.train[i * ROWS : (i + 1) * ROWS] for i in range(STEPS)]


def model(kind: str, init_seed: int = 0) -> torch.nn.Module:
    """A tiny model with the attention kernel of `kind`, recomputing activations when it is "fast"."""
    built = load_model(
        ModelSpec(preset="tiny", attention="sdpa" if kind == "fast" else "eager", init_seed=init_seed)
    )
    set_checkpointing(built, kind == "fast")
    return built


def window_base(kind: str) -> dict[str, torch.Tensor]:
    """The window's base: another model than the one every rank starts with, so a rank that missed
    it would train from other parameters."""
    return {name: p.detach().clone() for name, p in model(kind, init_seed=1).named_parameters()}


def config(ranks: int, sharded: bool, micro_batches: int, kind: str) -> InnerConfig:
    """The window's settings; a step whose gradients are clipped (their norm is above 1 here) and
    pulled toward the base."""
    fast = kind == "fast"
    step = StepConfig(
        micro_batches=micro_batches, ranks=ranks, sharded=sharded, autocast="bfloat16" if fast else None
    )
    return InnerConfig(
        inner_steps=STEPS,
        segment_steps=SEGMENT,
        optimizer=InnerOptimizerConfig(lr=FAST_LR, implementation="fused" if fast else "single"),
        step=step,
        sketch_seed="test-run",
        base_anchor=0.5,
        boundary_moments="bfloat16" if fast else "float32",
    )


def record(result: InnerResult) -> dict:
    return {
        "boundaries": [[b.step, b.state_hash, b.sketch] for b in result.boundaries],
        "losses": result.losses,
        "update": hash_tensors("update", result.pseudo_gradient),
    }


def window(launch: Launch, out: Path, mode: str, micro_batches: int, kind: str) -> None:
    """This rank's part of the window (its objects, DDP's included, are gone when it returns, before
    the process group is: DDP's destructor may hang on a group destroyed first)."""
    sharded = mode == "fsdp"
    device = launch.device("cpu")
    ranks = (FullyShardedParallel if sharded else DataParallel)(
        launch.rank, launch.world, device, model(kind)
    )
    if isinstance(ranks, FullyShardedParallel):
        ranks.shard()
    inner = config(launch.world, sharded, micro_batches, kind)
    if not ranks.leader:
        train_rank_zero_steps(ranks, causal_lm_loss, inner)
        return
    work = batches()
    base = window_base(kind)
    if isinstance(ranks, FullyShardedParallel):
        ranks.load(base)
    else:
        with torch.no_grad():
            for name, p in ranks.model.named_parameters():
                p.copy_(base[name])
    result = inner_loop(
        ranks.model,
        lambda t: work[t],
        causal_lm_loss,
        inner,
        on_boundary=lambda b: save_state(b.state, out / f"{b.step}.safetensors"),
        parallel=ranks,
    )
    ranks.shutdown()
    (out / "record.json").write_text(json.dumps(record(result)))


def main(out: Path, mode: str, micro_batches: int, kind: str) -> None:
    launch = launched()
    if launch is None:
        raise SystemExit("run me on more than one rank (support.ranks.run_ranks)")
    join(launch, launch.device("cpu"))
    try:
        window(launch, out, mode, micro_batches, kind)
    finally:
        leave()
