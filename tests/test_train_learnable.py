"""The built-in corpus is learnable by the tiny model, measured by `evaluate` on held-out data."""

from __future__ import annotations

import math

import pytest
import torch
from support.tiny_models import tiny_data, tiny_model, train_on

from distrai.train.evaluate import evaluate
from distrai.train.loss import causal_lm_loss

DATA = tiny_data(seq_len=64, documents=300)


def test_heldout_loss_falls_within_a_hundred_steps():
    model = tiny_model()
    heldout = DATA.heldout[:32]
    before = evaluate(model, heldout)
    train_on(model, DATA, steps=80, batch_size=8)
    after = evaluate(model, heldout)
    # An untrained model is near uniform over 260 tokens (ln 260 ≈ 5.56 nats); letter frequencies
    # alone bring English-like text to about 3 nats, so going well below that means the model
    # learned more than frequencies.
    assert before == pytest.approx(math.log(260), abs=0.3)
    assert after < 2.5


def test_evaluate_is_the_mean_loss_per_sequence_whatever_the_batching():
    model = tiny_model()
    sequences = DATA.heldout[:10]
    with torch.no_grad():
        per_sequence = [float(causal_lm_loss(model, row.unsqueeze(0))) for row in sequences]
    expected = sum(per_sequence) / len(per_sequence)
    assert evaluate(model, sequences, batch_size=3) == pytest.approx(expected, rel=1e-5)
    assert evaluate(model, sequences, batch_size=10) == pytest.approx(expected, rel=1e-5)


def test_evaluate_restores_training_mode_and_refuses_bad_input():
    model = tiny_model()
    model.train()
    evaluate(model, DATA.heldout[:2])
    assert model.training
    with pytest.raises(ValueError, match="evaluation needs sequences"):
        evaluate(model, DATA.heldout[:0])
    with pytest.raises(ValueError, match="batch_size"):
        evaluate(model, DATA.heldout[:2], batch_size=0)
