"""The wire format: canonical JSON, signed documents, safetensors; one test per way bytes are refused."""

from __future__ import annotations

import hashlib
import io
import json
import pickle
import struct

import bittensor
import pytest
import torch
from bittensor.keyfiles import Keypair

from distrai.wire import (
    DOMAIN,
    MAX_DEPTH,
    MAX_HEADER_BYTES,
    Reason,
    SignedDocument,
    WireError,
    canonical_json,
    check_hash,
    decode_tensors,
    encode_tensors,
    looks_like_pickle,
    open_document,
    parse_json,
    sha256_hex,
    sign_document,
)

RUN_ID = "run-7f3a"
BODY = {"run_id": RUN_ID, "window": 12, "hotkey_losses": [2.5, 2.25], "codec": "int8", "note": "ünïcode"}
LIMIT = 1 << 20


@pytest.fixture(scope="module")
def alice() -> Keypair:
    return Keypair.create_from_uri("//Alice")


@pytest.fixture(scope="module")
def bob() -> Keypair:
    return Keypair.create_from_uri("//Bob")


def refused(reason: Reason, call, *args, **kwargs) -> WireError:
    with pytest.raises(WireError) as info:
        call(*args, **kwargs)
    assert info.value.reason is reason, str(info.value)
    return info.value


def envelope_bytes(body, signer: str, signature: str | None) -> bytes:
    envelope = {"body": body, "signer": signer}
    if signature is not None:
        envelope["signature"] = signature
    return json.dumps(envelope).encode()


def safetensors_file(header: dict, data: bytes, header_length: int | None = None) -> bytes:
    """A safetensors file built by hand from the format's definition, not by the code under test."""
    text = json.dumps(header).encode()
    length = len(text) if header_length is None else header_length
    return struct.pack("<Q", length) + text + data


def f32_entry(shape: list[int], begin: int) -> dict:
    return {"dtype": "F32", "shape": shape, "data_offsets": [begin, begin + 4 * _numel(shape)]}


def _numel(shape: list[int]) -> int:
    count = 1
    for size in shape:
        count *= size
    return count


# errors


def test_wire_error_is_a_value_error_carrying_its_reason():
    error = WireError(Reason.WRONG_SHAPE, "tensor 'w' has shape (3,), expected (4,)")
    assert isinstance(error, ValueError)
    assert error.reason is Reason.WRONG_SHAPE
    assert str(error) == "wrong_shape: tensor 'w' has shape (3,), expected (4,)"


# canonical JSON


def test_canonical_json_sorts_keys_writes_no_whitespace_and_utf8():
    value = {"b": 1, "a": [1, 2.5, None, True, False, "é"], "A": {}}
    assert canonical_json(value) == '{"A":{},"a":[1,2.5,null,true,false,"é"],"b":1}'.encode()


def test_canonical_json_does_not_depend_on_insertion_order():
    first = {"x": 1, "y": {"p": [1], "q": "z"}}
    second = {"y": {"q": "z", "p": [1]}, "x": 1}
    assert canonical_json(first) == canonical_json(second)


@pytest.mark.parametrize(
    ("number", "text"),
    [(0.1, b"0.1"), (1.0, b"1.0"), (1e16, b"1e+16"), (-0.0, b"-0.0"), (2.5e-8, b"2.5e-08"), (7, b"7")],
)
def test_canonical_json_writes_floats_as_shortest_round_trip_repr(number, text):
    assert canonical_json({"x": number}) == b'{"x":' + text + b"}"


@pytest.mark.parametrize("number", [float("nan"), float("inf"), float("-inf")])
def test_canonical_json_refuses_non_finite_numbers_naming_the_path(number):
    error = refused(Reason.NON_FINITE, canonical_json, {"losses": [1.0, number]})
    assert "$.losses[1]" in error.message


@pytest.mark.parametrize(
    "value",
    [{"x": b"bytes"}, {"x": {1, 2}}, {1: "int key"}, {"x": 2**63}, {"x": -(2**63) - 1}, {"x": "\ud800"}],
)
def test_canonical_json_refuses_values_without_a_canonical_form(value):
    refused(Reason.MALFORMED_JSON, canonical_json, value)


