"""Committed training state: canonical hashing, bit-exact serialization, restoring into a model,
refusal of malformed states, and the linear sketch."""

from __future__ import annotations

import pickle

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from support.tiny_models import FAST_LR, tiny_data, tiny_model

from distrai.train.hashing import hash_tensors
from distrai.train.loss import causal_lm_loss
from distrai.train.optimizer import InnerOptimizerConfig, make_inner_optimizer
from distrai.train.outer import OuterState, encode_outer_state
from distrai.train.sketch import sketch
from distrai.train.step import train_step
from distrai.train.train_state import (
    TrainState,
    capture_state,
    check_state,
    decode_state,
    encode_state,
    load_state,
    restore_state,
    save_state,
    state_hash,
    states_equal,
)
from distrai.wire import WireError

DATA = tiny_data(seq_len=32, documents=120)


def trained(steps: int = 2, init_seed: int = 0):
    model = tiny_model(init_seed)
    optimizer = make_inner_optimizer(model, InnerOptimizerConfig(lr=FAST_LR))
    for i in range(steps):
        train_step(model, optimizer, DATA.train[4 * i : 4 * i + 4], loss_fn=causal_lm_loss)
    return model, optimizer


def test_hash_ignores_insertion_order_but_not_names_dtypes_or_bits():
    a = torch.arange(6, dtype=torch.float32).reshape(2, 3)
    b = torch.ones(4, dtype=torch.bfloat16)
    base = hash_tensors("t", {"a": a, "b": b})
    assert hash_tensors("t", {"b": b, "a": a}) == base
    assert hash_tensors("t", {"a": a.t().contiguous().t(), "b": b}) == base
    assert hash_tensors("u", {"a": a, "b": b}) != base
    assert hash_tensors("t", {"a2": a, "b": b}) != base
    assert hash_tensors("t", {"a": a.reshape(3, 2), "b": b}) != base
    assert hash_tensors("t", {"a": a.view(torch.int32), "b": b}) != base
    flipped = a.clone()
    flipped.view(torch.int32)[1, 2] ^= 1
    assert hash_tensors("t", {"a": flipped, "b": b}) != base


def test_state_hash_covers_step_and_optimizer():
    model, optimizer = trained()
    state = capture_state(model, optimizer, 2)
    assert state_hash(state) != state_hash(TrainState(state.params, state.optimizer, 3))
    assert state_hash(state) != state_hash(TrainState(state.params, {}, 2))


def test_encode_decode_and_files_are_bit_exact(tmp_path):
    model, optimizer = trained()
    state = capture_state(model, optimizer, 2)
    decoded = decode_state(encode_state(state))
    assert states_equal(decoded, state)
    assert state_hash(decoded) == state_hash(state)
    save_state(state, tmp_path / "state.safetensors")
    assert states_equal(load_state(tmp_path / "state.safetensors"), state)
    # the file is streamed from the tensors, byte for byte what encode_state builds, with no temp left
    assert (tmp_path / "state.safetensors").read_bytes() == encode_state(state)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["state.safetensors"]


def test_bfloat16_state_round_trips():
    state = TrainState({"w": torch.randn(3, 5).to(torch.bfloat16)}, {"w/exp_avg": torch.randn(3, 5)}, 7)
    assert states_equal(decode_state(encode_state(state)), state)


def test_restored_state_continues_exactly_like_the_original():
    model, optimizer = trained(steps=2)
    saved = decode_state(encode_state(capture_state(model, optimizer, 2)))
    other = tiny_model(init_seed=9)
    other_optimizer = make_inner_optimizer(other, InnerOptimizerConfig(lr=FAST_LR))
    restore_state(other, other_optimizer, saved)
    assert states_equal(capture_state(other, other_optimizer, 2), saved)
    batch = DATA.train[40:44]
    train_step(model, optimizer, batch, loss_fn=causal_lm_loss)
    train_step(other, other_optimizer, batch, loss_fn=causal_lm_loss)
    assert states_equal(capture_state(model, optimizer, 3), capture_state(other, other_optimizer, 3))


def test_restoring_an_empty_optimizer_state_clears_the_optimizer():
    model, optimizer = trained(steps=1)
    fresh = {n: p.detach().clone() for n, p in tiny_model().named_parameters()}
    restore_state(model, optimizer, TrainState(fresh, {}, 0))
    restored = capture_state(model, optimizer, 0)
    assert restored.optimizer == {}
    assert all(torch.equal(restored.params[n], fresh[n]) for n in fresh)


