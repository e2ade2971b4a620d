"""The outer step: the same bytes whatever the input order or thread count, DiLoCo's Nesterov
SGD, weighted means, median-norm clipping, and the saved momentum."""

from __future__ import annotations

import statistics

import pytest
import torch

from distrai.train.hashing import hash_tensors
from distrai.train.outer import (
    Contribution,
    OuterConfig,
    OuterState,
    aggregate,
    decode_outer_state,
    encode_outer_state,
    load_outer_state,
    outer_step,
    save_outer_state,
    update_norm,
    weighted_median,
)

# "embed" is larger than ATen's parallel grain (32768 elements), so thread counts can matter.
SHAPES = {"embed": (260, 192), "layer.weight": (16, 16), "layer.bias": (16,)}


def tensors(seed: int, scale: float = 1.0) -> dict[str, torch.Tensor]:
    generator = torch.Generator().manual_seed(seed)
    return {name: torch.randn(shape, generator=generator) * scale for name, shape in SHAPES.items()}


GLOBAL = tensors(0)
CONTRIBUTIONS = [
    Contribution(f"miner{i}", tensors(10 + i, scale=0.01 * (i + 1)), float(i + 1)) for i in range(5)
]


def step_bytes(contributions, threads: int, state=None) -> str:
    previous = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        result = outer_step(GLOBAL, contributions, state or OuterState(momentum={}), OuterConfig())
    finally:
        torch.set_num_threads(previous)
    return hash_tensors("outer", result.params) + hash_tensors("momentum", result.state.momentum)


def test_same_bytes_under_reordering_and_thread_counts():
    reference = step_bytes(CONTRIBUTIONS, threads=1)
    assert step_bytes(list(reversed(CONTRIBUTIONS)), threads=3) == reference
    shuffled = [CONTRIBUTIONS[i] for i in (3, 0, 4, 1, 2)]
    assert step_bytes(shuffled, threads=2) == reference


def test_matches_torch_sgd_with_nesterov_over_two_steps():
    config = OuterConfig(lr=0.7, momentum=0.9, clip_to_median_norm=False)
    params = {k: v.clone() for k, v in GLOBAL.items()}
    reference = {k: torch.nn.Parameter(v.clone()) for k, v in GLOBAL.items()}
    sgd = torch.optim.SGD(reference.values(), lr=0.7, momentum=0.9, nesterov=True)
    state = OuterState(momentum={})
    for window in range(2):
        updates = [
            Contribution("a", tensors(20 + window, 0.01), 1.0),
            Contribution("b", tensors(30 + window, 0.02), 3.0),
        ]
        result = outer_step(params, updates, state, config)
        params, state = result.params, result.state
        mean = {
            k: 0.25 * updates[0].pseudo_gradient[k] + 0.75 * updates[1].pseudo_gradient[k] for k in GLOBAL
        }
        for name, parameter in reference.items():
            parameter.grad = mean[name].clone()
        sgd.step()
    assert state.step == 2
    for name in GLOBAL:
        assert torch.allclose(params[name], reference[name].detach(), atol=1e-6, rtol=1e-6)


def test_lr_one_without_momentum_is_federated_averaging():
    local = {k: v - 0.05 for k, v in GLOBAL.items()}
    delta = {k: GLOBAL[k] - local[k] for k in GLOBAL}
    result = outer_step(
        GLOBAL, [Contribution("only", delta, 1.0)], OuterState({}), OuterConfig(lr=1.0, momentum=0.0)
    )
    for name in GLOBAL:
        assert torch.allclose(result.params[name], local[name], atol=1e-6)


def test_weighted_mean_without_clipping():
    a, b = tensors(1, 0.1), tensors(2, 0.1)
    result = aggregate(
        GLOBAL, [Contribution("a", a, 1.0), Contribution("b", b, 3.0)], clip_to_median_norm=False
    )
    for name in GLOBAL:
        assert torch.allclose(result.update[name], 0.25 * a[name] + 0.75 * b[name], atol=1e-7)


def test_updates_are_clipped_to_the_median_norm():
    base = tensors(5)
    unit = {k: v / update_norm(base) for k, v in base.items()}
    norms = {"a": 1.0, "b": 2.0, "c": 6.0}
    updates = [Contribution(key, {k: v * n for k, v in unit.items()}, 1.0) for key, n in norms.items()]
    result = aggregate(GLOBAL, updates)
    assert result.norms == pytest.approx(norms)
    assert result.clip_factors == pytest.approx({"a": 1.0, "b": 1.0, "c": 1 / 3})
    # Every update points the same way, so the mean has norm (1 + 2 + 2) / 3.
    assert update_norm(result.update) == pytest.approx(5 / 3, rel=1e-5)


def test_no_contributions_leaves_model_and_momentum_alone():
    state = OuterState(momentum=tensors(8), step=4)
    result = outer_step(GLOBAL, [], state, OuterConfig())
    assert all(torch.equal(result.params[k], GLOBAL[k]) for k in GLOBAL)
    assert result.state is state


