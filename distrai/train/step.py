"""The one training step. The miner's inner loop and the validator's replay both call
`train_step`; nothing else changes parameters during training.

A step: zero the gradients; split the batch into `micro_batches` equal row chunks; for each,
forward, loss, backward of loss / micro_batches (gradient accumulation); clip the global
gradient norm to `max_grad_norm`; one optimizer step; then, with an `Anchor`, pull every
parameter toward the window's base by lr · strength of the way (decoupled, like weight decay
toward the base instead of toward zero). The split changes the floating-point sums, so it is
part of what a replay must follow (the manifest records it). The step pins the CPU thread count
to `cpu_threads` (see `determinism.py`) and draws no random numbers.

Why the anchor: without it, a segment's replay reads only the segment's revealed start state,
so a miner that trained the whole window from an older model and claimed the window's base only
at step 0 would fail nothing but the replay of segment 0. With it, every step reads the base,
so replaying any segment from the miner's own states against the true base differs from what a
stale base produced. The pull is small: after H steps the distance from the base shrinks by a
factor (1 − lr · strength)^H, 0.9968 for the GPU config (lr 4e-4, strength 0.01, H 800).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass

import torch

from distrai.train.determinism import pinned_threads
from distrai.train.loss import LossFn


@dataclass(frozen=True)
class StepConfig:
    """How each step runs; a replay must use the miner's values."""

    micro_batches: int = 1
    max_grad_norm: float = 1.0
    cpu_threads: int | None = 1

    def __post_init__(self) -> None:
        if self.micro_batches < 1:
            raise ValueError(f"micro_batches must be at least 1, got {self.micro_batches}")
        if not self.max_grad_norm > 0:
            raise ValueError(f"max_grad_norm must be positive, got {self.max_grad_norm}")
        if self.cpu_threads is not None and self.cpu_threads < 1:
            raise ValueError(f"cpu_threads must be at least 1 or None, got {self.cpu_threads}")


@dataclass(frozen=True)
class Anchor:
    """The window's base parameters, by name, on the model's devices and dtypes, and how far each
    step pulls toward them per unit of learning rate."""

    params: dict[str, torch.Tensor]
    strength: float

    def __post_init__(self) -> None:
        if not (self.strength >= 0 and math.isfinite(self.strength)):
            raise ValueError(f"anchor strength must be finite and non-negative, got {self.strength}")


def anchor_to(model: torch.nn.Module, base: Mapping[str, torch.Tensor], strength: float) -> Anchor:
    """An anchor on `base` (for example float32 CPU parameters) laid out like `model`'s parameters."""
    params = {}
    for name, p in model.named_parameters():
        if name not in base:
            raise ValueError(f"the base holds no parameter {name!r}")
        params[name] = base[name].detach().to(p.device, p.dtype, copy=True)
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
    anchor: Anchor | None = None,
) -> StepResult:
    """One optimizer step on `batch` [B, T] (int64 token ids), B divisible by `micro_batches`.

    Raises FloatingPointError before touching the parameters if the loss is not finite."""
    StepConfig(micro_batches, max_grad_norm, cpu_threads)  # refuses bad settings, naming them
    rows = _check_batch(batch, micro_batches)
    device = next(model.parameters()).device
    batch = batch.to(device)
    with pinned_threads(cpu_threads):
        model.train()
        optimizer.zero_grad(set_to_none=True)
        losses = []
        for chunk in batch.split(rows // micro_batches):
            loss = loss_fn(model, chunk)
            (loss / micro_batches).backward()
            losses.append(loss.detach())
        mean_loss = float(torch.stack(losses).mean())
        if not math.isfinite(mean_loss):
            optimizer.zero_grad(set_to_none=True)
            raise FloatingPointError(f"training loss is {mean_loss}; the step was not applied")
        params = [p for group in optimizer.param_groups for p in group["params"]]
        grad_norm = torch.nn.utils.clip_grad_norm_(params, max_grad_norm, foreach=False)
        optimizer.step()
        if anchor is not None and anchor.strength > 0:
            _pull_toward(model, anchor, optimizer.param_groups[0]["lr"] * anchor.strength)
    return StepResult(loss=mean_loss, grad_norm=float(grad_norm), tokens=rows * (batch.shape[1] - 1))


def _pull_toward(model: torch.nn.Module, anchor: Anchor, weight: float) -> None:
    """θ ← θ + weight · (base − θ), one elementwise op per parameter (deterministic everywhere)."""
    with torch.no_grad():
        for name, p in model.named_parameters():
            p.lerp_(anchor.params[name], weight)


def step_with(
    config: StepConfig,
    model: torch.nn.Module,
    optimizer: torch.optim.Optimizer,
    batch: torch.Tensor,
    loss_fn: LossFn,
    anchor: Anchor | None = None,
) -> StepResult:
    """`train_step` with the settings of `config`."""
    return train_step(
        model,
        optimizer,
        batch,
        loss_fn=loss_fn,
        micro_batches=config.micro_batches,
        max_grad_norm=config.max_grad_norm,
        cpu_threads=config.cpu_threads,
        anchor=anchor,
    )


def _check_batch(batch: torch.Tensor, micro_batches: int) -> int:
    if batch.dtype != torch.long or batch.dim() != 2:
        raise ValueError(
            f"batch must be a 2-D int64 tensor [B, T], got {batch.dtype} of shape {tuple(batch.shape)}"
        )
    rows, length = batch.shape
    if length < 2:
        raise ValueError(f"batch rows need at least 2 tokens, got {length}")
    if rows == 0 or rows % micro_batches:
        raise ValueError(f"batch of {rows} rows cannot be split into {micro_batches} equal micro-batches")
    return rows
