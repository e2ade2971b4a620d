"""The count sketch of an update taken from its payload (`Codec.entries`, `sketch_entries`) is the
sketch of the decoded update, bit for bit, for every codec: dense and sparse updates, tensors of no
elements, codec chunks that straddle the sketch's CHUNK ranges, and a parameter longer than CHUNK."""

from __future__ import annotations

import pytest
import torch

from distrai.codec import get_codec, pack_bits, unpack_bits
from distrai.protocol.update import check_update, encode_update
from distrai.train.sketch import CHUNK, sketch, sketch_entries

SEED, SIZE = "run/duplicates", 8192
SHAPES = {"w": (5, 13), "b": (9,), "e": (0,), "m": (64, 48)}
CODECS = {
    "none": {},
    "int8": {"chunk": 16},
    "topk": {"chunk": 16, "k": 4},
    "topk, everything kept": {"chunk": 16, "k": 16},
    "topk, default options": {"chunk": 4096, "k": 64},
}


def codec_of(label: str):
    return get_codec(label.split(",")[0], **CODECS[label])


def delta(shapes, seed: int, zeros: float) -> dict[str, torch.Tensor]:
    """Random values with a share `zeros` of them exactly zero."""
    generator = torch.Generator().manual_seed(seed)
    out = {}
    for name, shape in shapes.items():
        values = torch.randn(shape, generator=generator)
        out[name] = torch.where(torch.rand(shape, generator=generator) < zeros, 0.0, values)
    return out


def both_sketches(codec, payload, metadata, shapes):
    from_payload = sketch_entries(codec.entries(payload, metadata, shapes), SEED, SIZE)
    return from_payload, sketch(codec.decode(payload, metadata, shapes), SEED, SIZE)


@pytest.mark.parametrize("label", sorted(CODECS))
@pytest.mark.parametrize("zeros", [0.0, 0.9, 1.0])
@pytest.mark.parametrize("seed", [0, 1])
def test_the_payload_sketch_is_the_decoded_update_s_to_the_bit(label, zeros, seed):
    codec = codec_of(label)
    payload, metadata, _ = codec.encode(delta(SHAPES, seed, zeros))
    from_payload, from_decoded = both_sketches(codec, payload, metadata, SHAPES)
    assert from_payload.dtype == torch.float64 and from_payload.shape == (SIZE,)
    assert torch.equal(from_payload, from_decoded)
    assert bool(from_payload.any()) == (zeros < 1.0)


def test_kept_zeros_and_negative_zeros_add_nothing():
    """A top-k chunk whose kept magnitudes are all zero decodes to zeros, some of them −0.0 when the
    sign bit is set: the dense sketch skips them, the payload's entries add them."""
    codec = get_codec("topk", chunk=16, k=8)
    shapes = {"w": (48,)}
    values = delta(shapes, 0, 0.0)
    values["w"][16:32] = 0.0
    payload, metadata, _ = codec.encode(values)
    codes = unpack_bits(payload["w:values"], 2, 24)
    codes[8:16] |= 2  # the second chunk's kept entries all negative: −0.0
    payload["w:values"] = pack_bits(codes, 2)
    decoded = codec.decode(payload, metadata, shapes)["w"]
    assert bool(torch.signbit(decoded[16:32]).any()) and not bool(decoded[16:32].any())
    from_payload, from_decoded = both_sketches(codec, payload, metadata, shapes)
    assert torch.equal(from_payload, from_decoded)


@pytest.mark.parametrize(
    "name, options",
    [
        ("none", {}),
        ("int8", {"chunk": 4096}),
        ("topk", {"chunk": 4096, "k": 64}),
        ("topk", {"chunk": 1000, "k": 7}),
    ],
)
def test_a_parameter_longer_than_the_sketch_s_chunk(name, options):
    """A CHUNK range and a part of a second; a top-k chunk of 1,000 straddles their boundary."""
    codec = get_codec(name, **options)
    shapes = {"big": (CHUNK + 12_345,), "small": (100,)}
    payload, metadata, _ = codec.encode(delta(shapes, 2, 0.0))
    from_payload, from_decoded = both_sketches(codec, payload, metadata, shapes)
    assert torch.equal(from_payload, from_decoded)


def test_a_checked_blob_sketches_as_its_decoded_update():
    codec = codec_of("topk")
    payload, metadata, _ = codec.encode(delta(SHAPES, 3, 0.0))
    blob = encode_update(payload, metadata, "5Miner", 7)
    checked = check_update(blob, codec, SHAPES, len(blob), "5Miner", 7)
    assert torch.equal(checked.sketch(SEED, SIZE), sketch(checked.decode(), SEED, SIZE))