def test_outer_state_round_trips_bit_exactly(tmp_path):
    result = outer_step(GLOBAL, CONTRIBUTIONS, OuterState({}), OuterConfig())
    decoded = decode_outer_state(encode_outer_state(result.state))
    assert decoded.step == 1
    assert hash_tensors("m", decoded.momentum) == hash_tensors("m", result.state.momentum)
    save_outer_state(result.state, tmp_path / "outer.safetensors")
    loaded = load_outer_state(tmp_path / "outer.safetensors")
    assert all(torch.equal(loaded.momentum[k], result.state.momentum[k]) for k in GLOBAL)
    empty = decode_outer_state(encode_outer_state(OuterState({})))
    assert empty.momentum == {} and empty.step == 0


def test_resumed_momentum_gives_the_same_next_step():
    first = outer_step(GLOBAL, CONTRIBUTIONS, OuterState({}), OuterConfig())
    resumed = decode_outer_state(encode_outer_state(first.state))
    again = CONTRIBUTIONS[:2]
    direct = outer_step(first.params, again, first.state, OuterConfig())
    restarted = outer_step(first.params, again, resumed, OuterConfig())
    assert hash_tensors("p", direct.params) == hash_tensors("p", restarted.params)


def nan_update():
    bad = tensors(3)
    bad["layer.bias"][0] = float("nan")
    return bad


@pytest.mark.parametrize(
    ("contributions", "message"),
    [
        ([Contribution("a", nan_update(), 1.0)], "tensor layer.bias holds NaN or Inf"),
        (
            [Contribution("a", {**tensors(3), "layer.bias": torch.zeros(3)}, 1.0)],
            "tensor layer.bias is torch.float32",
        ),
        ([Contribution("a", {k: v.double() for k, v in tensors(3).items()}, 1.0)], "expected float32"),
        (
            [Contribution("a", {"embed": tensors(3)["embed"]}, 1.0)],
            "missing \\['layer.bias', 'layer.weight'\\]",
        ),
        ([Contribution("a", tensors(3), 1.0), Contribution("a", tensors(4), 1.0)], "keys must be unique"),
        ([Contribution("a", tensors(3), 0.0)], "weights sum to zero"),
        ([Contribution("a", tensors(3), -1.0)], "finite and non-negative"),
    ],
)
def test_bad_contributions_are_refused(contributions, message):
    with pytest.raises(ValueError, match=message):
        outer_step(GLOBAL, contributions, OuterState({}), OuterConfig())


def test_non_float32_global_model_is_refused():
    with pytest.raises(ValueError, match="must be float32 on the CPU"):
        outer_step({k: v.bfloat16() for k, v in GLOBAL.items()}, CONTRIBUTIONS, OuterState({}), OuterConfig())


@pytest.mark.parametrize(
    ("fields", "message"), [({"lr": 0.0}, "lr must be positive"), ({"momentum": 1.0}, "momentum")]
)
def test_bad_outer_configs_are_refused(fields, message):
    with pytest.raises(ValueError, match=message):
        OuterConfig(**fields)


def test_the_clip_is_the_median_norm_weighted_by_each_updates_weight():
    """Half the updates scaled to 1e-4 of an honest one's size, weighing by what they teach (1e-4 of an
    honest update's gain): a plain median would clip the honest updates to 1e-4 of their size; the
    weighted median leaves them whole."""
    base = tensors(5)
    unit = {k: v / update_norm(base) for k, v in base.items()}
    honest = [
        Contribution(f"h{i}", {k: v * n for k, v in unit.items()}, 1.0) for i, n in enumerate((1.0, 1.2))
    ]
    tiny = [Contribution(f"t{i}", {k: v * 1e-4 for k, v in unit.items()}, 1e-4) for i in range(2)]
    result = aggregate(GLOBAL, honest + tiny)
    assert result.clip_factors["h0"] == 1.0
    assert result.clip_factors["h1"] == pytest.approx(1 / 1.2)
    assert statistics.median(result.norms.values()) == pytest.approx((1e-4 + 1.0) / 2)


@pytest.mark.parametrize(
    "pairs,median",
    [
        ([(1.0, 1.0), (2.0, 1.0), (6.0, 1.0)], 2.0),
        ([(1.0, 1.0), (2.0, 1.0)], 1.5),  # an exact half: the mean of the two around it
        ([(1.0, 3.0), (2.0, 1.0), (6.0, 1.0)], 1.0),
        ([(1e-4, 1e-4), (1e-4, 1e-4), (1.0, 1.0), (1.2, 1.0)], 1.0),
        ([(5.0, 0.0), (3.0, 1.0)], 3.0),
    ],
)
def test_weighted_median(pairs, median):
    assert weighted_median(pairs) == pytest.approx(median)
    if len({w for _, w in pairs}) == 1:
        assert weighted_median(pairs) == pytest.approx(statistics.median(v for v, _ in pairs))
