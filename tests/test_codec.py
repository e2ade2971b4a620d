"""Codecs: round trips, error bounds, top-k selection, error feedback, byte accounting, determinism,
and one test per reason a decoder or encoder refuses."""

from __future__ import annotations

import math
import struct

import pytest
import safetensors.torch
import torch

from distrai.codec import (
    CodecError,
    get_codec,
    pack_bits,
    reduction_vs_ddp,
    ring_allreduce_bytes_per_param,
    unpack_bits,
    wire_bytes,
)

SHAPES = {"w": (3, 50), "b": (7,)}
SMALL = {"none": {}, "int8": {"chunk": 16}, "topk": {"chunk": 16, "k": 4}}


def random_delta(shapes, seed=0):
    generator = torch.Generator().manual_seed(seed)
    return {name: torch.randn(*shape, generator=generator) for name, shape in shapes.items()}


def encoded(name, shapes=SHAPES, seed=0, **options):
    codec = get_codec(name, **(options or SMALL[name]))
    return codec, codec.encode(random_delta(shapes, seed))


def refusal(codec, payload, metadata, shapes=SHAPES) -> CodecError:
    with pytest.raises(CodecError) as caught:
        codec.decode(payload, metadata, shapes)
    return caught.value


# --- none ---------------------------------------------------------------------------------------


def test_none_round_trips_bit_for_bit():
    delta = random_delta(SHAPES)
    delta["w"][0, 0] = -0.0
    delta["w"][0, 1] = torch.finfo(torch.float32).tiny / 4  # a subnormal
    codec = get_codec("none")
    payload, metadata, residual = codec.encode(delta)
    assert residual is None
    decoded = codec.decode(payload, metadata, SHAPES)
    for name in SHAPES:
        assert torch.equal(decoded[name].view(torch.int32), delta[name].view(torch.int32))


def test_none_refuses_a_residual():
    delta = random_delta(SHAPES)
    with pytest.raises(CodecError) as caught:
        get_codec("none").encode(delta, {name: torch.zeros_like(t) for name, t in delta.items()})
    assert caught.value.reason == "bad_option"


# --- int8 ---------------------------------------------------------------------------------------


def test_int8_error_is_at_most_half_a_scale_step():
    shapes = {"w": (37, 101)}  # 3737 elements: 233 full chunks of 16 and a tail of 9
    codec, (payload, metadata, _) = encoded("int8", shapes)
    x = random_delta(shapes)["w"].reshape(-1)
    decoded = codec.decode(payload, metadata, shapes)["w"].reshape(-1)
    padded = torch.cat([x, torch.zeros(-x.numel() % 16)]).reshape(-1, 16)
    scales = padded.abs().amax(dim=1) / 127
    assert torch.equal(payload["w:scales"], scales)
    per_element = scales.repeat_interleave(16)[: x.numel()]
    # The bound is scale/2; fp32 division and product add a few ulps of a value up to 127 scales.
    assert bool(((x - decoded).abs() <= per_element * (0.5 + 1e-4)).all())


def test_int8_rounds_half_to_even():
    codec = get_codec("int8", chunk=8)
    x = torch.tensor([127.0, 0.5, 1.5, 2.5, -0.5, -2.5, 3.5, -127.0])  # absmax 127: the scale is exactly 1
    payload, metadata, _ = codec.encode({"x": x})
    assert payload["x:values"].tolist() == [127, 0, 2, 2, 0, -2, 4, -127]
    assert codec.decode(payload, metadata, {"x": (8,)})["x"].tolist() == [127, 0, 2, 2, 0, -2, 4, -127]


def test_int8_zero_chunk_and_short_tail_get_their_own_scales():
    codec = get_codec("int8", chunk=4)
    x = torch.tensor([0.0, 0.0, 0.0, 0.0, 3.0, -1.0, 2.0, 0.5, 0.1, -0.2])
    payload, metadata, _ = codec.encode({"x": x})
    assert payload["x:scales"].tolist() == pytest.approx([0.0, 3.0 / 127, 0.2 / 127], rel=1e-6)
    decoded = codec.decode(payload, metadata, {"x": (10,)})["x"]
    assert decoded[:4].tolist() == [0.0] * 4
    assert decoded[8:].tolist() == pytest.approx([0.1, -0.2], abs=0.1 / 127)


# --- topk ---------------------------------------------------------------------------------------