def test_canonical_json_limits_nesting():
    deep = {"x": 1}
    for _ in range(MAX_DEPTH - 1):
        deep = {"x": deep}
    assert parse_json(canonical_json(deep), LIMIT) == deep
    refused(Reason.MALFORMED_JSON, canonical_json, {"x": deep})


def test_parse_json_reads_any_spelling_of_a_document_to_the_canonical_value():
    value = {"window": 3, "scores": [0.5, -1e-3], "ok": True, "none": None, "name": "ü"}
    spaced = json.dumps(value, indent=2, ensure_ascii=True).encode()
    assert parse_json(spaced, LIMIT) == value
    assert canonical_json(parse_json(spaced, LIMIT)) == canonical_json(value)


@pytest.mark.parametrize(
    ("data", "reason", "words"),
    [
        (b'{"a": "\xff"}', Reason.MALFORMED_JSON, "UTF-8"),
        (b'{"a": 1, "a": 2}', Reason.MALFORMED_JSON, "duplicate key 'a'"),
        (b'{"a": {"b": 1, "b": 1}}', Reason.MALFORMED_JSON, "duplicate key 'b'"),
        (b'{"a": NaN}', Reason.NON_FINITE, "NaN"),
        (b'{"a": Infinity}', Reason.NON_FINITE, "Infinity"),
        (b'{"a": -Infinity}', Reason.NON_FINITE, "Infinity"),
        (b'{"a": 1e999}', Reason.NON_FINITE, "1e999"),
        (b"[1, 2]", Reason.MALFORMED_JSON, "array"),
        (b'"text"', Reason.MALFORMED_JSON, "string"),
        (b"7", Reason.MALFORMED_JSON, "number"),
        (b"null", Reason.MALFORMED_JSON, "null"),
        (b'{"a": 1} trailing', Reason.MALFORMED_JSON, "Extra data"),
        (b'{"a": 1', Reason.MALFORMED_JSON, "invalid JSON"),
        (b"", Reason.MALFORMED_JSON, "invalid JSON"),
        (b'{"a": 9223372036854775808}', Reason.MALFORMED_JSON, "64-bit"),
        (b'{"a": ' + b"9" * 5000 + b"}", Reason.MALFORMED_JSON, "64-bit"),
        (b'{"a": "\\udc00"}', Reason.MALFORMED_JSON, "surrogate"),
        (b'{"a": ' + b"[" * 100_000 + b"]" * 100_000 + b"}", Reason.MALFORMED_JSON, "deeper"),
        (pickle.dumps({"body": {}}), Reason.PICKLE, "pickle"),
        (b"\x80\x05garbage", Reason.PICKLE, "pickle"),
    ],
)
def test_parse_json_refuses(data, reason, words):
    error = refused(reason, parse_json, data, 10**6)
    assert words in error.message


def test_parse_json_refuses_oversize_documents():
    data = canonical_json({"pad": "x" * 100})
    assert parse_json(data, len(data))["pad"] == "x" * 100
    error = refused(Reason.TOO_LARGE, parse_json, data, len(data) - 1)
    assert str(len(data)) in error.message


# signed documents


def test_signed_document_round_trip(alice):
    data = sign_document(alice, BODY)
    document = open_document(data, max_bytes=LIMIT, is_registered={alice.ss58_address}.__contains__)
    assert document == SignedDocument(body=BODY, signer=alice.ss58_address, signature=document.signature)
    assert len(document.signature) == 64


def test_signature_covers_domain_prefix_and_canonical_body(alice):
    envelope = json.loads(sign_document(alice, BODY))
    payload = DOMAIN + canonical_json(BODY)
    verifier = Keypair(ss58_address=alice.ss58_address)
    assert verifier.verify(payload, bytes.fromhex(envelope["signature"]))
    assert not verifier.verify(canonical_json(BODY), bytes.fromhex(envelope["signature"]))


def test_envelope_is_itself_canonical(alice):
    data = sign_document(alice, BODY)
    assert canonical_json(parse_json(data, LIMIT)) == data


