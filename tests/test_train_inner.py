"""The inner loop and its replay: boundaries, the pseudo-gradient, and a validator's bit-exact
recomputation of every segment (and its failure on other data)."""

from __future__ import annotations

import dataclasses
import math

import pytest
import torch
from support.tiny_models import fast_inner_config, tiny_data, tiny_model

from distrai.train.assignment import batch_indices
from distrai.train.inner import InnerConfig, TimeUp, float_params, inner_loop, own_anchor, window_start_state
from distrai.train.loss import causal_lm_loss
from distrai.train.optimizer import InnerOptimizerConfig
from distrai.train.replay import replay_distance, replay_segment
from distrai.train.sketch import sketch
from distrai.train.train_state import decode_state, encode_state, state_hash, states_equal

DATA = tiny_data(seq_len=32, documents=120)
MINERS = ["alice", "bob", "carol"]
CONFIG = fast_inner_config(inner_steps=6, segment_steps=2)


def batch_for(hotkey: str, window: int = 0):
    return lambda step: DATA.batch(batch_indices("run", window, hotkey, step, 4, DATA.n_train, MINERS))


@pytest.fixture(scope="module")
def honest():
    """Bob's window: the model he started from, and what his inner loop produced."""
    model = tiny_model()
    start = float_params(model)
    result = inner_loop(model, batch_for("bob"), causal_lm_loss, CONFIG)
    return start, float_params(model), result


def test_boundaries_sit_every_k_steps(honest):
    _, _, result = honest
    assert [b.step for b in result.boundaries] == [0, 2, 4, 6]
    assert len(result.losses) == 6
    assert all(b.state is not None and b.state.step == b.step for b in result.boundaries)
    assert all(b.state_hash == state_hash(b.state) for b in result.boundaries)
    assert all(b.sketch == sketch(b.state.params, CONFIG.sketch_seed).tolist() for b in result.boundaries)


def test_boundary_zero_is_computable_from_the_global_model(honest):
    _, _, result = honest
    assert result.boundaries[0].state_hash == state_hash(window_start_state(tiny_model()))


def test_pseudo_gradient_is_global_minus_local(honest):
    start, end, result = honest
    assert result.pseudo_gradient.keys() == start.keys()
    for name, delta in result.pseudo_gradient.items():
        assert delta.dtype == torch.float32
        assert torch.equal(delta, start[name] - end[name])
    last = result.boundaries[-1].state
    assert all(torch.equal(last.params[n], end[n]) for n in end)
    assert any(bool(delta.abs().max() > 0) for delta in result.pseudo_gradient.values())


def test_losses_fall_during_the_window(honest):
    _, _, result = honest
    assert result.losses[-1] < result.losses[0] - 0.5


def test_every_segment_replays_bit_exactly_from_revealed_bytes(honest):
    _, _, result = honest
    batch_of = batch_for("bob")
    for segment in range(CONFIG.n_segments):
        start = decode_state(encode_state(result.boundaries[segment].state))
        claimed = result.boundaries[segment + 1]
        assert state_hash(start) == result.boundaries[segment].state_hash
        batches = [batch_of(t) for t in range(start.step, start.step + CONFIG.segment_steps)]
        replay = replay_segment(tiny_model(init_seed=11), start, batches, causal_lm_loss, CONFIG)
        assert state_hash(replay.end) == claimed.state_hash
        assert states_equal(replay.end, claimed.state)
        assert replay.losses == result.losses[start.step : start.step + CONFIG.segment_steps]
        assert replay_distance(start, claimed.state, replay.end) == 0.0


def test_training_on_other_data_fails_the_replay(honest):
    _, _, result = honest
    start = result.boundaries[1].state
    claimed = result.boundaries[2].state
    alices = [batch_for("alice")(t) for t in (2, 3)]
    replay = replay_segment(tiny_model(), start, alices, causal_lm_loss, CONFIG)
    assert state_hash(replay.end) != state_hash(claimed)
    assert replay_distance(start, claimed, replay.end) > 0.1


def test_replay_with_another_micro_batch_split_is_not_bit_exact(honest):
    _, _, result = honest
    start = result.boundaries[0].state
    split = fast_inner_config(inner_steps=6, segment_steps=2, micro_batches=2)
    batches = [batch_for("bob")(t) for t in (0, 1)]
    replay = replay_segment(tiny_model(), start, batches, causal_lm_loss, split)
    distance = replay_distance(start, result.boundaries[1].state, replay.end)
    assert 0.0 < distance < 0.5


