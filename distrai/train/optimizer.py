"""The inner optimizer: AdamW with its implementation pinned.

torch picks a foreach or a fused AdamW by device when left to choose; the implementations may
round differently, so a miner on one default and a validator on another might not agree. The run
config names the implementation (`train.adamw`): "single" (`foreach=False, fused=False`, one
kernel chain per parameter, the default), "foreach" (grouped kernels over the parameter list) or
"fused" (one fused kernel, the fastest on GPUs); every node uses the run's, and the manifest's
replay class records it. Each repeats itself bit for bit on CPU (tests/test_train_step.py).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

IMPLEMENTATIONS = ("single", "foreach", "fused")


@dataclass(frozen=True)
class InnerOptimizerConfig:
    """AdamW hyperparameters of the inner loop, and a linear learning-rate warm-up over the first
    `warmup_steps` inner steps of each window (field names follow the run config's `train`)."""

    lr: float = 3e-4
    betas: tuple[float, float] = (0.9, 0.95)
    eps: float = 1e-8
    weight_decay: float = 0.1
    warmup_steps: int = 0
    implementation: str = "single"

    def __post_init__(self) -> None:
        if self.implementation not in IMPLEMENTATIONS:
            raise ValueError(
                f"unknown AdamW implementation {self.implementation!r}; choose one of {IMPLEMENTATIONS}"
            )
        if not self.lr > 0:
            raise ValueError(f"inner lr must be positive, got {self.lr}")
        if len(self.betas) != 2 or not all(0 <= b < 1 for b in self.betas):
            raise ValueError(f"AdamW betas must be two numbers in [0, 1), got {self.betas}")
        if not self.eps > 0:
            raise ValueError(f"AdamW eps must be positive, got {self.eps}")
        if self.weight_decay < 0:
            raise ValueError(f"weight_decay must be non-negative, got {self.weight_decay}")
        if self.warmup_steps < 0:
            raise ValueError(f"warmup_steps must be non-negative, got {self.warmup_steps}")

    def lr_at(self, step: int) -> float:
        """Learning rate of inner step `step` (0-based): lr · min(1, (step + 1) / warmup_steps)."""
        if step < 0:
            raise ValueError(f"inner step must be non-negative, got {step}")
        if self.warmup_steps == 0:
            return self.lr
        return self.lr * min(1.0, (step + 1) / self.warmup_steps)


def make_inner_optimizer(model: torch.nn.Module, config: InnerOptimizerConfig) -> torch.optim.AdamW:
    """A fresh AdamW over the model's trainable parameters, in the config's implementation."""
    return torch.optim.AdamW(
        [p for p in model.parameters() if p.requires_grad],
        lr=config.lr,
        betas=config.betas,
        eps=config.eps,
        weight_decay=config.weight_decay,
        foreach=config.implementation == "foreach",
        fused=config.implementation == "fused",
    )


MOMENT_KEYS = ("exp_avg", "exp_avg_sq")
"""AdamW's two moments, per parameter."""
BOUNDARY_MOMENTS = ("float32", "bfloat16")
"""What a boundary keeps of AdamW's moments: every float32 bit, or each rounded to bfloat16."""


def round_moments(optimizer: torch.optim.Optimizer) -> None:
    """Round every AdamW moment to the nearest bfloat16 (ties to even), in place and in its own dtype:
    its low 16 bits become 0, which a lossless coder stores for nothing. The same bits on every
    device, and on every shard of a sharded moment."""
    with torch.no_grad():
        for entries in optimizer.state.values():
            for key in MOMENT_KEYS:
                moment = entries.get(key)
                if moment is not None:
                    moment.copy_(moment.to(torch.bfloat16))


def set_lr(optimizer: torch.optim.Optimizer, lr: float) -> None:
    """Set the learning rate of every parameter group."""
    for group in optimizer.param_groups:
        group["lr"] = lr
