"""Property tests: random and mutated bytes never crash the decoders and never pass as something else."""

from __future__ import annotations

import json
import struct

import pytest
import torch
from bittensor.keyfiles import Keypair
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from distrai.wire import (
    DTYPES,
    WireError,
    canonical_json,
    decode_tensors,
    encode_tensors,
    open_document,
    parse_json,
    sign_document,
)
from distrai.wire.canonical import INT_MAX, INT_MIN

LIMIT = 1 << 20
FUZZ = settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
ALICE = Keypair.create_from_uri("//Alice")

scalars = (
    st.none()
    | st.booleans()
    | st.integers(INT_MIN, INT_MAX)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=12)
)
json_values = st.recursive(
    scalars,
    lambda children: (
        st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=6), children, max_size=4)
    ),
    max_leaves=16,
)
bodies = st.dictionaries(st.text(max_size=8), json_values, max_size=5)
json_alphabet = st.sampled_from(list('{}[]":, 0123456789.eE+-truefalsnNIinfy\\uabcd') + ["\ud800", "é"])


@st.composite
def mutations(draw, data: bytes) -> bytes:
    """One edit of `data`: flip a byte, overwrite it, insert bytes, delete a slice or truncate."""
    position = draw(st.integers(0, max(len(data) - 1, 0)))
    kind = draw(st.sampled_from(["flip", "overwrite", "insert", "delete", "truncate"]))
    if kind == "flip":
        bit = 1 << draw(st.integers(0, 7))
        return data[:position] + bytes([data[position] ^ bit]) + data[position + 1 :]
    if kind == "overwrite":
        return data[:position] + bytes([draw(st.integers(0, 255))]) + data[position + 1 :]
    if kind == "insert":
        return data[:position] + draw(st.binary(min_size=1, max_size=8)) + data[position:]
    if kind == "delete":
        return data[:position] + data[position + draw(st.integers(1, 8)) :]
    return data[:position]


# canonical JSON


@FUZZ
@given(bodies)
def test_canonical_json_round_trips_through_parse_json(body):
    data = canonical_json(body)
    parsed = parse_json(data, LIMIT)
    assert parsed == body
    assert canonical_json(parsed) == data


@FUZZ
@given(
    st.one_of(
        st.binary(max_size=200),
        st.text(json_alphabet, max_size=60).map(lambda t: t.encode("utf-8", "surrogatepass")),
    )
)
def test_parse_json_accepts_only_what_canonical_json_can_write(data):
    try:
        parsed = parse_json(data, LIMIT)
    except WireError:
        return
    assert parse_json(canonical_json(parsed), LIMIT) == parsed


# signed documents


def registered(hotkey: str) -> bool:
    return hotkey == ALICE.ss58_address


@FUZZ
@given(bodies)
def test_any_body_signs_and_opens(body):
    document = open_document(sign_document(ALICE, body), max_bytes=LIMIT, is_registered=registered)
    assert canonical_json(document.body) == canonical_json(body)
    assert document.signer == ALICE.ss58_address


@FUZZ
@given(st.binary(max_size=400))
def test_random_bytes_never_open_as_a_document(data):
    with pytest.raises(WireError):
        open_document(data, max_bytes=LIMIT, is_registered=lambda _: True)


@FUZZ
@given(st.data(), bodies)
def test_a_mutated_envelope_opens_only_if_the_mutation_changes_nothing(data, body):
    signed = sign_document(ALICE, body)
    original = open_document(signed, max_bytes=LIMIT, is_registered=registered)
    mutated = data.draw(mutations(signed))
    try:
        document = open_document(mutated, max_bytes=LIMIT, is_registered=registered)
    except WireError:
        return
    assert canonical_json(document.body) == canonical_json(original.body)
    assert (document.signer, document.signature) == (original.signer, original.signature)


# tensors

TENSOR_DTYPES = [
    torch.float32,
    torch.float16,
    torch.bfloat16,
    torch.float64,
    torch.int8,
    torch.int64,
    torch.uint8,
    torch.bool,
]
EXPECTED_W = {"w": (torch.float32, (2, 2))}


@st.composite
def tensor_dicts(draw) -> dict[str, torch.Tensor]:
    names = draw(
        st.lists(st.sampled_from(["w", "b", "layers.0.w", "é", "scale"]), min_size=1, max_size=4, unique=True)
    )
    generator = torch.Generator().manual_seed(draw(st.integers(0, 2**31)))
    tensors = {}
    for name in names:
        shape = tuple(draw(st.lists(st.integers(0, 3), max_size=3)))
        dtype = draw(st.sampled_from(TENSOR_DTYPES))
        tensors[name] = (torch.randn(shape, generator=generator) * 100).to(dtype)
    return tensors