def test_check_state_names_what_is_wrong():
    model, optimizer = trained(steps=1)
    state = capture_state(model, optimizer, 1)
    name = "model.norm.weight"
    missing = TrainState({k: v for k, v in state.params.items() if k != name}, state.optimizer, 1)
    with pytest.raises(ValueError, match="missing \\['model.norm.weight'\\]"):
        check_state(model, missing)
    reshaped = TrainState({**state.params, name: state.params[name][:-1]}, state.optimizer, 1)
    with pytest.raises(ValueError, match="parameter model.norm.weight is torch.float32 \\(191,\\)"):
        check_state(model, reshaped)
    poisoned = TrainState(
        {**state.params, name: torch.full_like(state.params[name], float("nan"))}, state.optimizer, 1
    )
    with pytest.raises(ValueError, match="NaN or Inf"):
        check_state(model, poisoned)
    stray = TrainState(state.params, {**state.optimizer, "ghost.weight/exp_avg": torch.zeros(1)}, 1)
    with pytest.raises(ValueError, match="names no parameter"):
        check_state(model, stray)
    partial = TrainState(
        state.params, {k: v for k, v in state.optimizer.items() if k != f"{name}/exp_avg"}, 1
    )
    with pytest.raises(ValueError, match="different entries for different parameters"):
        check_state(model, partial)
    with pytest.raises(ValueError, match="NaN or Inf"):
        restore_state(model, optimizer, poisoned)


def test_decode_refuses_foreign_or_broken_bytes():
    with pytest.raises(WireError, match="shorter than the 8-byte header length"):
        decode_state(b"abc")
    with pytest.raises(WireError, match="malformed_safetensors"):
        decode_state((10**6).to_bytes(8, "little") + b"{}")
    with pytest.raises(WireError, match="malformed_safetensors"):
        decode_state((4).to_bytes(8, "little") + b"{{{{")
    with pytest.raises(WireError, match="pickle"):
        decode_state(pickle.dumps({"param/x": 1}))
    with pytest.raises(ValueError, match="expected a 'distrai.train_state/1' blob"):
        decode_state(encode_outer_state(OuterState(momentum={}, step=0)))


def test_sketch_is_linear_deterministic_and_seeded():
    generator = torch.Generator().manual_seed(0)
    a = {
        "x": torch.randn(300, 70, generator=generator, dtype=torch.float64),
        "y": torch.randn(9, dtype=torch.float64),
    }
    b = {
        "x": torch.randn(300, 70, generator=generator, dtype=torch.float64),
        "y": torch.randn(9, dtype=torch.float64),
    }
    combined = {k: 2.0 * a[k] - 3.0 * b[k] for k in a}
    assert torch.allclose(sketch(combined, "s"), 2.0 * sketch(a, "s") - 3.0 * sketch(b, "s"), atol=1e-9)
    assert torch.equal(sketch(a, "s"), sketch(dict(reversed(a.items())), "s"))
    assert not torch.allclose(sketch(a, "s"), sketch(a, "t"))
    assert sketch(a, "s", size=16).shape == (16,)


@settings(max_examples=20, deadline=None)
@given(index=st.integers(0, 499), value=st.floats(-100, 100, allow_nan=False).filter(lambda v: v != 0))
def test_sketch_of_one_coordinate_is_plus_or_minus_its_value_in_one_bucket(index, value):
    x = torch.zeros(500, dtype=torch.float64)
    x[index] = value
    result = sketch({"x": x}, "seed")
    assert int((result != 0).sum()) == 1
    assert abs(float(result.abs().max())) == abs(value)


def test_a_sparse_tensor_is_sketched_from_its_nonzeros_to_the_same_numbers():
    """A decoded top-k update is mostly zeros; its sketch skips them (12x faster at 1/64 density)
    and must give what summing every coordinate gives. Integer values keep every sum exact."""
    generator = torch.Generator().manual_seed(2)
    x = torch.zeros(20_000, dtype=torch.float64)
    where = torch.randperm(20_000, generator=generator)[:300]
    x[where] = torch.randint(1, 50, (300,), generator=generator).to(torch.float64)
    ones = torch.ones_like(x)  # x + 1 has no zeros: sketched coordinate by coordinate
    assert torch.equal(
        sketch({"x": x}, "s", 512), sketch({"x": x + ones}, "s", 512) - sketch({"x": ones}, "s", 512)
    )


def test_sketch_preserves_squared_norm_on_average():
    # For a count sketch with random signs, E‖Sx‖² = ‖x‖²; over many seeds the mean is close.
    x = {"x": torch.randn(2000, generator=torch.Generator().manual_seed(1), dtype=torch.float64)}
    ratios = [float(sketch(x, f"seed{i}").pow(2).sum() / x["x"].pow(2).sum()) for i in range(40)]
    assert 0.85 < sum(ratios) / len(ratios) < 1.15


def test_sketch_does_not_depend_on_thread_count():
    model, _ = trained(steps=0)
    params = {n: p.detach() for n, p in model.named_parameters()}
    previous = torch.get_num_threads()
    try:
        torch.set_num_threads(1)
        one = sketch(params, "run")
        torch.set_num_threads(3)
        assert torch.equal(sketch(params, "run"), one)
    finally:
        torch.set_num_threads(previous)
