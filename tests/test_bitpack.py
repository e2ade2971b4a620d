"""Bit packing: round trips, the documented bit order, exact lengths, and refusals."""

from __future__ import annotations

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from distrai.codec import CodecError, pack_bits, packed_length, unpack_bits


@st.composite
def entries(draw):
    bits = draw(st.integers(1, 16))
    values = draw(st.lists(st.integers(0, (1 << bits) - 1), max_size=300))
    return bits, torch.tensor(values, dtype=torch.int64)


@settings(max_examples=200, deadline=None)
@given(entries())
def test_round_trip_for_every_width(case):
    bits, values = case
    packed = pack_bits(values, bits)
    assert packed.dtype == torch.uint8
    assert packed.numel() == (values.numel() * bits + 7) // 8
    assert torch.equal(unpack_bits(packed, bits, values.numel()), values)


def test_bit_order_is_least_significant_first():
    # Entries 1, 0, 1 at one bit each fill bits 0..2 of the first byte: 0b101.
    assert pack_bits(torch.tensor([1, 0, 1]), 1).tolist() == [0b101]
    # Two 4-bit entries: the first is the low nibble, the second the high nibble.
    assert pack_bits(torch.tensor([0x3, 0xA]), 4).tolist() == [0xA3]
    # A 12-bit entry 0xABC spans byte 0 (its low 8 bits) and the low nibble of byte 1.
    assert pack_bits(torch.tensor([0xABC]), 12).tolist() == [0xBC, 0x0A]


def test_large_stream_round_trips():
    values = torch.randint(0, 1 << 12, (1_000_003,), generator=torch.Generator().manual_seed(1))
    packed = pack_bits(values, 12)
    assert packed.numel() == packed_length(values.numel(), 12) == (1_000_003 * 12 + 7) // 8
    assert torch.equal(unpack_bits(packed, 12, values.numel()), values)


@pytest.mark.parametrize("bits", [0, 17, True, 2.0])
def test_bad_width_is_refused(bits):
    with pytest.raises(CodecError) as caught:
        pack_bits(torch.tensor([0]), bits)
    assert caught.value.reason == "bad_option"


@pytest.mark.parametrize("value", [-1, 8])
def test_entry_outside_width_is_refused(value):
    with pytest.raises(CodecError) as caught:
        pack_bits(torch.tensor([1, value]), 3)
    assert caught.value.reason == "value_out_of_range"


def test_wrong_dtypes_are_refused():
    with pytest.raises(CodecError) as caught:
        pack_bits(torch.tensor([1.0]), 3)
    assert caught.value.reason == "bad_dtype"
    with pytest.raises(CodecError) as caught:
        unpack_bits(torch.tensor([1], dtype=torch.int8), 3, 1)
    assert caught.value.reason == "bad_dtype"


def test_wrong_length_is_refused():
    packed = pack_bits(torch.tensor([5, 6, 7]), 3)
    with pytest.raises(CodecError) as caught:
        unpack_bits(packed[:-1], 3, 3)
    assert caught.value.reason == "bad_count"
    with pytest.raises(CodecError) as caught:
        unpack_bits(torch.cat([packed, packed]), 3, 3)
    assert caught.value.reason == "bad_count"


def test_nonzero_padding_is_refused():
    packed = pack_bits(torch.tensor([5, 6, 7]), 3)  # 9 bits used, 7 bits of padding in byte 1
    packed[1] |= 0b1000_0000
    with pytest.raises(CodecError) as caught:
        unpack_bits(packed, 3, 3)
    assert caught.value.reason == "bad_padding"
