"""The atomic-free kernels (`distrai.train.kernels`): each piece repeats bit for bit, and gives the
plain piece's values, forward and backward, on a CPU:

- the embedding whose backward is a one-hot matmul: the forward is the plain gather's bits; the
  weight's gradient in float32 is within |Δ| ≤ 1e-5·|g| + 1e-5 of `torch.nn.Embedding`'s (the sums'
  order differs); under bf16 autocast each per-token gradient and the sum are rounded to bf16, so
  |Δ| ≤ 2⁻⁷·(Σ|gᵢ| + |g|), Σ|gᵢ| the row's sum of the tokens' gradient magnitudes;
- the one-hot cross-entropy: the gather's bits exactly, loss and gradient;
- the padded output layer: logits, loss and the real rows' gradients within 1e-6 (relative) of an
  unpadded model with the same weights, the padding rows' gradient zero;
- two steps of a model with both, twice from one start: the same bits; against the plain model's
  steps from the same weights, ‖Δ parameters‖ ≤ 1e-4·‖update‖ (measured 1.3e-5: AdamW's normalized
  update magnifies the gradients' last-bit differences where a gradient is small)."""

from __future__ import annotations

import tomllib

import pytest
import torch

from distrai.data.byte_tokenizer import byte_tokenizer
from distrai.protocol.run import parse_run_config, shipped_config_path
from distrai.protocol.runtime import model_spec
from distrai.train.kernels import (
    AtomicFreeEmbedding,
    PaddedHead,
    kernels_of,
    one_hot_causal_lm_loss,
    one_hot_cross_entropy,
    padded_vocab,
)
from distrai.train.loss import causal_lm_loss, next_token_logits, rows_of, token_cross_entropy
from distrai.train.model import ModelSpec, load_model
from distrai.train.optimizer import InnerOptimizerConfig, make_inner_optimizer
from distrai.train.replay_class import replay_class_of
from distrai.train.step import StepConfig, step_with

V, D = 300, 48


def lookup(embedding: torch.nn.Embedding, ids, grad, autocast: bool = False):
    """The embedding's output and its weight's gradient for upstream gradient `grad`."""
    embedding.weight.grad = None
    with torch.autocast("cpu", dtype=torch.bfloat16, enabled=autocast):
        out = embedding(ids)
    out.backward(grad)
    return out.detach(), embedding.weight.grad.clone()


def tables(padding_idx=None):
    weight = torch.randn(V, D, generator=torch.Generator().manual_seed(1))
    plain = torch.nn.Embedding(V, D, padding_idx=padding_idx, _weight=weight.clone().requires_grad_())
    other = torch.nn.Embedding(V, D, padding_idx=padding_idx, _weight=weight.clone().requires_grad_())
    return plain, AtomicFreeEmbedding.of(other)


