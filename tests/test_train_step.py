"""The one training step: bit-exact repetition, independence from the caller's thread count,
micro-batch accumulation, and refusal of bad input."""

from __future__ import annotations

import pytest
import torch
from support.tiny_models import FAST_LR, tiny_data, tiny_model

from distrai.train.loss import causal_lm_loss
from distrai.train.model import ModelSpec, load_model
from distrai.train.optimizer import InnerOptimizerConfig, make_inner_optimizer
from distrai.train.step import Anchor, StepConfig, anchor_to, train_step
from distrai.train.train_state import capture_state, state_hash, states_equal

DATA = tiny_data(seq_len=32, documents=120)
BATCHES = [DATA.train[i * 4 : (i + 1) * 4] for i in range(3)]


def run_segment(micro_batches=1, cpu_threads=1, caller_threads=None, batches=BATCHES):
    """Fresh model and AdamW, three steps; returns the end state."""
    previous = torch.get_num_threads()
    if caller_threads is not None:
        torch.set_num_threads(caller_threads)
    try:
        model = tiny_model()
        optimizer = make_inner_optimizer(model, InnerOptimizerConfig(lr=FAST_LR))
        for batch in batches:
            train_step(
                model,
                optimizer,
                batch,
                loss_fn=causal_lm_loss,
                micro_batches=micro_batches,
                cpu_threads=cpu_threads,
            )
        return capture_state(model, optimizer, len(batches))
    finally:
        torch.set_num_threads(previous)


def test_same_segment_twice_is_bit_identical():
    first = run_segment()
    second = run_segment()
    assert state_hash(first) == state_hash(second)
    assert states_equal(first, second)
    assert first.optimizer.keys() == second.optimizer.keys()
    assert {key.rsplit("/", 1)[1] for key in first.optimizer} == {"step", "exp_avg", "exp_avg_sq"}
    for name in first.params:
        assert torch.equal(first.params[name], second.params[name])
    for key in first.optimizer:
        assert torch.equal(first.optimizer[key], second.optimizer[key])


def test_caller_thread_count_does_not_matter():
    one = run_segment(caller_threads=1)
    three = run_segment(caller_threads=3)
    assert states_equal(one, three)


def test_a_pinned_multi_thread_step_repeats_itself():
    assert states_equal(
        run_segment(cpu_threads=2, caller_threads=1), run_segment(cpu_threads=2, caller_threads=3)
    )


def test_step_restores_the_callers_thread_count():
    previous = torch.get_num_threads()
    torch.set_num_threads(3)
    try:
        run_segment(cpu_threads=1, batches=BATCHES[:1])
        assert torch.get_num_threads() == 3
    finally:
        torch.set_num_threads(previous)


def test_micro_batch_split_replays_exactly():
    split = run_segment(micro_batches=2)
    assert states_equal(split, run_segment(micro_batches=2))
    assert states_equal(run_segment(micro_batches=4), run_segment(micro_batches=4, caller_threads=3))


def test_micro_batches_accumulate_the_whole_batch_gradient():
    # With plain SGD at lr 1 the step moves each parameter by exactly minus its gradient.
    def moved_by(micro_batches: int) -> dict[str, torch.Tensor]:
        model = tiny_model()
        before = {n: p.detach().clone() for n, p in model.named_parameters()}
        sgd = torch.optim.SGD(model.parameters(), lr=1.0)
        train_step(
            model, sgd, DATA.train[:8], loss_fn=causal_lm_loss, micro_batches=micro_batches, max_grad_norm=1e9
        )
        return {n: before[n] - p.detach() for n, p in model.named_parameters()}

    model = tiny_model()
    causal_lm_loss(model, DATA.train[:8]).backward()
    reference = {n: p.grad for n, p in model.named_parameters()}
    for micro_batches in (1, 2, 4):
        moved = moved_by(micro_batches)
        for name, grad in reference.items():
            assert torch.allclose(moved[name], grad, atol=1e-6, rtol=1e-4), (micro_batches, name)


def test_step_result_reports_loss_norm_and_tokens():
    model = tiny_model()
    with torch.no_grad():
        expected_loss = float(causal_lm_loss(model, BATCHES[0]))
    optimizer = make_inner_optimizer(model, InnerOptimizerConfig(lr=FAST_LR))
    result = train_step(model, optimizer, BATCHES[0], loss_fn=causal_lm_loss, max_grad_norm=0.5)
    assert result.loss == pytest.approx(expected_loss, rel=1e-6)
    assert result.tokens == 4 * 31
    assert result.grad_norm > 0.5


def test_non_finite_loss_leaves_parameters_untouched():
    model = tiny_model()
    optimizer = make_inner_optimizer(model, InnerOptimizerConfig(lr=FAST_LR))
    before = capture_state(model, optimizer, 0)

    def broken_loss(m, batch):
        return causal_lm_loss(m, batch) * float("nan")

    with pytest.raises(FloatingPointError, match="not applied"):
        train_step(model, optimizer, BATCHES[0], loss_fn=broken_loss)
    assert states_equal(before, capture_state(model, optimizer, 0))