def test_documents_open_with_checks_on_run_window_and_signer(alice):
    data = sign_document(alice, BODY)
    document = open_document(
        data,
        max_bytes=LIMIT,
        is_registered=lambda hotkey: hotkey == alice.ss58_address,
        run_id=RUN_ID,
        window=12,
        signer=alice.ss58_address,
    )
    assert document.body["window"] == 12


def test_a_respelled_envelope_still_verifies(alice):
    envelope = json.loads(sign_document(alice, BODY))
    respelled = json.dumps(
        {"signature": envelope["signature"], **envelope}, indent=4, ensure_ascii=True
    ).encode()
    document = open_document(respelled, max_bytes=LIMIT, is_registered=lambda _: True)
    assert document.body == BODY


def test_a_wallet_hotkey_signs_documents(tmp_path):
    wallet = bittensor.Wallet(name="miner", hotkey="h0", path=str(tmp_path))
    wallet.create_new_hotkey(use_password=False, suppress=True)
    data = sign_document(wallet.hotkey, BODY)
    document = open_document(data, max_bytes=LIMIT, is_registered={wallet.hotkey.ss58_address}.__contains__)
    assert document.signer == wallet.hotkey.ss58_address


def open_as_registered(data: bytes, **checks) -> SignedDocument:
    return open_document(data, max_bytes=LIMIT, is_registered=lambda _: True, **checks)


def test_refuses_a_pickled_document_before_anything_else(alice):
    envelope = json.loads(sign_document(alice, BODY))
    data = pickle.dumps(envelope)
    refused(Reason.PICKLE, open_document, data, max_bytes=1, is_registered=lambda _: True)


def test_refuses_an_oversize_document(alice):
    data = sign_document(alice, BODY)
    error = refused(
        Reason.TOO_LARGE, open_document, data, max_bytes=len(data) - 1, is_registered=lambda _: True
    )
    assert f"limit is {len(data) - 1}" in error.message


def test_refuses_a_document_that_is_not_json():
    refused(Reason.MALFORMED_JSON, open_as_registered, b"\x00\x01 not json")


def test_refuses_an_envelope_with_two_bodies(alice):
    honest = json.loads(sign_document(alice, BODY))
    forged_body = json.dumps({**BODY, "codec": "none"})
    text = json.dumps(honest).replace('"body": ', f'"body": {forged_body}, "body": ', 1)
    error = refused(Reason.MALFORMED_JSON, open_as_registered, text.encode())
    assert "duplicate key 'body'" in error.message


@pytest.mark.parametrize("missing", ["body", "signer"])
def test_refuses_an_envelope_missing_a_field(alice, missing):
    envelope = json.loads(sign_document(alice, BODY))
    del envelope[missing]
    error = refused(Reason.MISSING_FIELD, open_as_registered, json.dumps(envelope).encode())
    assert missing in error.message


@pytest.mark.parametrize(
    ("change", "words"),
    [
        ({"extra": 1}, "unexpected fields ['extra']"),
        ({"body": [1]}, "'body' is not an object"),
        ({"signer": 42}, "'signer' is not a string"),
        ({"signer": "5notAnAddress"}, "not an SS58 address"),
        ({"signer": "15oF4uVJwmo4TdGW7VfQxNLavjCXviqxT9S1MgbjMNHr6Sp5"}, "SS58 format"),
    ],
)
def test_refuses_an_envelope_with_a_bad_field(alice, change, words):
    envelope = {**json.loads(sign_document(alice, BODY)), **change}
    error = refused(Reason.BAD_FIELD, open_as_registered, json.dumps(envelope).encode())
    assert words in error.message


@pytest.mark.parametrize("signature", [None, "", "null"])
def test_refuses_a_document_without_a_signature(alice, signature):
    if signature == "null":
        data = json.dumps({"body": BODY, "signer": alice.ss58_address, "signature": None}).encode()
    else:
        data = envelope_bytes(BODY, alice.ss58_address, signature)
    refused(Reason.MISSING_SIGNATURE, open_as_registered, data)


