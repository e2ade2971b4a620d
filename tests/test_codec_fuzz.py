"""Fuzzing the decoders: random and mutated payloads either decode to finite fp32 tensors of the
expected shapes or are refused with a CodecError, never anything else."""

from __future__ import annotations

import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from distrai.codec import CodecError, get_codec

SHAPES = {"w": (5, 13), "b": (9,), "e": (0,)}
CODECS = {
    "none": get_codec("none"),
    "int8": get_codec("int8", chunk=16),
    "topk": get_codec("topk", chunk=16, k=4),
}
DTYPES = [torch.uint8, torch.int8, torch.int32, torch.float16, torch.float32, torch.float64]


def decodes_cleanly_or_refuses(codec, payload, metadata) -> None:
    try:
        decoded = codec.decode(payload, metadata, SHAPES)
    except CodecError as error:
        assert error.reason
        return
    assert set(decoded) == set(SHAPES)
    for name, tensor in decoded.items():
        assert tensor.dtype == torch.float32
        assert tuple(tensor.shape) == SHAPES[name]
        assert bool(torch.isfinite(tensor).all())


def tensor_from_bytes(data: bytes, dtype: torch.dtype) -> torch.Tensor:
    size = torch.empty((), dtype=dtype).element_size()
    usable = data[: len(data) // size * size]
    if not usable:
        return torch.zeros(0, dtype=dtype)
    return torch.frombuffer(bytearray(usable), dtype=torch.uint8).view(dtype).clone()


@st.composite
def random_payloads(draw):
    name = draw(st.sampled_from(sorted(CODECS)))
    codec = CODECS[name]
    payload = {}
    for parameter, shape in SHAPES.items():
        numel = 1
        for size in shape:
            numel *= size
        for field, spec in codec.layout(numel).items():
            if draw(st.integers(0, 39)) == 0:
                continue
            dtype = draw(st.sampled_from(DTYPES)) if draw(st.integers(0, 9)) == 0 else spec.dtype
            size = torch.empty((), dtype=dtype).element_size()
            length = max(
                0,
                spec.length + (draw(st.sampled_from([-1, 1, -5, 7])) if draw(st.integers(0, 9)) == 0 else 0),
            )
            payload[f"{parameter}:{field}"] = tensor_from_bytes(
                draw(st.binary(min_size=length * size, max_size=length * size)), dtype
            )
    if draw(st.integers(0, 19)) == 0:
        payload[draw(st.text(max_size=12))] = torch.zeros(draw(st.integers(0, 4)))
    metadata = codec.metadata()
    if draw(st.integers(0, 9)) == 0:
        metadata[draw(st.sampled_from([*metadata, "extra"]))] = draw(st.text(max_size=6))
    return codec, payload, metadata


@settings(max_examples=300, deadline=None)
@given(random_payloads())
def test_random_payloads_never_crash_the_decoder(case):
    decodes_cleanly_or_refuses(*case)


def valid_encoding(name: str, seed: int):
    generator = torch.Generator().manual_seed(seed)
    delta = {parameter: torch.randn(*shape, generator=generator) for parameter, shape in SHAPES.items()}
    return CODECS[name].encode(delta)


@st.composite
def mutated_payloads(draw):
    name = draw(st.sampled_from(sorted(CODECS)))
    payload, metadata, _ = valid_encoding(name, draw(st.integers(0, 3)))
    payload = {key: value.clone() for key, value in payload.items()}
    for _ in range(draw(st.integers(1, 3))):
        key = draw(st.sampled_from(sorted(payload)))
        raw = payload[key].view(torch.uint8) if payload[key].numel() else payload[key]
        mutation = draw(
            st.sampled_from(["flip"] * 4 + ["set"] * 2 + ["truncate", "extend", "retype", "drop"])
        )
        if mutation in ("flip", "set") and raw.numel():
            position = draw(st.integers(0, raw.numel() - 1))
            byte = draw(st.integers(0, 255))
            raw[position] = raw[position] ^ byte if mutation == "flip" else byte
        elif mutation == "truncate":
            payload[key] = payload[key][: draw(st.integers(0, max(0, payload[key].numel() - 1)))]
        elif mutation == "extend":
            payload[key] = torch.cat([payload[key], payload[key][: draw(st.integers(1, 3))]])
        elif mutation == "retype":
            payload[key] = payload[key].to(draw(st.sampled_from(DTYPES)))
        elif mutation == "drop":
            del payload[key]
            if not payload:
                break
    return CODECS[name], payload, metadata


@settings(max_examples=300, deadline=None)
@given(mutated_payloads())
def test_mutated_payloads_never_crash_the_decoder(case):
    decodes_cleanly_or_refuses(*case)


@settings(max_examples=100, deadline=None)
@given(st.sampled_from(sorted(CODECS)), st.integers(0, 3), st.integers(0, 200), st.integers(1, 255))
def test_a_flipped_byte_decodes_to_finite_values_or_is_refused(name, seed, position, mask):
    payload, metadata, _ = valid_encoding(name, seed)
    stream = torch.cat([payload[key].view(torch.uint8) for key in payload])
    stream[position % stream.numel()] ^= mask
    offset = 0
    for key, tensor in payload.items():
        size = tensor.numel() * tensor.element_size()
        payload[key] = stream[offset : offset + size].clone().view(tensor.dtype)
        offset += size
    decodes_cleanly_or_refuses(CODECS[name], payload, metadata)
