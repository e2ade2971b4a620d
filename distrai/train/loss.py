"""Losses a training step can use. A loss function takes (model, batch [B, T]) and returns the
mean loss over the batch's B·(T−1) next-token predictions as a 0-dim tensor.

Cross-entropy is written out (log-softmax and gather) instead of `F.cross_entropy`: the NLL
kernel has no deterministic CUDA implementation, and the model's built-in loss may change with
`transformers` versions. Logits are taken in float32 whatever the model's dtype.
"""

from __future__ import annotations

from typing import Protocol

import torch


class LossFn(Protocol):
    def __call__(self, model: torch.nn.Module, batch: torch.Tensor) -> torch.Tensor: ...


def next_token_logits(model: torch.nn.Module, batch: torch.Tensor) -> torch.Tensor:
    """Float32 logits [B, T−1, V] for predicting tokens 1 … T−1 of each row."""
    return model(input_ids=batch, use_cache=False).logits[:, :-1].float()


def token_cross_entropy(logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """Per-token cross-entropy [B, T−1] of float logits [B, T−1, V] against targets [B, T−1]."""
    log_probs = torch.log_softmax(logits, dim=-1)
    return -log_probs.gather(-1, targets.unsqueeze(-1)).squeeze(-1)


def causal_lm_loss(model: torch.nn.Module, batch: torch.Tensor) -> torch.Tensor:
    """Mean next-token cross-entropy of `model` on `batch` (pre-training)."""
    return token_cross_entropy(next_token_logits(model, batch), batch[:, 1:]).mean()


def causal_lm_rows(model: torch.nn.Module, batch: torch.Tensor) -> torch.Tensor:
    """Each row's mean next-token cross-entropy [B] (`causal_lm_loss` row by row)."""
    return token_cross_entropy(next_token_logits(model, batch), batch[:, 1:]).mean(dim=1)


def rows_of(loss_fn: LossFn):
    """The per-sequence form of a loss function (each row's mean loss [B]), or None when it has none:
    `causal_lm_loss`'s, or a loss object's `rows` method."""
    if loss_fn is causal_lm_loss:
        return causal_lm_rows
    return getattr(loss_fn, "rows", None)