def test_refuses_a_signature_by_another_key(alice, bob):
    signature = bob.sign(DOMAIN + canonical_json(BODY)).hex()
    error = refused(
        Reason.BAD_SIGNATURE, open_as_registered, envelope_bytes(BODY, alice.ss58_address, signature)
    )
    assert alice.ss58_address in error.message


def test_refuses_a_tampered_body(alice):
    envelope = json.loads(sign_document(alice, BODY))
    envelope["body"]["hotkey_losses"][1] = 0.01
    refused(Reason.BAD_SIGNATURE, open_as_registered, json.dumps(envelope).encode())


def test_refuses_a_signature_made_without_the_domain_prefix(alice):
    signature = alice.sign(canonical_json(BODY)).hex()
    refused(Reason.BAD_SIGNATURE, open_as_registered, envelope_bytes(BODY, alice.ss58_address, signature))


@pytest.mark.parametrize(
    "spoil", [str.upper, lambda hex_text: hex_text[:-2], lambda hex_text: "0x" + hex_text]
)
def test_refuses_a_signature_not_written_as_128_lowercase_hex(alice, spoil):
    envelope = json.loads(sign_document(alice, BODY))
    envelope["signature"] = spoil(envelope["signature"])
    refused(Reason.BAD_SIGNATURE, open_as_registered, json.dumps(envelope).encode())


def test_refuses_an_unregistered_signer(alice, bob):
    data = sign_document(bob, BODY)
    error = refused(
        Reason.UNREGISTERED_HOTKEY,
        open_document,
        data,
        max_bytes=LIMIT,
        is_registered={alice.ss58_address}.__contains__,
    )
    assert bob.ss58_address in error.message


def test_signature_is_checked_before_registration(alice, bob):
    envelope = json.loads(sign_document(bob, BODY))
    envelope["body"]["window"] = 13
    data = json.dumps(envelope).encode()
    refused(Reason.BAD_SIGNATURE, open_document, data, max_bytes=LIMIT, is_registered=lambda _: False)


def test_refuses_a_document_from_an_unexpected_signer(alice, bob):
    data = sign_document(bob, BODY)
    error = refused(Reason.WRONG_SIGNER, open_as_registered, data, signer=alice.ss58_address)
    assert alice.ss58_address in error.message and bob.ss58_address in error.message


def test_refuses_a_document_for_another_run(alice):
    data = sign_document(alice, BODY)
    error = refused(Reason.WRONG_RUN, open_as_registered, data, run_id="run-other")
    assert RUN_ID in error.message and "run-other" in error.message


def test_refuses_a_document_for_another_window(alice):
    data = sign_document(alice, BODY)
    error = refused(Reason.WRONG_WINDOW, open_as_registered, data, run_id=RUN_ID, window=11)
    assert "12" in error.message and "11" in error.message


def test_run_is_checked_before_window(alice):
    data = sign_document(alice, BODY)
    refused(Reason.WRONG_RUN, open_as_registered, data, run_id="run-other", window=11)


@pytest.mark.parametrize(
    ("body", "checks", "reason"),
    [
        ({"window": 1}, {"run_id": RUN_ID}, Reason.MISSING_FIELD),
        ({"run_id": RUN_ID}, {"window": 1}, Reason.MISSING_FIELD),
        ({"window": True}, {"window": 1}, Reason.BAD_FIELD),
        ({"window": "1"}, {"window": 1}, Reason.BAD_FIELD),
        ({"window": 1.0}, {"window": 1}, Reason.BAD_FIELD),
        ({"run_id": 7}, {"run_id": "7"}, Reason.BAD_FIELD),
    ],
)
def test_refuses_run_and_window_fields_of_the_wrong_kind(alice, body, checks, reason):
    refused(reason, open_as_registered, sign_document(alice, body), **checks)


def test_sign_document_refuses_a_body_that_is_not_a_dict(alice):
    with pytest.raises(TypeError):
        sign_document(alice, [1, 2])


# hashes


def test_sha256_hex_matches_the_standard_test_vector():
    assert sha256_hex(b"abc") == "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"


def test_check_hash_accepts_the_right_hash_and_refuses_others():
    data = b"update blob"
    check_hash(data, hashlib.sha256(data).hexdigest())
    error = refused(Reason.HASH_MISMATCH, check_hash, data + b"!", hashlib.sha256(data).hexdigest())
    assert hashlib.sha256(data + b"!").hexdigest() in error.message