def test_topk_keeps_exactly_the_k_largest_of_each_chunk():
    chunk, k, numel = 16, 3, 16 * 5 + 7
    generator = torch.Generator().manual_seed(3)
    magnitudes = torch.randperm(numel, generator=generator).float() + 1  # distinct, so the top k is unique
    signs = torch.where(torch.rand(numel, generator=generator) < 0.5, -1.0, 1.0)
    x = magnitudes * signs
    codec = get_codec("topk", chunk=chunk, k=k)
    payload, metadata, _ = codec.encode({"x": x})
    decoded = codec.decode(payload, metadata, {"x": (numel,)})["x"]
    for start in range(0, numel, chunk):
        part = x[start : start + chunk].tolist()
        keep = (
            k if len(part) == chunk else math.ceil(k * len(part) / chunk)
        )  # the tail keeps the same density
        largest = sorted(range(len(part)), key=lambda i: -abs(part[i]))[:keep]
        got = decoded[start : start + chunk]
        assert set(torch.nonzero(got).reshape(-1).tolist()) == set(largest)
        for i in largest:
            assert math.copysign(1, got[i].item()) == math.copysign(1, part[i])


def test_topk_breaks_ties_by_lower_index():
    x = torch.tensor([1.0, -1.0, 1.0, -1.0, 1.0, -1.0, 1.0, -1.0])
    codec = get_codec("topk", chunk=8, k=3)
    payload, metadata, _ = codec.encode({"x": x})
    decoded = codec.decode(payload, metadata, {"x": (8,)})["x"]
    assert decoded.tolist() == [1.0, -1.0, 1.0, 0.0, 0.0, 0.0, 0.0, 0.0]


def test_topk_values_take_the_documented_two_levels():
    # Kept magnitudes 1, 2, 3, 4: lo = m[4 // 4] = 2, hi = m[3·4 // 4] = 4; 3 is as near to 2 as to 4 and
    # goes to lo (hi is chosen only when strictly nearer).
    x = torch.tensor([0.1, -1.0, 2.0, 0.0, -3.0, 4.0, 0.2, 0.3])
    codec = get_codec("topk", chunk=8, k=4)
    payload, metadata, _ = codec.encode({"x": x})
    assert payload["x:levels"].tolist() == [2.0, 4.0]
    decoded = codec.decode(payload, metadata, {"x": (8,)})["x"]
    assert decoded.tolist() == [0.0, -2.0, 2.0, 0.0, -2.0, 4.0, 0.0, 0.0]


def test_topk_indices_are_packed_at_ceil_log2_chunk_bits():
    codec = get_codec("topk", chunk=1000, k=5)  # indices in [0, 1000) need 10 bits
    payload, _, _ = codec.encode({"x": random_delta({"x": (2000,)})["x"]})
    assert payload["x:indices"].numel() == math.ceil(10 * 10 / 8)
    assert payload["x:values"].numel() == math.ceil(10 * 2 / 8)
    assert payload["x:levels"].numel() == 4


# --- error feedback -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    "name, options", [("topk", {"chunk": 64, "k": 4, "decay": 1.0}), ("int8", {"chunk": 64})]
)
def test_error_feedback_delivers_the_sum_of_the_deltas(name, options):
    codec = get_codec(name, **options)
    shapes = {"w": (4, 64)}
    generator = torch.Generator().manual_seed(5)
    drift = torch.randn(*shapes["w"], generator=generator)
    total_delta = torch.zeros(shapes["w"])
    total_decoded = torch.zeros(shapes["w"])
    residual = None
    residual_norms = []
    for _ in range(200):
        delta = {"w": drift + torch.randn(*shapes["w"], generator=generator)}
        payload, metadata, residual = codec.encode(delta, residual)
        total_delta += delta["w"]
        total_decoded += codec.decode(payload, metadata, shapes)["w"]
        residual_norms.append(residual["w"].norm().item())
    # With decay 1 nothing is lost: what was sent plus what is still held is what was produced, up to the
    # rounding of 200 fp32 additions into sums of a few hundred.
    torch.testing.assert_close(total_decoded + residual["w"], total_delta, rtol=1e-5, atol=1e-3)
    # The residual stays bounded while the deltas keep adding up, so the sent sum converges to theirs.
    assert max(residual_norms[100:]) <= 2 * max(residual_norms[:100])
    assert (total_decoded - total_delta).norm() <= 0.1 * total_delta.norm()


