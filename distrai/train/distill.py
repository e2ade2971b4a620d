"""Knowledge distillation from a frozen teacher, as a loss function for the shared step.

loss = α · T² · KL(p_teacher ‖ p_student) + (1 − α) · cross-entropy, where both distributions
are taken at temperature T over the teacher's top-k tokens at each position and renormalized
over those k (so only k logits per position matter, as they would if the teacher's logits were
shipped). T² keeps the KL gradient's scale independent of T (Hinton et al.). The teacher's
forward pass runs inside the loss, in eval mode and without gradients, so a replay of the step
recomputes it from the same weights.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from distrai.train.determinism import pinned_threads
from distrai.train.loss import next_token_logits, token_cross_entropy


@dataclass(frozen=True)
class DistillConfig:
    """Mixing weight α of the KL term, temperature T, and how many teacher logits count."""

    alpha: float = 0.5
    temperature: float = 2.0
    top_k: int = 32

    def __post_init__(self) -> None:
        if not 0 <= self.alpha <= 1:
            raise ValueError(f"distillation alpha must be in [0, 1], got {self.alpha}")
        if not self.temperature > 0:
            raise ValueError(f"distillation temperature must be positive, got {self.temperature}")
        if self.top_k < 1:
            raise ValueError(f"distillation top_k must be at least 1, got {self.top_k}")


def top_k_kl(
    teacher_logits: torch.Tensor, student_logits: torch.Tensor, temperature: float, top_k: int
) -> torch.Tensor:
    """Per-position KL(teacher ‖ student) [B, T] over the teacher's top-k tokens, renormalized."""
    k = min(top_k, teacher_logits.shape[-1])
    teacher_top, index = torch.topk(teacher_logits / temperature, k, dim=-1)
    student_top = (student_logits / temperature).gather(-1, index)
    teacher_log_p = torch.log_softmax(teacher_top, dim=-1)
    student_log_p = torch.log_softmax(student_top, dim=-1)
    return (teacher_log_p.exp() * (teacher_log_p - student_log_p)).sum(-1)


class DistillationLoss:
    """A loss function `(student, batch) -> loss` that runs the frozen `teacher` on the batch."""

    def __init__(self, teacher: torch.nn.Module, config: DistillConfig):
        if any(p.requires_grad for p in teacher.parameters()):
            raise ValueError("the teacher must be frozen (load it with load_teacher)")
        self.teacher = teacher
        self.config = config

    def __call__(self, model: torch.nn.Module, batch: torch.Tensor) -> torch.Tensor:
        kl, ce = self._terms(model, batch)
        c = self.config
        return c.alpha * c.temperature**2 * kl.mean() + (1 - c.alpha) * ce.mean()

    def rows(self, model: torch.nn.Module, batch: torch.Tensor) -> torch.Tensor:
        """Each row's loss [B] (the loss row by row)."""
        kl, ce = self._terms(model, batch)
        c = self.config
        return c.alpha * c.temperature**2 * kl.mean(dim=1) + (1 - c.alpha) * ce.mean(dim=1)

    def _terms(self, model: torch.nn.Module, batch: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Per-position KL and cross-entropy [B, T−1]."""
        student_logits = next_token_logits(model, batch)
        teacher_logits = self.teacher_logits(batch)
        if teacher_logits.shape[-1] != student_logits.shape[-1]:
            raise ValueError(
                f"teacher vocabulary ({teacher_logits.shape[-1]}) differs from the student's ({student_logits.shape[-1]})"
            )
        c = self.config
        kl = top_k_kl(teacher_logits, student_logits, c.temperature, c.top_k)
        return kl, token_cross_entropy(student_logits, batch[:, 1:])

    def teacher_logits(self, batch: torch.Tensor) -> torch.Tensor:
        self.teacher.eval()
        with torch.no_grad():
            return next_token_logits(self.teacher, batch)


def teacher_kl(
    student: torch.nn.Module,
    teacher: torch.nn.Module,
    sequences: torch.Tensor,
    config: DistillConfig,
    *,
    batch_size: int = 32,
    cpu_threads: int | None = 1,
) -> float:
    """Mean per-token top-k KL(teacher ‖ student) at temperature T on `sequences` (a score for
    `distill` runs: lower is closer to the teacher)."""
    loss = DistillationLoss(teacher, config)
    was_training = student.training
    student.eval()
    total = 0.0
    try:
        with torch.no_grad(), pinned_threads(cpu_threads):
            for chunk in sequences.split(batch_size):
                chunk = chunk.to(next(student.parameters()).device)
                kl = top_k_kl(
                    loss.teacher_logits(chunk),
                    next_token_logits(student, chunk),
                    config.temperature,
                    config.top_k,
                )
                total += float(kl.mean()) * chunk.shape[0]
    finally:
        student.train(was_training)
    return total / sequences.shape[0]