def inputs(tokens: int = 2048):
    generator = torch.Generator().manual_seed(2)
    ids = torch.randint(V, (8, tokens // 8), generator=generator)
    return ids, torch.randn(8, tokens // 8, D, generator=generator)


@pytest.mark.parametrize("padding_idx", [None, 7])
def test_the_embedding_repeats_itself_and_gives_the_plain_values_in_float32(padding_idx):
    plain, atomic_free = tables(padding_idx)
    ids, grad = inputs()
    out, g = lookup(atomic_free, ids, grad)
    out_again, g_again = lookup(atomic_free, ids, grad)
    assert torch.equal(out, out_again) and torch.equal(g, g_again)
    plain_out, plain_g = lookup(plain, ids, grad)
    assert torch.equal(out, plain_out), "the forward is the same gather"
    assert torch.allclose(g, plain_g, rtol=1e-5, atol=1e-5)
    if padding_idx is not None:
        assert (ids == padding_idx).any() and not g[padding_idx].any() and not plain_g[padding_idx].any()


def test_under_bf16_autocast_the_embedding_gradient_is_rounded_as_a_linear_layer_s():
    plain, atomic_free = tables()
    ids, grad = inputs()
    out, g = lookup(atomic_free, ids, grad, autocast=True)
    assert torch.equal(g, lookup(atomic_free, ids, grad, autocast=True)[1])
    plain_out, plain_g = lookup(plain, ids, grad, autocast=True)
    assert out.dtype == plain_out.dtype == torch.float32 and torch.equal(out, plain_out)
    magnitude = lookup(plain, ids, grad.abs())[1]
    error = (g - plain_g).abs()
    assert (error <= 2**-7 * (magnitude + plain_g.abs())).all(), float((error / magnitude).max())
    assert error.max() > 0, "the bf16 matmul rounds"


def test_the_one_hot_cross_entropy_gives_the_gather_s_bits():
    generator = torch.Generator().manual_seed(3)
    logits = torch.randn(4, 31, V, generator=generator, requires_grad=True)
    targets = torch.randint(V, (4, 31), generator=generator)
    results = []
    for loss_of in (token_cross_entropy, one_hot_cross_entropy, one_hot_cross_entropy):
        logits.grad = None
        loss = loss_of(logits, targets).mean()
        loss.backward()
        results.append((loss.detach(), logits.grad.clone()))
    (plain, plain_grad), (mine, grad), (again, grad_again) = results
    assert torch.equal(mine, again) and torch.equal(grad, grad_again)
    assert torch.equal(mine, plain) and torch.equal(grad, plain_grad)


def padded_and_plain(kernels: str = "aten"):
    tokenizer = byte_tokenizer()
    plain = load_model(ModelSpec(preset="tiny"), tokenizer=tokenizer)
    padded = load_model(ModelSpec(preset="tiny", pad_vocab_to=64, kernels=kernels), tokenizer=tokenizer)
    rows = padded_vocab(len(tokenizer), 64)
    assert padded.get_input_embeddings().weight.shape[0] == padded.lm_head.weight.shape[0] == rows == 320
    assert isinstance(padded.lm_head, PaddedHead) and padded.lm_head.vocab == len(tokenizer) == 260
    with torch.no_grad():
        for (name, p), (other, q) in zip(padded.named_parameters(), plain.named_parameters(), strict=True):
            assert name == other
            p[: q.shape[0]].copy_(q)
    return padded, plain


def test_the_padded_vocabulary_gives_the_plain_values_and_no_gradient_to_its_extra_rows():
    padded, plain = padded_and_plain()
    batch = torch.randint(260, (4, 33), generator=torch.Generator().manual_seed(4))
    grads = []
    for model in (padded, plain, padded):
        model.zero_grad(set_to_none=True)
        loss = causal_lm_loss(model, batch)
        loss.backward()
        grads.append((loss.detach(), {n: p.grad.clone() for n, p in model.named_parameters()}))
    (loss, grad), (plain_loss, plain_grad), (again, grad_again) = grads
    assert torch.equal(loss, again) and all(torch.equal(grad[n], grad_again[n]) for n in grad)
    assert padded(input_ids=batch).logits.shape[-1] == 260
    assert torch.allclose(loss, plain_loss, rtol=1e-6)
    for name, g in grad.items():
        rows = plain_grad[name].shape[0]
        assert torch.allclose(g[:rows], plain_grad[name], rtol=1e-6, atol=1e-7), name
        assert not g[rows:].any(), f"{name}: the extra rows get no gradient"


def test_a_step_with_both_repeats_and_lands_where_the_plain_step_does():
    batch = torch.randint(260, (8, 65), generator=torch.Generator().manual_seed(5))
    step = StepConfig(micro_batches=2, cpu_threads=1)
    ends = []
    for kernels, loss_fn in (
        ("atomic_free", one_hot_causal_lm_loss),
        ("atomic_free", one_hot_causal_lm_loss),
    ):
        model, _ = padded_and_plain(kernels)
        assert kernels_of(model) == "atomic_free"
        optimizer = make_inner_optimizer(model, InnerOptimizerConfig(lr=1e-3))
        for _ in range(2):
            step_with(step, model, optimizer, batch, loss_fn)
        ends.append({n: p.detach().clone() for n, p in model.named_parameters()})
    _, plain = padded_and_plain()
    start = {n: p.detach().clone() for n, p in plain.named_parameters()}
    optimizer = make_inner_optimizer(plain, InnerOptimizerConfig(lr=1e-3))
    for _ in range(2):
        step_with(step, plain, optimizer, batch, causal_lm_loss)
    first, second = ends
    assert all(torch.equal(first[n], second[n]) for n in first), "the same bits twice"
    moved = sum(float((p.detach() - start[n]).pow(2).sum()) for n, p in plain.named_parameters()) ** 0.5
    gap = (
        sum(float((first[n][: p.shape[0]] - p.detach()).pow(2).sum()) for n, p in plain.named_parameters())
        ** 0.5
    )
    # A matmul's embedding backward and a one-hot loss in place of aten's scatter and gather: the two
    # land apart by rounding on some CPUs and on the very same bits on others (both seen), within
    # 1e-4 of how far the steps move.
    assert moved > 0 and gap <= 1e-4 * moved, (gap, moved)


def test_the_run_config_turns_them_on_and_the_replay_class_records_it():
    data = tomllib.loads(shipped_config_path("cpu-localnet").read_text())
    config = parse_run_config(
        {**data, "model": {**data["model"], "kernels": "atomic_free", "pad_vocab_to": 64}}
    )
    spec = model_spec(config.model)
    assert (spec.kernels, spec.pad_vocab_to) == ("atomic_free", 64)
    model = load_model(spec)
    mine = replay_class_of(model, torch.device("cpu"), StepConfig())
    plain = replay_class_of(
        load_model(model_spec(parse_run_config(data).model)), torch.device("cpu"), StepConfig()
    )
    assert (mine.kernels, plain.kernels) == ("atomic_free", "aten") and mine != plain
    with pytest.raises(ValueError, match="pad_vocab_to applies only to a preset"):
        parse_run_config(
            {**data, "model": {"path_or_id": "some/model", "revision": "abc", "pad_vocab_to": 64}}
        )
    with pytest.raises(ValueError, match="unknown kernels"):
        ModelSpec(preset="tiny", kernels="fast")


def test_evaluations_read_the_one_hot_loss_row_by_row_with_the_same_values():
    model = load_model(ModelSpec(preset="tiny", kernels="atomic_free"))
    batch = torch.randint(260, (3, 17), generator=torch.Generator().manual_seed(6))
    rows = rows_of(one_hot_causal_lm_loss)
    assert rows is not None
    with torch.no_grad():
        one_hot_rows = one_hot_cross_entropy(next_token_logits(model, batch), batch[:, 1:]).mean(dim=1)
        assert torch.equal(rows(model, batch), one_hot_rows)
