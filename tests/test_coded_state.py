"""The revealed state's coding (distrai/train/coded_state.py, distrai/train/lossless.py): a trained
state coded against the window's base comes back bit for bit and hashes to the committed hash; coded
bytes that are malformed, corrupted, oversized or a decompression bomb are refused with a reason."""

from __future__ import annotations

import pytest
import torch
from support.raw_blobs import raw_blob

from distrai.train.coded_state import check_coded_state, decode_coded_state, encode_coded_state
from distrai.train.inner import InnerConfig, inner_loop
from distrai.train.loss import causal_lm_loss
from distrai.train.lossless import (
    CodingError,
    compress,
    decompress_exact,
    delta_words,
    join_planes,
    split_planes,
    undelta_words,
    words_of,
)
from distrai.train.model import ModelSpec, load_model
from distrai.train.optimizer import InnerOptimizerConfig
from distrai.train.tensorfile import blob_format, decode_tensors
from distrai.train.train_state import encode_state, state_hash, states_equal
from distrai.wire.blob_records import CodedStateRecord

LIMIT = 1 << 30


def trained(dtype: str):
    """Boundaries 0, 2 and 4 of a tiny model's window: AdamW, pulled toward the base every step."""
    model = load_model(ModelSpec(preset="tiny", dtype=dtype))
    config = InnerConfig(
        inner_steps=4, segment_steps=2, optimizer=InnerOptimizerConfig(lr=1e-3), base_anchor=0.01
    )
    generator = torch.Generator().manual_seed(0)
    result = inner_loop(
        model, lambda t: torch.randint(256, (2, 32), generator=generator), causal_lm_loss, config
    )
    return result.boundaries


@pytest.fixture(scope="module")
def boundaries():
    return trained("float32")


@pytest.fixture(scope="module")
def coded(boundaries):
    return encode_coded_state(boundaries[1].state, boundaries[0].state.params)


def base_of(boundaries):
    return boundaries[0].state.params


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_a_coded_state_decodes_bit_for_bit_to_its_committed_hash(boundaries, dtype):
    boundaries = boundaries if dtype == "float32" else trained(dtype)
    base = {n: p.float() for n, p in base_of(boundaries).items()}  # G_w as validators hold it: float32
    for boundary in boundaries[1:]:
        data = encode_coded_state(boundary.state, base_of(boundaries))
        decoded = decode_coded_state(data, base, LIMIT)
        assert states_equal(decoded, boundary.state)
        assert state_hash(decoded) == boundary.state_hash
        assert len(data) < len(encode_state(boundary.state))


def test_the_coding_is_lossless_on_every_kind_of_float():
    special = torch.tensor(
        [0.0, -0.0, 1e-45, -1e-45, 1e-38, 3.4e38, -3.4e38, float("inf"), float("-inf"), 1.0, -1.0]
    )
    nan = (
        torch.tensor([0x7FC00001, 0xFFFFFFFF, 0x7F800001], dtype=torch.int64)
        .to(torch.int32)
        .view(torch.float32)
    )
    values = torch.cat([special, nan, torch.randn(1000)])
    base = torch.cat([special.flip(0), nan.flip(0), torch.randn(1000)])
    for dtype in (torch.float32, torch.bfloat16, torch.float16):
        v, b = values.to(dtype), base.to(dtype)
        planes = [decompress_exact(compress(p), len(p)) for p in split_planes(delta_words(v, b))]
        back = undelta_words(join_planes(planes, v.element_size()), b)
        assert (back == words_of(v)).all(), dtype


def test_a_difference_from_a_nearby_base_has_zero_high_bytes():
    base = torch.randn(4096)
    near = torch.nextafter(base, torch.full_like(base, float("inf")))  # one unit in the last place up
    planes = split_planes(delta_words(near, base))
    assert set(planes[0]) == {2}  # zigzagged +1
    assert planes[1] == planes[2] == planes[3] == bytes(4096)


def test_another_base_decodes_to_another_state(boundaries, coded):
    other = {n: p + 1e-3 for n, p in base_of(boundaries).items()}
    decoded = decode_coded_state(coded, other, LIMIT)
    assert state_hash(decoded) != boundaries[1].state_hash


def rebuilt(coded: bytes, change) -> bytes:
    """The coded state with its tensors and record changed by `change(tensors, record)`."""
    tensors, parsed = decode_tensors(coded, CodedStateRecord)
    record = parsed.model_dump(mode="json")
    change(tensors, record)
    return raw_blob(tensors, record)


def first_param(record) -> str:
    return next(k for k in sorted(record["tensors"]) if k.startswith("param/"))


def first_numel(record) -> int:
    count = 1
    for size in record["tensors"][first_param(record)]["shape"]:
        count *= size
    return count


def set_field(field, value, key=first_param):
    def change(tensors, record):
        record["tensors"][key(record)][field] = value

    return change


def rle_frame(declared: int, blocks: int) -> bytes:
    """A zstd frame declaring `declared` bytes of content, of `blocks` RLE blocks of 128 KiB of zeros
    each: 4 bytes a block, so a frame of 128 kB decodes to 4 GiB."""
    header = (0xFD2FB528).to_bytes(4, "little") + bytes([0xE0]) + declared.to_bytes(8, "little")
    size = 1 << 17
    body = b"".join(
        (int(i == blocks - 1) | (1 << 1) | (size << 3)).to_bytes(3, "little") + b"\0" for i in range(blocks)
    )
    return header + body


def with_first_plane(frame: bytes):
    def change(tensors, record):
        key = first_param(record)
        lengths = record["tensors"][key]["planes"]
        rest = tensors[key].numpy().tobytes()[lengths[0] :]
        tensors[key] = torch.tensor(bytearray(frame + rest), dtype=torch.uint8)
        record["tensors"][key]["planes"] = [len(frame), *lengths[1:]]

    return change


