"""Held-out evaluation: the mean next-token loss of a model on fixed sequences."""

from __future__ import annotations

import torch

from distrai.train.determinism import pinned_threads
from distrai.train.loss import LossFn, causal_lm_loss, rows_of

COMPARED_BATCH = 4
"""Sequences per forward of an evaluation whose result nodes compare (the held-out re-measurement of
`distrai.protocol.remeasure`): the same on every node, since a GEMM's bits can depend on its shape, and small
enough that a batch's float32 logits (2,048 tokens over a 50k vocabulary) fit a CPU node's memory."""


def evaluate(
    model: torch.nn.Module,
    sequences: torch.Tensor,
    *,
    loss_fn: LossFn = causal_lm_loss,
    batch_size: int = 32,
    cpu_threads: int | None = 1,
) -> float:
    """Mean loss per predicted token over `sequences` [M, T] (e.g. `TokenData.heldout`), in eval
    mode and without gradients; the model's training mode is restored afterwards."""
    if sequences.dim() != 2 or sequences.shape[0] == 0 or sequences.shape[1] < 2:
        raise ValueError(f"evaluation needs sequences [M >= 1, T >= 2], got shape {tuple(sequences.shape)}")
    if batch_size < 1:
        raise ValueError(f"batch_size must be at least 1, got {batch_size}")
    device = next(model.parameters()).device
    was_training = model.training
    model.eval()
    total = 0.0
    try:
        with torch.no_grad(), pinned_threads(cpu_threads):
            for chunk in sequences.split(batch_size):
                total += float(loss_fn(model, chunk.to(device))) * chunk.shape[0]
    finally:
        model.train(was_training)
    return total / sequences.shape[0]


def sequence_losses(
    model: torch.nn.Module,
    sequences: torch.Tensor,
    *,
    loss_fn: LossFn = causal_lm_loss,
    batch_size: int = 32,
    cpu_threads: int | None = 1,
) -> torch.Tensor:
    """Each sequence's mean loss per predicted token, float64 [M], in eval mode and without
    gradients, `batch_size` sequences at a time (one at a time for a loss with no per-sequence form,
    `loss.rows_of`); the model's training mode is restored afterwards."""
    if sequences.dim() != 2 or sequences.shape[0] == 0 or sequences.shape[1] < 2:
        raise ValueError(f"evaluation needs sequences [M >= 1, T >= 2], got shape {tuple(sequences.shape)}")
    rows = rows_of(loss_fn)
    if rows is None:
        batch_size = 1
        rows = lambda m, chunk: loss_fn(m, chunk).reshape(1)  # noqa: E731
    device = next(model.parameters()).device
    was_training = model.training
    model.eval()
    try:
        with torch.no_grad(), pinned_threads(cpu_threads):
            losses = [rows(model, chunk.to(device)).double().cpu() for chunk in sequences.split(batch_size)]
    finally:
        model.train(was_training)
    return torch.cat(losses)