@pytest.mark.parametrize("expected", ["abc", "G" * 64, hashlib.sha256(b"x").hexdigest().upper(), 5])
def test_check_hash_refuses_a_malformed_expected_hash(expected):
    refused(Reason.BAD_FIELD, check_hash, b"x", expected)


# tensors


def specs(tensors: dict[str, torch.Tensor]) -> dict:
    return {name: (tensor.dtype, tuple(tensor.shape)) for name, tensor in tensors.items()}


def raw_bytes(tensor: torch.Tensor) -> bytes:
    return tensor.contiguous().reshape(-1).view(torch.uint8).numpy().tobytes()


def sample_tensors() -> dict[str, torch.Tensor]:
    generator = torch.Generator().manual_seed(0)
    return {
        "layers.0.w": torch.randn(4, 4, generator=generator),
        "layers.0.b": torch.randn(4, generator=generator, dtype=torch.float64),
        "half": torch.randn(3, generator=generator).to(torch.float16),
        "brain": torch.randn(2, 2, generator=generator).to(torch.bfloat16),
        "indices": torch.tensor([0, 5, -3], dtype=torch.int64),
        "codes": torch.tensor([-128, 0, 127], dtype=torch.int8),
        "packed": torch.tensor([0, 255, 7], dtype=torch.uint8),
        "wide": torch.tensor([1, 2], dtype=torch.int32).to(torch.uint32),
        "mask": torch.tensor([True, False, True]),
        "empty": torch.zeros(0, 3),
        "scalar": torch.tensor(1.5),
    }


def test_tensor_round_trip_across_dtypes_with_metadata():
    tensors = sample_tensors()
    data = encode_tensors(tensors, {"codec": "int8", "window": "12"})
    decoded, metadata = decode_tensors(data, max_bytes=LIMIT, expected=specs(tensors))
    assert metadata == {"codec": "int8", "window": "12"}
    assert decoded.keys() == tensors.keys()
    for name, tensor in tensors.items():
        assert decoded[name].dtype == tensor.dtype
        assert decoded[name].shape == tensor.shape, name
        assert raw_bytes(decoded[name]) == raw_bytes(tensor), name


def test_encode_takes_views_and_shared_storage():
    base = torch.arange(12.0).reshape(3, 4)
    tensors = {"t": base.t(), "same": base, "row": base[1]}
    decoded, _ = decode_tensors(encode_tensors(tensors), max_bytes=LIMIT, expected=specs(tensors))
    for name, tensor in tensors.items():
        assert torch.equal(decoded[name], tensor)


def test_encoding_does_not_depend_on_insertion_order():
    tensors = sample_tensors()
    reversed_order = dict(reversed(list(tensors.items())))
    assert encode_tensors(tensors) == encode_tensors(reversed_order)


def test_a_hand_built_file_decodes():
    values = struct.pack("<4f", 1.0, -2.0, 0.5, 3.0) + struct.pack("<2b", -1, 9)
    header = {
        "__metadata__": {"k": "v"},
        "w": f32_entry([2, 2], 0),
        "c": {"dtype": "I8", "shape": [2], "data_offsets": [16, 18]},
    }
    decoded, metadata = decode_tensors(safetensors_file(header, values), max_bytes=LIMIT)
    assert metadata == {"k": "v"}
    assert torch.equal(decoded["w"], torch.tensor([[1.0, -2.0], [0.5, 3.0]]))
    assert torch.equal(decoded["c"], torch.tensor([-1, 9], dtype=torch.int8))


def test_refuses_a_pickle_of_tensors():
    refused(Reason.PICKLE, decode_tensors, pickle.dumps(sample_tensors()), max_bytes=LIMIT)


@pytest.mark.parametrize("zip_format", [True, False])
def test_refuses_a_torch_save_file(zip_format):
    buffer = io.BytesIO()
    torch.save(sample_tensors(), buffer, _use_new_zipfile_serialization=zip_format)
    refused(Reason.PICKLE, decode_tensors, buffer.getvalue(), max_bytes=LIMIT)