def specs(tensors: dict[str, torch.Tensor]) -> dict:
    return {name: (tensor.dtype, tuple(tensor.shape)) for name, tensor in tensors.items()}


def raw_bytes(tensor: torch.Tensor) -> bytes:
    return tensor.contiguous().reshape(-1).view(torch.uint8).numpy().tobytes()


@FUZZ
@given(tensor_dicts())
def test_any_tensors_round_trip(tensors):
    decoded, _ = decode_tensors(encode_tensors(tensors), max_bytes=LIMIT, expected=specs(tensors))
    assert {name: raw_bytes(t) for name, t in decoded.items()} == {
        name: raw_bytes(t) for name, t in tensors.items()
    }


@FUZZ
@given(st.binary(max_size=600))
def test_random_bytes_never_decode_as_tensors(data):
    with pytest.raises(WireError):
        decode_tensors(data, max_bytes=LIMIT, expected=EXPECTED_W)


@FUZZ
@given(st.binary(max_size=200), st.binary(max_size=64), st.integers(-8, 8))
def test_random_headers_never_decode_as_tensors(header, body, length_error):
    length = max(len(header) + length_error, 0)
    with pytest.raises(WireError):
        decode_tensors(struct.pack("<Q", length) + header + body, max_bytes=LIMIT, expected=EXPECTED_W)


@st.composite
def header_files(draw) -> tuple[bytes, bool]:
    """A hand-built safetensors file with a valid layout, then perhaps one field spoiled; says if spoiled."""
    names = draw(st.lists(st.sampled_from(["a", "b", "c", "d"]), min_size=1, max_size=4, unique=True))
    header, offset = {}, 0
    for name in names:
        dtype_name = draw(st.sampled_from(sorted(DTYPES)))
        shape = draw(st.lists(st.integers(0, 3), max_size=3))
        size = DTYPES[dtype_name].itemsize
        for dim in shape:
            size *= dim
        header[name] = {"dtype": dtype_name, "shape": shape, "data_offsets": [offset, offset + size]}
        offset += size
    data = bytes(draw(st.lists(st.sampled_from([0, 1]), min_size=offset, max_size=offset)))
    spoil = draw(st.sampled_from(["none", "dtype", "shape", "begin", "end", "data", "metadata"]))
    target = header[draw(st.sampled_from(names))]
    if spoil == "dtype":
        target["dtype"] = draw(st.sampled_from([*DTYPES, "F8_E4M3", "C64", "f32", 4, None]))
    elif spoil == "shape":
        target["shape"] = draw(st.lists(st.integers(-2, 4), max_size=4) | st.just("2"))
    elif spoil in ("begin", "end"):
        index = 0 if spoil == "begin" else 1
        target["data_offsets"][index] = draw(st.integers(-2, offset + 4))
    elif spoil == "data":
        data = data[:-1] if data and draw(st.booleans()) else data + draw(st.binary(min_size=1, max_size=4))
    elif spoil == "metadata":
        header["__metadata__"] = draw(
            st.dictionaries(st.text(max_size=3), st.text(max_size=3) | st.integers())
        )
    text = json.dumps(header).encode()
    return struct.pack("<Q", len(text)) + text + data, spoil == "none"


def tiles_exactly(header: dict, data_length: int) -> bool:
    spans = sorted(tuple(entry["data_offsets"]) for name, entry in header.items() if name != "__metadata__")
    position = 0
    for begin, end in spans:
        if begin != position:
            return False
        position = end
    return position == data_length


@FUZZ
@given(header_files())
def test_decoded_files_always_satisfy_the_format(built):
    file, unspoiled = built
    header_length = struct.unpack("<Q", file[:8])[0]
    header = json.loads(file[8 : 8 + header_length])
    try:
        tensors, _ = decode_tensors(file, max_bytes=LIMIT, require_finite=False)
    except WireError as error:
        assert not unspoiled, str(error)
        return
    assert tiles_exactly(header, len(file) - 8 - header_length)
    assert tensors.keys() == {name for name in header if name != "__metadata__"}
    for name, tensor in tensors.items():
        entry = header[name]
        assert tensor.dtype == DTYPES[entry["dtype"]]
        assert list(tensor.shape) == entry["shape"]
        begin, end = entry["data_offsets"]
        assert raw_bytes(tensor) == file[8 + header_length + begin : 8 + header_length + end]


@FUZZ
@given(st.data(), tensor_dicts())
def test_a_mutated_tensor_file_is_refused_or_still_meets_expectations(data, tensors):
    mutated = data.draw(mutations(encode_tensors(tensors)))
    try:
        decoded, _ = decode_tensors(mutated, max_bytes=LIMIT, expected=specs(tensors))
    except WireError:
        return
    assert specs(decoded) == specs(tensors)
    for tensor in decoded.values():
        assert not tensor.is_floating_point() or bool(torch.isfinite(tensor).all())