def test_a_skipped_step_is_caught(honest):
    _, _, result = honest
    start = result.boundaries[0].state
    replay = replay_segment(tiny_model(), start, [batch_for("bob")(0)], causal_lm_loss, CONFIG)
    assert state_hash(replay.end) != result.boundaries[1].state_hash


def test_replay_distance_edge_cases(honest):
    _, _, result = honest
    state = result.boundaries[1].state
    other = result.boundaries[2].state
    assert replay_distance(state, state, state) == 0.0
    assert math.isinf(replay_distance(state, state, other))


def test_states_can_be_streamed_out_instead_of_kept():
    seen = []
    model = tiny_model()
    result = inner_loop(
        model, batch_for("carol"), causal_lm_loss, CONFIG, keep_states=False, on_boundary=seen.append
    )
    assert [b.step for b in seen] == [0, 2, 4, 6]
    assert all(b.state is None for b in result.boundaries)
    assert [b.state_hash for b in seen] == [b.state_hash for b in result.boundaries]


def test_warmup_schedule_reaches_the_optimizer():
    config = InnerOptimizerConfig(lr=1e-3, warmup_steps=4)
    assert [config.lr_at(s) for s in range(6)] == pytest.approx([2.5e-4, 5e-4, 7.5e-4, 1e-3, 1e-3, 1e-3])
    with_warmup = InnerConfig(inner_steps=1, segment_steps=1, optimizer=config)
    without = InnerConfig(inner_steps=1, segment_steps=1, optimizer=InnerOptimizerConfig(lr=1e-3))
    a = inner_loop(tiny_model(), batch_for("alice"), causal_lm_loss, with_warmup)
    b = inner_loop(tiny_model(), batch_for("alice"), causal_lm_loss, without)
    # Adam's first step moves each weight by lr·g/|g| = ±lr: a quarter of it under this warm-up.
    name = "model.layers.0.mlp.up_proj.weight"
    warm = a.boundaries[1].state.params[name] - a.boundaries[0].state.params[name]
    full = b.boundaries[1].state.params[name] - b.boundaries[0].state.params[name]
    assert float(full.abs().median()) == pytest.approx(1e-3, rel=0.02)
    assert float(warm.abs().median()) == pytest.approx(2.5e-4, rel=0.02)


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"inner_steps": 5, "segment_steps": 2}, "not a whole number of segments"),
        ({"inner_steps": 0, "segment_steps": 1}, "must be positive"),
    ],
)
def test_bad_inner_configs_are_refused(fields, message):
    with pytest.raises(ValueError, match=message):
        InnerConfig(**fields)


def test_an_anchored_window_replays_only_against_its_base():
    anchored = dataclasses.replace(CONFIG, base_anchor=0.05)
    base = float_params(tiny_model())
    result = inner_loop(tiny_model(), batch_for("bob"), causal_lm_loss, anchored)
    start, end = result.boundaries[1].state, result.boundaries[2].state
    batches = [batch_for("bob")(t) for t in (2, 3)]
    replay = replay_segment(tiny_model(), start, batches, causal_lm_loss, anchored, base=base)
    assert states_equal(replay.end, end)
    other_base = float_params(tiny_model(init_seed=5))
    elsewhere = replay_segment(tiny_model(), start, batches, causal_lm_loss, anchored, base=other_base)
    assert not states_equal(elsewhere.end, end)
    with pytest.raises(ValueError, match="no base was given"):
        replay_segment(tiny_model(), start, batches, causal_lm_loss, anchored)


