"""Distillation: the top-k KL term, the mixed loss, a student that moves toward a saved teacher,
and a bit-exact replay that recomputes the teacher."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from support.tiny_models import FAST_LR, fast_inner_config, save_tiny_teacher, tiny_data, tiny_model

from distrai.train.distill import DistillationLoss, DistillConfig, teacher_kl, top_k_kl
from distrai.train.evaluate import evaluate, sequence_losses
from distrai.train.inner import inner_loop
from distrai.train.loss import causal_lm_loss
from distrai.train.model import ModelSpec, load_teacher
from distrai.train.optimizer import InnerOptimizerConfig, make_inner_optimizer
from distrai.train.replay import replay_segment
from distrai.train.step import train_step
from distrai.train.train_state import states_equal

DATA = tiny_data(seq_len=32, documents=200)
CONFIG = DistillConfig(alpha=0.5, temperature=2.0, top_k=16)


@pytest.fixture(scope="module")
def teacher(tmp_path_factory):
    folder = save_tiny_teacher(tmp_path_factory.mktemp("teacher"), DATA, steps=40)
    return load_teacher(ModelSpec(path_or_id=str(folder)))


def test_top_k_kl_is_zero_for_the_same_distribution_and_positive_otherwise():
    generator = torch.Generator().manual_seed(0)
    logits = torch.randn(2, 5, 30, generator=generator)
    assert torch.allclose(top_k_kl(logits, logits + 3.0, 2.0, 8), torch.zeros(2, 5), atol=1e-6)
    assert bool((top_k_kl(logits, torch.randn(2, 5, 30, generator=generator), 2.0, 8) > 0).all())


def test_top_k_kl_with_every_token_is_the_full_kl():
    generator = torch.Generator().manual_seed(1)
    teacher_logits = torch.randn(3, 4, 20, generator=generator)
    student_logits = torch.randn(3, 4, 20, generator=generator)
    temperature = 1.5
    full = F.kl_div(
        F.log_softmax(student_logits / temperature, -1),
        F.log_softmax(teacher_logits / temperature, -1),
        log_target=True,
        reduction="none",
    ).sum(-1)
    assert torch.allclose(top_k_kl(teacher_logits, student_logits, temperature, 20), full, atol=1e-6)


def test_alpha_zero_is_plain_cross_entropy(teacher):
    student = tiny_model(init_seed=1)
    batch = DATA.train[:4]
    loss = DistillationLoss(teacher, DistillConfig(alpha=0.0))
    with torch.no_grad():
        assert float(loss(student, batch)) == pytest.approx(float(causal_lm_loss(student, batch)), rel=1e-6)


def test_student_moves_toward_the_teacher(teacher):
    student = tiny_model(init_seed=1)
    loss = DistillationLoss(teacher, CONFIG)
    heldout = DATA.heldout[:16]
    kl_before = teacher_kl(student, teacher, heldout, CONFIG)
    optimizer = make_inner_optimizer(student, InnerOptimizerConfig(lr=FAST_LR, weight_decay=0.0))
    losses = [
        train_step(student, optimizer, DATA.train[4 * i : 4 * i + 4], loss_fn=loss).loss for i in range(30)
    ]
    kl_after = teacher_kl(student, teacher, heldout, CONFIG)
    assert sum(losses[-5:]) / 5 < 0.7 * sum(losses[:5]) / 5
    assert kl_after < 0.5 * kl_before
    assert not any(p.grad is not None for p in teacher.parameters())


def test_distillation_segment_replays_bit_exactly(teacher):
    config = fast_inner_config(inner_steps=2, segment_steps=2)
    loss = DistillationLoss(teacher, CONFIG)
    batches = [DATA.train[0:4], DATA.train[4:8]]
    result = inner_loop(tiny_model(init_seed=2), lambda t: batches[t], loss, config)
    replay = replay_segment(tiny_model(), result.boundaries[0].state, batches, loss, config)
    assert states_equal(replay.end, result.boundaries[1].state)


def test_teacher_must_be_frozen_and_share_the_vocabulary(tmp_path):
    with pytest.raises(ValueError, match="must be frozen"):
        DistillationLoss(tiny_model(), CONFIG)
    small_vocab = tiny_model()
    small_vocab.resize_token_embeddings(200)
    small_vocab.requires_grad_(False)
    with pytest.raises(ValueError, match=r"teacher vocabulary \(200\) differs from the student's \(260\)"):
        DistillationLoss(small_vocab, CONFIG)(tiny_model(), DATA.train[:2, :8].clamp(max=199))


@pytest.mark.parametrize(
    ("fields", "message"),
    [({"alpha": 1.5}, "alpha"), ({"temperature": 0.0}, "temperature"), ({"top_k": 0}, "top_k")],
)
def test_bad_distill_configs_are_refused(fields, message):
    with pytest.raises(ValueError, match=message):
        DistillConfig(**fields)


@pytest.mark.parametrize("kind", ["pretrain", "distill"])
def test_per_sequence_losses_are_the_loss_row_by_row(teacher, kind):
    student = tiny_model(init_seed=1)
    loss_fn = causal_lm_loss if kind == "pretrain" else DistillationLoss(teacher, CONFIG)
    sequences = DATA.train[:10]
    batched = sequence_losses(student, sequences, loss_fn=loss_fn, batch_size=4)
    with torch.no_grad():
        alone = torch.tensor([float(loss_fn(student, row[None])) for row in sequences], dtype=torch.float64)
    assert batched.shape == (10,) and torch.allclose(batched, alone, rtol=1e-6, atol=0)
    assert float(batched.mean()) == pytest.approx(evaluate(student, sequences, loss_fn=loss_fn), rel=1e-6)
    # a loss with no per-sequence form is evaluated one sequence at a time
    assert torch.equal(sequence_losses(student, sequences, loss_fn=lambda m, b: loss_fn(m, b)), alone)
