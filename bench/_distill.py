"""Distillation versus plain pre-training of the same student at equal steps.

The teacher is the model DDP trained in the convergence run (frozen). Two students start from the
same fresh initialization (a different seed from the teacher's) and take the same number of
project `train_step`s on the same batches with the same AdamW; one minimizes cross-entropy, the
other the project's distillation loss. Both are scored by held-out cross-entropy.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import safetensors.torch
from _config import BenchConfig, load_params, new_model
from transformers import PreTrainedTokenizerBase

from distrai.train.data import TrainingData
from distrai.train.distill import DistillationLoss, DistillConfig
from distrai.train.evaluate import evaluate
from distrai.train.loss import LossFn, causal_lm_loss
from distrai.train.optimizer import make_inner_optimizer
from distrai.train.step import train_step

STUDENT_SEED = 1


@dataclass(frozen=True)
class DistillResult:
    teacher_loss: float
    plain_loss: float
    distilled_loss: float
    steps: int
    config: DistillConfig


def compare_distillation(
    config: BenchConfig,
    tokenizer: PreTrainedTokenizerBase,
    data: TrainingData,
    schedule: list[list[int]],
    teacher_path: Path,
) -> DistillResult:
    """Train both students for `config.distill_steps` steps and evaluate all three models."""
    teacher = new_model(config, tokenizer)
    load_params(teacher, safetensors.torch.load_file(str(teacher_path)))
    teacher.eval()
    teacher.requires_grad_(False)
    distill = DistillConfig()
    batches = [data.batch(schedule[step % len(schedule)]) for step in range(config.distill_steps)]

    def student_loss(loss_fn: LossFn) -> float:
        student = new_model(config, tokenizer, init_seed=STUDENT_SEED)
        optimizer = make_inner_optimizer(student, config.optimizer_config())
        for batch in batches:
            train_step(student, optimizer, batch, loss_fn=loss_fn, cpu_threads=1)
        return evaluate(student, data.heldout, cpu_threads=1)

    return DistillResult(
        teacher_loss=evaluate(teacher, data.heldout, cpu_threads=1),
        plain_loss=student_loss(causal_lm_loss),
        distilled_loss=student_loss(DistillationLoss(teacher, distill)),
        steps=config.distill_steps,
        config=distill,
    )