def test_a_header_length_that_reads_as_a_pickle_protocol_opcode_is_still_safetensors():
    """A header length of 0x280 begins with bytes 0x80 0x02, the start of a protocol-2 pickle."""
    for name_length in range(400, 1500):
        tensors = {"x" * name_length: torch.ones(2)}
        data = encode_tensors(tensors)
        if data[0] == 0x80 and data[1] in (2, 3, 4, 5):
            decoded, _ = decode_tensors(data, max_bytes=LIMIT, expected=specs(tensors))
            assert torch.equal(decoded["x" * name_length], torch.ones(2))
            return
    pytest.fail("no header length starting with a pickle protocol opcode was produced")


def test_a_file_whose_bytes_happen_to_read_as_a_pickle_is_still_safetensors():
    """A header length beginning with byte 0x50 reads as pickle's PERSID opcode, whose argument runs to
    the next newline; tensor bytes 0x0a 0x2e then end it and give STOP: a complete pickle to the sniffer.
    An honest miner's codec residual was refused as a pickle this way (its floats held those bytes)."""
    tensors = {"a": torch.tensor([10, 46], dtype=torch.uint8)}
    for pad in range(400):
        data = encode_tensors(tensors, {"k": "v" * pad})
        if data[0] == 0x50:
            assert looks_like_pickle(data), "the sniffer alone reads this file as a pickle"
            decoded, metadata = decode_tensors(data, max_bytes=LIMIT, expected=specs(tensors))
            assert torch.equal(decoded["a"], tensors["a"]) and metadata == {"k": "v" * pad}
            return
    pytest.fail("no header length starting with byte 0x50 was produced")


def test_refuses_oversize_tensor_files():
    data = encode_tensors({"w": torch.zeros(100)})
    error = refused(Reason.TOO_LARGE, decode_tensors, data, max_bytes=len(data) - 1)
    assert str(len(data)) in error.message


@pytest.mark.parametrize("cut", [1, 3, 16])
def test_refuses_a_truncated_file(cut):
    data = encode_tensors({"w": torch.ones(4, 4), "b": torch.ones(4)})
    error = refused(Reason.MALFORMED_SAFETENSORS, decode_tensors, data[:-cut], max_bytes=LIMIT)
    assert "past the" in error.message


def test_refuses_a_file_shorter_than_the_length_prefix():
    refused(Reason.MALFORMED_SAFETENSORS, decode_tensors, b"\x02\x00\x00", max_bytes=LIMIT)


def test_refuses_a_header_length_beyond_the_buffer():
    data = safetensors_file({"w": f32_entry([1], 0)}, b"\x00" * 4, header_length=10_000)
    error = refused(Reason.MALFORMED_SAFETENSORS, decode_tensors, data, max_bytes=LIMIT)
    assert "header length 10000 runs past the end" in error.message


def test_refuses_a_header_length_over_the_limit():
    data = struct.pack("<Q", MAX_HEADER_BYTES + 1) + b"{}"
    error = refused(Reason.MALFORMED_SAFETENSORS, decode_tensors, data, max_bytes=LIMIT)
    assert "limit" in error.message


@pytest.mark.parametrize(
    ("header_text", "words"),
    [
        (b"not json", "invalid JSON"),
        (b'{"w": {"dtype": "F32", "dtype": "F32", "shape": [], "data_offsets": [0, 4]}}', "duplicate key"),
        (b"[]", "array"),
        (b'{"w": {"dtype": "F32", "shape": [NaN], "data_offsets": [0, 4]}}', "NaN"),
    ],
)
def test_refuses_a_header_that_is_not_a_json_object(header_text, words):
    data = struct.pack("<Q", len(header_text)) + header_text + b"\x00" * 4
    error = refused(Reason.MALFORMED_SAFETENSORS, decode_tensors, data, max_bytes=LIMIT)
    assert words in error.message


def test_refuses_overlapping_tensors():
    header = {"a": f32_entry([2], 0), "b": f32_entry([2], 4)}
    error = refused(
        Reason.MALFORMED_SAFETENSORS, decode_tensors, safetensors_file(header, b"\x00" * 12), max_bytes=LIMIT
    )
    assert "overlap" in error.message and "'a'" in error.message and "'b'" in error.message


