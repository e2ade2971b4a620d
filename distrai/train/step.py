"""The one training step. The miner's inner loop and the validator's replay both call
`train_step`; nothing else changes parameters during training.

A step: zero the gradients; split the batch into `ranks` × `micro_batches` equal row chunks,
`micro_batches` per data-parallel rank; on each rank, for each of its chunks, forward (under bf16
autocast when the step config asks for it), loss, backward of loss / micro_batches (gradient
accumulation); average the ranks' gradients; clip the global gradient norm to `max_grad_norm`;
one optimizer step; then, with an `Anchor`, pull every parameter toward the window's base by
lr · strength of the way (decoupled, like weight decay toward the base instead of toward zero).
The step pins the CPU thread count to `cpu_threads` (see `determinism.py`) and draws no random
numbers.

The split changes the floating-point sums, so it is part of what a replay must follow (the
manifest records both numbers). A miner on N processes (`parallel.py`) runs its rank's chunks
under `DistributedDataParallel`, whose all-reduce (`parallel.rank_ordered_all_reduce`) scales each
rank's gradient by 1/N and adds them in rank order; one process replaying the same split
accumulates each rank's chunks in turn and adds the scaled gradients in the same order
(`_accumulate_ranks`): the same sums for any number of ranks (tests/test_train_parallel.py).

Sharded ranks (`sharded`, FSDP2) add the scaled gradients in rank order too
(`parallel.RankOrderedReduceScatter`), so the same `_accumulate_ranks` repeats them for any number
of ranks. Each rank then holds only its shard of every gradient, so the clip's norm is put together
from shards: each rank the norm of its shards' norms, then the norm of the ranks' norms in rank
order (`_sharded_norm`); one process replaying them cuts its whole gradients into the same shards
(`parallel.shard_rows`) and computes the same numbers. That norm differs from the unsharded one in
the last bits, so `sharded` is part of the replay class.

Why the anchor: without it, a segment's replay reads only the segment's revealed start state,
so a miner that trained the whole window from an older model and claimed the window's base only
at step 0 would fail nothing but the replay of segment 0. With it, every step reads the base,
so replaying any segment from the miner's own states against the true base differs from what a
stale base produced. The pull is small: after H steps the distance from the base shrinks by a
factor (1 − lr · strength)^H, 0.9968 for the GPU config (lr 4e-4, strength 0.01, H 800).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace

import torch

from distrai.train.determinism import pinned_threads
from distrai.train.loss import LossFn
from distrai.train.parallel import DataParallel, local_part, shard_rows

AUTOCAST_DTYPES = {"bfloat16": torch.bfloat16}


@dataclass(frozen=True)
class StepConfig:
    """How each step runs; a replay must use the miner's values."""

    micro_batches: int = 1
    """gradient accumulation: chunks per rank"""
    max_grad_norm: float = 1.0
    cpu_threads: int | None = 1
    ranks: int = 1
    """data-parallel ranks the batch is split over (the miner's processes; one replay follows them)"""
    autocast: str | None = None
    """"bfloat16": the forward runs in bf16 over the parameters' dtype (fp32 master weights)"""
    sharded: bool = False
    """the ranks shard the model, gradients and optimizer state (FSDP2); the clip's norm follows"""

    def __post_init__(self) -> None:
        if self.micro_batches < 1:
            raise ValueError(f"micro_batches must be at least 1, got {self.micro_batches}")
        if self.ranks < 1:
            raise ValueError(f"ranks must be at least 1, got {self.ranks}")
        if self.sharded and self.ranks < 2:
            raise ValueError(f"a sharded step needs at least 2 ranks, got {self.ranks}")
        if self.autocast is not None and self.autocast not in AUTOCAST_DTYPES:
            raise ValueError(
                f"unknown autocast dtype {self.autocast!r}; choose one of {sorted(AUTOCAST_DTYPES)}"
            )
        if not self.max_grad_norm > 0:
            raise ValueError(f"max_grad_norm must be positive, got {self.max_grad_norm}")
        if self.cpu_threads is not None and self.cpu_threads < 1:
            raise ValueError(f"cpu_threads must be at least 1 or None, got {self.cpu_threads}")


@dataclass(frozen=True)
class Anchor:
    """The window's base parameters, by name, in the model's dtypes, on the model's devices or in
    host memory (each step then copies them in one parameter at a time: the same numbers, so the
    same bits; `memory.py`), and how far each step pulls toward them per unit of learning rate."""

    params: dict[str, torch.Tensor]
    strength: float

    def __post_init__(self) -> None:
        if not (self.strength >= 0 and math.isfinite(self.strength)):
            raise ValueError(f"anchor strength must be finite and non-negative, got {self.strength}")