bomb = with_first_plane(rle_frame(1 << 32, 1 << 15))
"""A 128-kB frame of 4 GiB of zeros in place of the first parameter's first plane."""


def many_moments(tensors, record):
    """Ten thousand optimizer tensors of the first parameter's shape, each of empty frames."""
    key = first_param(record)
    entry = dict(record["tensors"][key], delta=False, planes=[0, 0, 0, 0])
    for i in range(10_000):
        name = "optim/" + key.removeprefix("param/") + f"/extra{i}"
        record["tensors"][name] = entry
        tensors[name] = torch.empty(0, dtype=torch.uint8)


CASES = {
    "not a coded state": (lambda tensors, record: None, None),
    "negative step": (
        lambda tensors, record: record.update(step=-1),
        "record's step: Input should be greater than or equal to 0 (got -1)",
    ),
    "boolean step": (
        lambda tensors, record: record.update(step=True),
        "record's step: Input should be a valid integer (got True)",
    ),
    "record lists another tensor": (
        lambda tensors, record: record["tensors"].update(
            {"param/ghost": record["tensors"][first_param(record)]}
        ),
        "does not list exactly the tensors",
    ),
    "an unknown field": (lambda tensors, record: record.update(note="hi"), "record's note: Extra inputs"),
    "unknown parameter": (
        lambda tensors, record: (
            tensors.update({"param/ghost": tensors[first_param(record)]}),
            record["tensors"].update({"param/ghost": record["tensors"][first_param(record)]}),
        ),
        "the model has no parameter 'ghost'",
    ),
    "wrong shape": (set_field("shape", [3, 3]), "the model's parameter is"),
    "unknown dtype": (set_field("dtype", "int64"), "Input should be 'float32', 'bfloat16' or 'float16'"),
    "parameter not a difference": (set_field("delta", False), "coded as its difference from the base"),
    "missing field": (
        lambda tensors, record: record["tensors"][first_param(record)].pop("delta"),
        ".delta: Field required",
    ),
    "frame lengths that do not add up": (set_field("planes", [1, 1, 1, 1]), "frames of 4 bytes in all"),
    "a decompression bomb": (bomb, "the frame declares 4294967296 bytes of content"),
    "a frame holding more than it declares": (
        lambda tensors, record: with_first_plane(rle_frame(first_numel(record), 64))(tensors, record),
        "the frame does not decompress",
    ),
    "more tensors than the cap allows": (many_moments, "the limit is"),
    "a tensor outside the state": (
        lambda tensors, record: (
            tensors.update({"extra": torch.zeros(1, dtype=torch.uint8)}),
            record["tensors"].update(
                {"extra": {"dtype": "float32", "shape": [], "delta": False, "planes": [1, 0, 0, 0]}}
            ),
        ),
        "unexpected tensor 'extra'",
    ),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_a_malformed_coded_state_is_refused_with_its_reason(boundaries, coded, case):
    change, reason = CASES[case]
    data = encode_state(boundaries[1].state) if reason is None else rebuilt(coded, change)
    with pytest.raises(ValueError) as refused:
        decode_coded_state(data, base_of(boundaries), LIMIT)
    assert (reason or "expected a 'distrai.coded_train_state/1' blob") in str(refused.value)


def flip_a_frame_byte(tensors, record):
    """Flip one byte in the middle of the first parameter's frames."""
    key = first_param(record)
    raw = bytearray(tensors[key].numpy().tobytes())
    raw[len(raw) // 2] ^= 0xFF
    tensors[key] = torch.tensor(raw, dtype=torch.uint8)


def test_a_corrupted_frame_is_refused_by_its_checksum(boundaries, coded):
    with pytest.raises(CodingError, match="byte plane .*: the frame does not decompress"):
        decode_coded_state(rebuilt(coded, flip_a_frame_byte), base_of(boundaries), LIMIT)


def test_a_store_audit_checks_every_frame_without_the_base(boundaries, coded):
    assert blob_format(coded) == CodedStateRecord.kind() == "distrai.coded_train_state/1"
    assert blob_format(encode_state(boundaries[1].state)) == "distrai.train_state/1"
    assert blob_format(b"not a blob") is None
    state = boundaries[1].state
    assert check_coded_state(coded, LIMIT) == len(state.params) + len(state.optimizer)
    with pytest.raises(CodingError, match="byte plane .*: the frame does not decompress"):
        check_coded_state(rebuilt(coded, flip_a_frame_byte), LIMIT)
    with pytest.raises(ValueError):
        check_coded_state(coded[: len(coded) // 2], LIMIT)


def test_the_cap_covers_the_file_and_what_it_decodes_to(boundaries, coded):
    decoded_bytes = len(encode_state(boundaries[1].state))
    with pytest.raises(ValueError, match="the limit is"):
        decode_coded_state(coded, base_of(boundaries), len(coded) - 1)
    assert len(coded) < decoded_bytes - 4096
    with pytest.raises(CodingError, match="decodes to .* bytes, the limit is"):
        decode_coded_state(coded, base_of(boundaries), len(coded) + 1)


@pytest.mark.parametrize(
    ("frame", "reason"),
    [
        (b"junk", "not a zstd frame"),
        (compress(b"abc") + b"x", "unused data"),
        (compress(b"abcd"), "declares 4"),
    ],
)
def test_a_plane_must_be_one_frame_of_exactly_its_size(frame, reason):
    with pytest.raises(CodingError, match=reason):
        decompress_exact(frame, 3)