def test_refuses_a_gap_between_tensors():
    header = {"a": f32_entry([1], 0), "b": f32_entry([1], 8)}
    error = refused(
        Reason.MALFORMED_SAFETENSORS, decode_tensors, safetensors_file(header, b"\x00" * 12), max_bytes=LIMIT
    )
    assert "bytes 4..8 before tensor 'b' belong to no tensor" in error.message


def test_refuses_trailing_bytes_after_the_last_tensor():
    header = {"a": f32_entry([1], 0)}
    error = refused(
        Reason.MALFORMED_SAFETENSORS, decode_tensors, safetensors_file(header, b"\x00" * 7), max_bytes=LIMIT
    )
    assert "last 3 bytes" in error.message


def test_refuses_a_byte_count_that_does_not_match_the_shape():
    header = {"w": {"dtype": "F32", "shape": [2, 2], "data_offsets": [0, 12]}}
    error = refused(
        Reason.MALFORMED_SAFETENSORS, decode_tensors, safetensors_file(header, b"\x00" * 12), max_bytes=LIMIT
    )
    assert "needs 16 bytes" in error.message and "span 12" in error.message


@pytest.mark.parametrize(
    ("entry", "words"),
    [
        ({"dtype": "F128", "shape": [1], "data_offsets": [0, 4]}, "unknown dtype 'F128'"),
        ({"dtype": "C64", "shape": [1], "data_offsets": [0, 4]}, "unknown dtype 'C64'"),
        ({"dtype": 4, "shape": [1], "data_offsets": [0, 4]}, "unknown dtype 4"),
        ({"dtype": "F32", "shape": [-1], "data_offsets": [0, 4]}, "shape [-1]"),
        ({"dtype": "F32", "shape": [1.0], "data_offsets": [0, 4]}, "shape [1.0]"),
        ({"dtype": "F32", "shape": [True], "data_offsets": [0, 4]}, "shape [True]"),
        ({"dtype": "F32", "shape": 1, "data_offsets": [0, 4]}, "shape 1"),
        ({"dtype": "F32", "shape": [1] * 17, "data_offsets": [0, 4]}, "at most 16"),
        ({"dtype": "F32", "shape": [0, 2**62, 2**62], "data_offsets": [0, 0]}, "multiply past"),
        ({"dtype": "F32", "shape": [1], "data_offsets": [4, 0]}, "begin <= end"),
        ({"dtype": "F32", "shape": [1], "data_offsets": [0, 4, 8]}, "data_offsets [0, 4, 8]"),
        ({"dtype": "F32", "shape": [1], "data_offsets": [-4, 0]}, "data_offsets [-4, 0]"),
        ({"dtype": "F32", "shape": [1]}, "expected dtype, shape, data_offsets"),
        (
            {"dtype": "F32", "shape": [1], "data_offsets": [0, 4], "extra": 1},
            "expected dtype, shape, data_offsets",
        ),
        ([1, 2], "header entry is list"),
    ],
)
def test_refuses_a_malformed_header_entry(entry, words):
    error = refused(
        Reason.MALFORMED_SAFETENSORS,
        decode_tensors,
        safetensors_file({"w": entry}, b"\x00" * 4),
        max_bytes=LIMIT,
    )
    assert "'w'" in error.message and words in error.message


@pytest.mark.parametrize("metadata", [{"k": 1}, [1], "text"])
def test_refuses_metadata_that_is_not_strings_to_strings(metadata):
    header = {"__metadata__": metadata, "w": f32_entry([1], 0)}
    error = refused(
        Reason.MALFORMED_SAFETENSORS, decode_tensors, safetensors_file(header, b"\x00" * 4), max_bytes=LIMIT
    )
    assert "metadata" in error.message


def test_refuses_a_bool_tensor_holding_other_bytes():
    header = {"mask": {"dtype": "BOOL", "shape": [3], "data_offsets": [0, 3]}}
    error = refused(
        Reason.MALFORMED_SAFETENSORS,
        decode_tensors,
        safetensors_file(header, b"\x01\x00\x02"),
        max_bytes=LIMIT,
    )
    assert "'mask'" in error.message