def anchor_to(
    model: torch.nn.Module, base: Mapping[str, torch.Tensor], strength: float, on_host: bool = False
) -> Anchor:
    """An anchor on `base` (for example float32 CPU parameters) laid out like `model`'s parameters;
    `on_host` keeps it in host memory, page-locked when the model is on a GPU (so each step's copy
    runs at the link's speed and does not wait for the CPU)."""
    params = {}
    for name, p in model.named_parameters():
        if name not in base:
            raise ValueError(f"the base holds no parameter {name!r}")
        params[name] = base[name].detach().to("cpu" if on_host else p.device, p.dtype, copy=True)
        if on_host and p.device.type == "cuda":
            params[name] = params[name].pin_memory()
    return Anchor(params, strength)


@dataclass(frozen=True)
class StepResult:
    """What one step measured: mean loss over the batch, gradient norm before clipping, and
    the number of predicted tokens."""

    loss: float
    grad_norm: float
    tokens: int


def train_step(
    model: torch.nn.Module,
    optimizer: torch.optim.Optimizer,
    batch: torch.Tensor,
    *,
    loss_fn: LossFn,
    micro_batches: int = 1,
    max_grad_norm: float = 1.0,
    cpu_threads: int | None = 1,
    ranks: int = 1,
    autocast: str | None = None,
    sharded: bool = False,
    anchor: Anchor | None = None,
    parallel: DataParallel | None = None,
) -> StepResult:
    """One optimizer step on `batch` [B, T] (int64 token ids), B divisible by ranks × micro_batches.
    With `parallel` (this process is one of `ranks` processes, each given the whole batch) the
    process trains its rank's rows and the ranks all-reduce (or, `sharded`, reduce-scatter) their
    gradients; without, the one process runs every rank's rows, and the clip follows `sharded`.

    Raises FloatingPointError before touching the parameters if the loss is not finite."""
    # refuses bad settings, naming them
    StepConfig(micro_batches, max_grad_norm, cpu_threads, ranks, autocast, sharded)
    if parallel is not None and parallel.world != ranks:
        raise ValueError(
            f"the step splits the batch over {ranks} ranks, but {parallel.world} processes run it"
        )
    if parallel is not None and parallel.sharded != sharded:
        raise ValueError(
            f"the step is {'' if sharded else 'not '}sharded, but its ranks are "
            f"{'' if parallel.sharded else 'not '}sharded"
        )
    rows = _check_batch(batch, ranks * micro_batches)
    device = next(model.parameters()).device
    chunks = batch.to(device).split(rows // (ranks * micro_batches))
    forward = _Forward(loss_fn, device, autocast, micro_batches)
    with pinned_threads(cpu_threads):
        model.train()
        optimizer.zero_grad(set_to_none=True)
        if parallel is None:
            losses = _accumulate_ranks(model, chunks, forward, ranks)
        else:
            losses = parallel.accumulate(
                chunks[parallel.rank * micro_batches : (parallel.rank + 1) * micro_batches], forward
            )
        mean_loss = float(torch.stack(losses).mean())
        if not math.isfinite(mean_loss):
            optimizer.zero_grad(set_to_none=True)
            raise FloatingPointError(f"training loss is {mean_loss}; the step was not applied")
        params = [p for group in optimizer.param_groups for p in group["params"]]
        if sharded:
            grad_norm = _sharded_norm(params, ranks, parallel)
            _clip(params, grad_norm, max_grad_norm)
        else:
            grad_norm = torch.nn.utils.clip_grad_norm_(params, max_grad_norm, foreach=False)
        optimizer.step()
        if anchor is not None and anchor.strength > 0:
            _pull_toward(model, anchor, optimizer.param_groups[0]["lr"] * anchor.strength)
    return StepResult(loss=mean_loss, grad_norm=float(grad_norm), tokens=rows * (batch.shape[1] - 1))


@dataclass(frozen=True)
class _Forward:
    """Forward and backward of one chunk: loss (under autocast when set), then backward of
    loss / micro_batches; returns the detached loss."""

    loss_fn: LossFn
    device: torch.device
    autocast: str | None
    micro_batches: int

    def __call__(self, model: torch.nn.Module, chunk: torch.Tensor) -> torch.Tensor:
        dtype = AUTOCAST_DTYPES.get(self.autocast or "", torch.float32)
        # no cast cache: under activation checkpointing a layer's bf16 weights then live only while
        # it runs (memory.py); a cast is exact either way, so the bits do not change
        with torch.autocast(
            self.device.type, dtype=dtype, enabled=self.autocast is not None, cache_enabled=False
        ):
            loss = self.loss_fn(model, chunk)
        (loss / self.micro_batches).backward()
        return loss.detach()


def _accumulate_ranks(
    model: torch.nn.Module, chunks: tuple[torch.Tensor, ...], forward: _Forward, ranks: int
) -> list[torch.Tensor]:
    """Every rank's chunks in one process: rank by rank, the rank's accumulated gradient scaled by
    1/ranks and added to the ranks before it, as `DistributedDataParallel` scales and sums them."""
    if ranks == 1:
        return [forward(model, chunk) for chunk in chunks]
    params = [p for p in model.parameters() if p.requires_grad]
    per_rank = len(chunks) // ranks
    total: list[torch.Tensor] = []
    losses: list[torch.Tensor] = []
    for rank in range(ranks):
        losses.extend(forward(model, chunk) for chunk in chunks[rank * per_rank : (rank + 1) * per_rank])
        with torch.no_grad():
            for i, p in enumerate(params):
                assert p.grad is not None, "every trainable parameter has a gradient after backward"
                scaled = p.grad.mul_(1.0 / ranks)
                if rank == 0:
                    total.append(scaled)
                else:
                    total[i].add_(scaled)
                p.grad = None
    for p, grad in zip(params, total, strict=True):
        p.grad = grad
    return losses


def _sharded_norm(
    params: list[torch.nn.Parameter], ranks: int, parallel: DataParallel | None
) -> torch.Tensor:
    """The gradients' global L2 norm as sharded ranks compute it: each rank the norm of its shards'
    norms (as `clip_grad_norm_` takes a norm of tensors), then the norm of the ranks' norms in rank
    order. On a rank its own shards and the ranks' gathered norms; in one process, every rank's
    shards cut from the whole gradients."""
    grads = [p.grad for p in params if p.grad is not None]
    if not grads:
        raise ValueError(
            "no parameter the optimizer steps has a gradient: sharding replaces the model's parameters, "
            "so make the optimizer after it"
        )
    if parallel is not None:
        mine = _norm(local_part(g) for g in grads)
        per_rank = parallel.every_rank(mine.reshape(1))
    else:
        per_rank = [_norm(shard_rows(g, rank, ranks) for g in grads) for rank in range(ranks)]
    return _norm(per_rank)


def _norm(tensors: Iterable[torch.Tensor]) -> torch.Tensor:
    """The L2 norm of the tensors' L2 norms. Each is read from a fresh copy: a rank's shard and a
    replay's slice of a whole gradient are views at other offsets, and a GPU's reduction kernels
    sum a misaligned tensor in another order (on a CPU the offset does not change the bits)."""
    return torch.linalg.vector_norm(
        torch.stack([torch.linalg.vector_norm(t.clone(), 2.0).reshape(()) for t in tensors]), 2.0
    )


def _clip(params: list[torch.nn.Parameter], total: torch.Tensor, max_norm: float) -> None:
    """Scale the gradients (a rank's shards, or whole ones) by min(1, max_norm / (total + 1e-6)),
    as `clip_grad_norm_` does."""
    coefficient = torch.clamp(max_norm / (total + 1e-6), max=1.0)
    for p in params:
        if p.grad is not None:
            local_part(p.grad).mul_(coefficient)


def _pull_toward(model: torch.nn.Module, anchor: Anchor, weight: float) -> None:
    """θ ← θ + weight · (base − θ), one elementwise op per parameter (deterministic everywhere); a
    base in host memory is copied to the parameter's device first, in the same stream, so the copy
    of one parameter's base is freed for the next."""
    with torch.no_grad():
        for name, p in model.named_parameters():
            base = anchor.params[name]
            if base.device != p.device:
                base = base.to(p.device, non_blocking=True)
            p.lerp_(base, weight)


def step_with(
    config: StepConfig,
    model: torch.nn.Module,
    optimizer: torch.optim.Optimizer,
    batch: torch.Tensor,
    loss_fn: LossFn,
    anchor: Anchor | None = None,
    parallel: DataParallel | None = None,
) -> StepResult:
    """`train_step` with the settings of `config`, on `parallel`'s rank when given."""
    return train_step(
        model,
        optimizer,
        batch,
        loss_fn=loss_fn,
        micro_batches=config.micro_batches,
        max_grad_norm=config.max_grad_norm,
        cpu_threads=config.cpu_threads,
        ranks=config.ranks,
        autocast=config.autocast,
        sharded=config.sharded,
        anchor=anchor,
        parallel=parallel,
    )


def over_ranks(step: StepConfig, batch_size: int, world: int) -> StepConfig:
    """`step` with its batch of `batch_size` rows split over `world` data-parallel ranks; refuses
    a split that leaves ranks or micro-batches uneven."""
    if world < 1 or batch_size % (world * step.micro_batches):
        raise ValueError(
            f"the batch of {batch_size} sequences does not split over {world} ranks of "
            f"{step.micro_batches} micro-batches each; run a number of processes that divides it"
        )
    return replace(step, ranks=world)


def _check_batch(batch: torch.Tensor, chunks: int) -> int:
    if batch.dtype != torch.long or batch.dim() != 2:
        raise ValueError(
            f"batch must be a 2-D int64 tensor [B, T], got {batch.dtype} of shape {tuple(batch.shape)}"
        )
    rows, length = batch.shape
    if length < 2:
        raise ValueError(f"batch rows need at least 2 tokens, got {length}")
    if rows == 0 or rows % chunks:
        raise ValueError(f"batch of {rows} rows cannot be split into {chunks} equal micro-batches")
    return rows