def test_a_base_kept_in_host_memory_gives_the_same_bits_and_either_replay_verifies_it():
    anchored = dataclasses.replace(CONFIG, base_anchor=0.05)
    on_host = dataclasses.replace(anchored, base_on_host=True)
    model = tiny_model()
    anchor = own_anchor(model, on_host)
    assert all(t.device.type == "cpu" and not t.is_pinned() for t in anchor.params.values())
    assert all(anchor.params[n].dtype == p.dtype for n, p in model.named_parameters())
    base = float_params(tiny_model())
    device = inner_loop(tiny_model(), batch_for("bob"), causal_lm_loss, anchored)
    host = inner_loop(tiny_model(), batch_for("bob"), causal_lm_loss, on_host)
    assert [b.state_hash for b in host.boundaries] == [b.state_hash for b in device.boundaries]
    start, end = host.boundaries[1].state, host.boundaries[2].state
    batches = [batch_for("bob")(t) for t in (2, 3)]
    for config in (anchored, on_host):
        replay = replay_segment(tiny_model(), start, batches, causal_lm_loss, config, base=base)
        assert states_equal(replay.end, end)
    sharded = dataclasses.replace(CONFIG.step, ranks=2, sharded=True)
    with pytest.raises(ValueError, match="sharded ranks keep their shard of the window's base on the device"):
        dataclasses.replace(on_host, step=sharded)


def test_a_window_cut_short_is_the_full_window_s_first_segments(honest):
    """A miner whose time runs out (`go_on` says no before segment 2) commits a prefix of the
    trajectory it would have trained: the same boundaries and losses, and the update from there."""
    _, _, full = honest
    asked = []

    def go_on(segment: int) -> bool:
        asked.append(segment)
        return segment < 2

    model = tiny_model()
    start = float_params(model)
    cut = inner_loop(model, batch_for("bob"), causal_lm_loss, CONFIG, go_on=go_on)
    assert asked == [1, 2]
    assert [b.step for b in cut.boundaries] == [0, 2, 4]
    assert [b.state_hash for b in cut.boundaries] == [b.state_hash for b in full.boundaries[:3]]
    assert cut.losses == full.losses[:4]
    end = full.boundaries[2].state.params
    assert all(torch.equal(cut.pseudo_gradient[n], start[n] - end[n].float()) for n in start)


@pytest.mark.parametrize("at", [3, 5], ids=["in segment 1", "in the last segment"])
def test_a_window_whose_time_runs_out_in_a_segment_ends_at_the_boundary_before(honest, at):
    """`TimeUp` from the batch of step `at` (its data out of reach until the miner's stop time) cuts the
    segment: the window is the whole segments before it, bit for bit."""
    _, _, full = honest
    batches = batch_for("bob")

    def batch(step: int) -> torch.Tensor:
        if step == at:
            raise TimeUp(f"step {step}")
        return batches(step)

    model = tiny_model()
    start = float_params(model)
    cut = inner_loop(model, batch, causal_lm_loss, CONFIG)
    whole = at // CONFIG.segment_steps
    assert [b.step for b in cut.boundaries] == [b.step for b in full.boundaries[: whole + 1]]
    assert [b.state_hash for b in cut.boundaries] == [b.state_hash for b in full.boundaries[: whole + 1]]
    assert cut.losses == full.losses[: whole * CONFIG.segment_steps]
    end = full.boundaries[whole].state.params
    assert all(torch.equal(cut.pseudo_gradient[n], start[n] - end[n].float()) for n in start)


def test_a_window_whose_time_runs_out_in_its_first_segment_has_nothing_to_commit():
    def batch(step: int) -> torch.Tensor:
        raise TimeUp(f"step {step}")

    with pytest.raises(TimeUp):
        inner_loop(tiny_model(), batch, causal_lm_loss, CONFIG)


def test_a_window_carries_nothing_from_the_window_before(honest):
    """The inner recipe (docs/training.md, "The inner recipe"): every window starts a fresh AdamW and
    its warm-up, so a miner that trained window 0 and a fresh process given only window 1's base train
    window 1 to the same bits, and its boundary 0 is the base with zero moments."""
    _, end, _ = honest
    carried = tiny_model()
    inner_loop(carried, batch_for("bob"), causal_lm_loss, CONFIG)
    after = inner_loop(carried, batch_for("bob", window=1), causal_lm_loss, CONFIG)
    fresh = tiny_model()
    with torch.no_grad():
        for name, p in fresh.named_parameters():
            p.copy_(end[name])
    base_state = state_hash(window_start_state(fresh))
    alone = inner_loop(fresh, batch_for("bob", window=1), causal_lm_loss, CONFIG)
    assert after.losses == alone.losses
    assert [b.state_hash for b in after.boundaries] == [b.state_hash for b in alone.boundaries]
    assert after.boundaries[0].state_hash == base_state, "boundary 0: the base and an optimizer with no state"