def test_decayed_residual_follows_the_documented_rule():
    codec = get_codec("topk", chunk=16, k=2, decay=0.5)
    residual = random_delta(SHAPES, seed=1)
    delta = random_delta(SHAPES, seed=2)
    payload, metadata, new_residual = codec.encode(delta, residual)
    decoded = codec.decode(payload, metadata, SHAPES)
    for name in SHAPES:
        assert torch.equal(new_residual[name], (0.5 * residual[name] + delta[name]) - decoded[name])


# --- bytes on the wire --------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["none", "int8", "topk"])
def test_wire_bytes_are_the_tensor_data_of_the_safetensors_file(name):
    codec, (payload, metadata, _) = encoded(name)
    blob = safetensors.torch.save(payload, metadata=metadata)
    (header_length,) = struct.unpack("<Q", blob[:8])
    assert wire_bytes(payload) == len(blob) - 8 - header_length == codec.expected_wire_bytes(SHAPES)
    loaded = safetensors.torch.load(blob)
    direct = codec.decode(payload, metadata, SHAPES)
    for tensor_name, tensor in codec.decode(loaded, metadata, SHAPES).items():
        assert torch.equal(tensor, direct[tensor_name])


def test_bytes_per_parameter_at_default_options():
    shapes = {"w": (4096, 64), "v": (64, 4096)}  # whole chunks, so the per-chunk cost divides exactly
    none, int8, topk = (get_codec(name) for name in ("none", "int8", "topk"))
    assert none.expected_bytes_per_param(shapes) == 4.0
    assert (
        int8.expected_bytes_per_param(shapes) == 1 + 4 / 4096
    )  # one int8 per value, one fp32 scale per chunk
    # Per chunk: 64 indices of 12 bits, 64 values of 2 bits, two fp32 levels.
    assert topk.expected_bytes_per_param(shapes) == ((64 * 12 + 64 * 2) / 8 + 8) / 4096
    assert topk.expected_bytes_per_param(shapes) <= 0.03


def test_reduction_against_ring_allreduce_ddp():
    # A ring all-reduce sends 2·(N−1)/N of the fp32 gradient per worker per step.
    assert ring_allreduce_bytes_per_param(steps=1, workers=2) == 4.0
    assert ring_allreduce_bytes_per_param(steps=10, workers=4) == 60.0
    assert ring_allreduce_bytes_per_param(steps=1) == 8.0
    assert reduction_vs_ddp(1 + 4 / 4096, steps=128) >= 1000
    assert reduction_vs_ddp(120 / 4096, steps=20) >= 5000


# --- determinism --------------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["none", "int8", "topk"])
def test_encoding_is_deterministic_across_runs_and_thread_counts(name):
    codec = get_codec(name)
    shapes = {"w": (300, 100)}
    delta = random_delta(shapes, seed=7)
    residual = None if name == "none" else random_delta(shapes, seed=8)
    first = codec.encode(delta, residual)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        second = codec.encode(delta, residual)
    finally:
        torch.set_num_threads(threads)
    assert safetensors.torch.save(first.payload) == safetensors.torch.save(second.payload)
    assert first.metadata == second.metadata
    if residual is not None:
        assert all(torch.equal(first.residual[n], second.residual[n]) for n in shapes)


# --- decoder refusals ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    "name, key", [("none", "w:values"), ("int8", "w:values"), ("int8", "b:scales"), ("topk", "w:levels")]
)
def test_truncated_tensor_is_refused(name, key):
    codec, (payload, metadata, _) = encoded(name)
    payload[key] = payload[key][:-1]
    error = refusal(codec, payload, metadata)
    assert error.reason == "bad_size"
    assert key in str(error)


def test_tensor_of_wrong_rank_is_refused():
    codec, (payload, metadata, _) = encoded("int8")
    payload["w:values"] = payload["w:values"].reshape(3, 50)
    assert refusal(codec, payload, metadata).reason == "bad_size"


@pytest.mark.parametrize("key", ["w:indices", "w:values"])
def test_packed_stream_with_wrong_count_is_refused(key):
    codec, (payload, metadata, _) = encoded("topk")
    payload[key] = torch.cat([payload[key], torch.zeros(1, dtype=torch.uint8)])
    error = refusal(codec, payload, metadata)
    assert error.reason == "bad_count"
    assert key in str(error)