def test_refuses_the_wrong_dtype():
    data = encode_tensors({"w": torch.zeros(4, 4, dtype=torch.float16)})
    error = refused(
        Reason.WRONG_DTYPE, decode_tensors, data, max_bytes=LIMIT, expected={"w": (torch.float32, (4, 4))}
    )
    assert error.message == "tensor 'w' has dtype float16, expected float32"


def test_refuses_the_wrong_shape():
    data = encode_tensors({"layers.0.w": torch.zeros(3, 4)})
    expected = {"layers.0.w": (torch.float32, (4, 4))}
    error = refused(Reason.WRONG_SHAPE, decode_tensors, data, max_bytes=LIMIT, expected=expected)
    assert error.message == "tensor 'layers.0.w' has shape (3, 4), expected (4, 4)"


def test_refuses_missing_tensors_naming_them():
    data = encode_tensors({"a": torch.zeros(1)})
    expected = {"a": (torch.float32, (1,)), "b": (torch.float32, (1,)), "c": (torch.float32, (1,))}
    error = refused(Reason.MISSING_TENSOR, decode_tensors, data, max_bytes=LIMIT, expected=expected)
    assert error.message == "missing tensors ['b', 'c']"


def test_refuses_unexpected_tensors_unless_allowed():
    tensors = {"a": torch.zeros(1), "extra": torch.ones(2)}
    data = encode_tensors(tensors)
    expected = {"a": (torch.float32, (1,))}
    error = refused(Reason.UNEXPECTED_TENSOR, decode_tensors, data, max_bytes=LIMIT, expected=expected)
    assert "'extra'" in error.message
    decoded, _ = decode_tensors(data, max_bytes=LIMIT, expected=expected, allow_extra=True)
    assert torch.equal(decoded["extra"], torch.ones(2))


@pytest.mark.parametrize("value", [float("nan"), float("inf"), float("-inf")])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16, torch.float64])
def test_refuses_non_finite_values(value, dtype):
    data = encode_tensors({"w": torch.tensor([1.0, value, 2.0]).to(dtype)})
    error = refused(Reason.NON_FINITE, decode_tensors, data, max_bytes=LIMIT)
    assert "'w'" in error.message


def test_counts_nan_and_inf_and_can_allow_them():
    data = encode_tensors({"w": torch.tensor([float("nan"), float("inf"), -float("inf"), 0.0])})
    error = refused(Reason.NON_FINITE, decode_tensors, data, max_bytes=LIMIT)
    assert "1 NaN and 2 infinite" in error.message
    decoded, _ = decode_tensors(data, max_bytes=LIMIT, require_finite=False)
    assert torch.isnan(decoded["w"][0]) and torch.isinf(decoded["w"][1:3]).all()


@pytest.mark.parametrize(
    ("tensors", "metadata", "reason"),
    [
        ({"z": torch.zeros(2, dtype=torch.complex64)}, None, Reason.WRONG_DTYPE),
        ({"__metadata__": torch.zeros(1)}, None, Reason.BAD_FIELD),
        ({"": torch.zeros(1)}, None, Reason.BAD_FIELD),
        ({"w": [1.0, 2.0]}, None, Reason.BAD_FIELD),
        ({"w": torch.zeros(1)}, {"k": 1}, Reason.BAD_FIELD),
    ],
)
def test_encode_refuses_what_the_wire_does_not_carry(tensors, metadata, reason):
    refused(reason, encode_tensors, tensors, metadata)


def test_tensor_files_with_metadata_are_the_same_bytes_every_time():
    tensors = {"a": torch.ones(3), "b": torch.zeros(2)}
    metadata = {"x": "1", "é": "ü", "y": "2", "w": "4"}
    files = {encode_tensors(tensors, dict(reversed(metadata.items()))) for _ in range(20)}
    files |= {encode_tensors(tensors, metadata) for _ in range(20)}
    assert len(files) == 1
    assert decode_tensors(files.pop(), max_bytes=1024)[1] == metadata