@pytest.mark.parametrize(
    ("batch", "fields", "message"),
    [
        (BATCHES[0].float(), {}, "2-D int64"),
        (BATCHES[0][0], {}, "2-D int64"),
        (BATCHES[0][:, :1], {}, "at least 2 tokens"),
        (BATCHES[0][:3], {"micro_batches": 2}, "cannot be split into 2"),
        (BATCHES[0], {"micro_batches": 0}, "micro_batches must be at least 1"),
        (BATCHES[0], {"max_grad_norm": 0.0}, "max_grad_norm must be positive"),
        (BATCHES[0], {"cpu_threads": 0}, "cpu_threads must be at least 1"),
    ],
)
def test_bad_steps_are_refused(batch, fields, message):
    model = tiny_model()
    optimizer = make_inner_optimizer(model, InnerOptimizerConfig())
    with pytest.raises(ValueError, match=message):
        train_step(model, optimizer, batch, loss_fn=causal_lm_loss, **fields)


def test_step_config_defaults():
    config = StepConfig()
    assert (config.micro_batches, config.max_grad_norm, config.cpu_threads) == (1, 1.0, 1)


def test_an_anchor_pulls_every_parameter_toward_the_base_after_the_optimizer_step():
    base_model = tiny_model(init_seed=3)
    base = {n: p.detach().clone() for n, p in base_model.named_parameters()}
    free, anchored = tiny_model(), tiny_model()
    free_opt = make_inner_optimizer(free, InnerOptimizerConfig(lr=FAST_LR))
    anchored_opt = make_inner_optimizer(anchored, InnerOptimizerConfig(lr=FAST_LR))
    train_step(free, free_opt, BATCHES[0], loss_fn=causal_lm_loss)
    train_step(
        anchored, anchored_opt, BATCHES[0], loss_fn=causal_lm_loss, anchor=anchor_to(anchored, base, 0.5)
    )
    weight = FAST_LR * 0.5
    for (name, a), (_, f) in zip(anchored.named_parameters(), free.named_parameters(), strict=True):
        assert torch.equal(a, torch.lerp(f.detach(), base[name], weight)), name
    assert any(not torch.equal(a, f) for a, f in zip(anchored.parameters(), free.parameters(), strict=True))


def test_an_anchor_names_what_it_lacks_and_refuses_a_bad_strength():
    model = tiny_model()
    with pytest.raises(ValueError, match="no parameter"):
        anchor_to(model, {}, 0.1)
    with pytest.raises(ValueError, match="strength"):
        Anchor({}, -1.0)


def run_kernels(
    attention: str, adamw: str, autocast: str | None, dtype: str = "float32", lr: float = FAST_LR
):
    """Three steps of a fresh tiny model with the given attention, AdamW and autocast; the end state."""
    model = load_model(ModelSpec(preset="tiny", attention=attention, dtype=dtype))
    optimizer = make_inner_optimizer(model, InnerOptimizerConfig(lr=lr, implementation=adamw))
    for batch in BATCHES:
        train_step(model, optimizer, batch, loss_fn=causal_lm_loss, autocast=autocast)
    return capture_state(model, optimizer, len(BATCHES))


@pytest.mark.parametrize(
    ("attention", "adamw", "autocast"),
    [
        ("sdpa", "single", None),
        ("eager", "foreach", None),
        ("eager", "fused", None),
        ("sdpa", "fused", "bfloat16"),
    ],
)
def test_each_fast_kernel_repeats_bit_for_bit(attention, adamw, autocast):
    assert state_hash(run_kernels(attention, adamw, autocast)) == state_hash(
        run_kernels(attention, adamw, autocast)
    )


def test_bf16_autocast_computes_in_bf16_and_keeps_fp32_master_weights():
    reference, autocast = run_kernels("eager", "single", None), run_kernels("eager", "single", "bfloat16")
    assert all(p.dtype == torch.float32 for p in autocast.params.values())
    assert not states_equal(reference, autocast), "the forward did not run in bf16"


def test_fp32_master_weights_keep_updates_that_bf16_parameters_round_away():
    """An AdamW step moves each weight by about lr; at lr 1e-6 that is below bf16's resolution near
    the weights' magnitude (2⁻⁸ relative), so bf16 parameters mostly stay where they were, and fp32
    master weights under bf16 autocast take every step."""

    def moved(state, dtype: str) -> float:
        start = dict(load_model(ModelSpec(preset="tiny", dtype=dtype)).named_parameters())
        changed = sum(int((state.params[n] != p.detach()).sum()) for n, p in start.items())
        return changed / sum(p.numel() for p in start.values())

    assert moved(run_kernels("eager", "single", "bfloat16", lr=1e-6), "float32") > 0.99
    assert moved(run_kernels("eager", "single", None, dtype="bfloat16", lr=1e-6), "bfloat16") < 0.5