def test_index_outside_the_short_last_chunk_is_refused():
    codec, (payload, metadata, _) = encoded("topk")
    # "b" has 7 elements: one chunk of length 7 keeping ceil(4·7/16) = 2 entries.
    indices = unpack_bits(payload["b:indices"], 4, 2)
    indices[1] = 7  # fits in 4 bits and in a full chunk, but not in this one
    payload["b:indices"] = pack_bits(indices, 4)
    error = refusal(codec, payload, metadata)
    assert error.reason == "index_out_of_range"
    assert "b:indices" in str(error)


def test_repeated_or_unordered_indices_are_refused():
    codec, (payload, metadata, _) = encoded("topk")
    indices = unpack_bits(payload["w:indices"], 4, 38)  # 150 elements: 9 chunks keep 4, the tail of 6 keeps 2
    indices[1] = indices[0]
    payload["w:indices"] = pack_bits(indices, 4)
    assert refusal(codec, payload, metadata).reason == "bad_index_order"


def test_nonzero_padding_is_refused():
    codec, (payload, metadata, _) = encoded("topk")
    payload["w:values"][-1] |= 0b1000_0000  # 38 entries of 2 bits leave the top 4 bits of the last byte
    error = refusal(codec, payload, metadata)
    assert error.reason == "bad_padding"
    assert "w:values" in str(error)


@pytest.mark.parametrize(
    "name, key, dtype",
    [
        ("none", "w:values", torch.float16),
        ("int8", "w:values", torch.uint8),
        ("int8", "w:scales", torch.float64),
        ("topk", "w:indices", torch.int8),
        ("topk", "b:levels", torch.float16),
    ],
)
def test_wrong_dtype_is_refused(name, key, dtype):
    codec, (payload, metadata, _) = encoded(name)
    payload[key] = payload[key].to(dtype)
    error = refusal(codec, payload, metadata)
    assert error.reason == "bad_dtype"
    assert key in str(error)


def test_non_tensor_field_is_refused():
    codec, (payload, metadata, _) = encoded("none")
    payload["w:values"] = [0.0] * 150
    assert refusal(codec, payload, metadata).reason == "bad_dtype"


@pytest.mark.parametrize("name, key", [("none", "w:values"), ("int8", "w:scales"), ("topk", "b:levels")])
@pytest.mark.parametrize("bad", [float("nan"), float("inf")])
def test_non_finite_float_is_refused(name, key, bad):
    codec, (payload, metadata, _) = encoded(name)
    payload[key][0] = bad
    error = refusal(codec, payload, metadata)
    assert error.reason == "non_finite"
    assert key in str(error)


@pytest.mark.parametrize(
    "name, key, value", [("int8", "w:scales", -1.0), ("int8", "w:scales", 1e37), ("topk", "w:levels", -0.5)]
)
def test_scale_out_of_range_is_refused(name, key, value):
    codec, (payload, metadata, _) = encoded(name)
    payload[key][0] = value
    assert refusal(codec, payload, metadata).reason == "bad_scale"


def test_topk_levels_out_of_order_are_refused():
    codec, (payload, metadata, _) = encoded("topk")
    payload["w:levels"][0], payload["w:levels"][1] = 2.0, 1.0
    error = refusal(codec, payload, metadata)
    assert error.reason == "bad_scale"
    assert "w:levels" in str(error)


def test_int8_minus_128_is_refused():
    codec, (payload, metadata, _) = encoded("int8")
    payload["b:values"][3] = -128
    assert refusal(codec, payload, metadata).reason == "value_out_of_range"


@pytest.mark.parametrize("name", ["none", "int8", "topk"])
def test_unknown_and_missing_tensors_are_refused(name):
    codec, (payload, metadata, _) = encoded(name)
    extra = dict(payload, **{"w:extra": torch.zeros(1)})
    error = refusal(codec, extra, metadata)
    assert error.reason == "unknown_field"
    assert "w:extra" in str(error)
    dropped = next(iter(payload))
    fewer = {key: value for key, value in payload.items() if key != dropped}
    error = refusal(codec, fewer, metadata)
    assert error.reason == "missing_field"
    assert dropped in str(error)
    # A payload for another model (a parameter it does not have) is refused the same way.
    assert refusal(codec, payload, metadata, {**SHAPES, "c": (2,)}).reason == "missing_field"


@pytest.mark.parametrize("name", ["none", "int8", "topk"])
def test_unknown_and_missing_metadata_are_refused(name):
    codec, (payload, metadata, _) = encoded(name)
    assert refusal(codec, payload, {**metadata, "level": "9"}).reason == "unknown_field"
    for key in metadata:
        fewer = {k: v for k, v in metadata.items() if k != key}
        assert refusal(codec, payload, fewer).reason == "missing_field"


@pytest.mark.parametrize("key, value", [("k", "8"), ("chunk", "32"), ("decay", "0.5"), ("k", "4.0")])
def test_options_other_than_the_runs_are_refused(key, value):
    codec, (payload, metadata, _) = encoded("topk")
    error = refusal(codec, payload, {**metadata, key: value})
    assert error.reason == "bad_option"
    assert key in str(error)


def test_metadata_that_is_not_all_strings_is_refused():
    codec, (payload, metadata, _) = encoded("topk")
    assert refusal(codec, payload, {**metadata, "k": 4}).reason == "bad_option"
    assert refusal(codec, payload, {**metadata, "codec": torch.zeros(2)}).reason == "bad_option"


def test_payload_of_another_codec_or_version_is_refused():
    codec, (payload, metadata, _) = encoded("topk")
    assert refusal(get_codec("int8", chunk=16), payload, metadata).reason == "wrong_codec"
    assert refusal(codec, payload, {**metadata, "codec_version": "2"}).reason == "bad_version"


def test_payload_with_same_options_other_chunking_is_refused():
    # A payload made with k=2 whose metadata claims the run's k=4 fails on sizes, not silently.
    _, (payload, metadata, _) = encoded("topk", chunk=16, k=2)
    codec = get_codec("topk", chunk=16, k=4)
    assert refusal(codec, payload, {**metadata, "k": "4"}).reason == "bad_count"


# --- encoder and option refusals ----------------------------------------------------------------


@pytest.mark.parametrize("name", ["none", "int8", "topk"])
def test_encoder_refuses_bad_deltas(name):
    codec = get_codec(name, **SMALL[name])
    delta = random_delta(SHAPES)
    delta["b"][2] = float("nan")
    with pytest.raises(CodecError) as caught:
        codec.encode(delta)
    assert caught.value.reason == "non_finite"
    assert "delta[b]" in str(caught.value)
    with pytest.raises(CodecError) as caught:
        codec.encode({"w": torch.zeros(3, dtype=torch.float64)})
    assert caught.value.reason == "bad_dtype"


def test_encoder_refuses_a_residual_that_does_not_match():
    codec = get_codec("topk", **SMALL["topk"])
    delta = random_delta(SHAPES)
    with pytest.raises(CodecError) as caught:
        codec.encode(delta, {"w": torch.zeros(3, 50)})
    assert caught.value.reason == "missing_field"
    with pytest.raises(CodecError) as caught:
        codec.encode(delta, {"w": torch.zeros(3, 50), "b": torch.zeros(7), "c": torch.zeros(1)})
    assert caught.value.reason == "unknown_field"
    with pytest.raises(CodecError) as caught:
        codec.encode(delta, {"w": torch.zeros(50, 3), "b": torch.zeros(7)})
    assert caught.value.reason == "bad_size"


def test_int8_refuses_values_too_large_for_its_scales():
    with pytest.raises(CodecError) as caught:
        get_codec("int8").encode({"x": torch.tensor([3.39e38, 1.0])})
    assert caught.value.reason == "bad_scale"


@pytest.mark.parametrize(
    "name, options",
    [
        ("zip", {}),
        ("none", {"chunk": 16}),
        ("int8", {"chunk": 0}),
        ("int8", {"decay": 1.5}),
        ("topk", {"k": 0}),
        ("topk", {"chunk": 16, "k": 17}),
        ("topk", {"chunk": 1}),
        ("topk", {"chunk": 1 << 17}),
        ("topk", {"k": 2.0}),
        ("topk", {"decay": True}),
        ("topk", {"bits": 3}),
    ],
)
def test_bad_codec_names_and_options_are_refused(name, options):
    with pytest.raises(CodecError) as caught:
        get_codec(name, **options)
    assert caught.value.reason == "bad_option"
    assert isinstance(caught.value, ValueError)
