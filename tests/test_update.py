"""The update blob is bound to the miner and the window it was made for."""

from __future__ import annotations

import pytest
import torch

from distrai.codec import get_codec
from distrai.protocol.update import decode_update, encode_update, is_encoding_of
from distrai.wire import Reason, WireError, encode_tensors

HOTKEY = "5" + "A" * 47
OTHER = "5" + "B" * 47
CODEC = get_codec("int8")
SHAPES = {"w": (4, 8), "b": (8,)}


def encoded():
    g = torch.Generator().manual_seed(0)
    return CODEC.encode({name: torch.randn(shape, generator=g) for name, shape in SHAPES.items()}, None)


def test_round_trip_for_the_bound_miner_and_window():
    enc = encoded()
    blob = encode_update(enc.payload, enc.metadata, HOTKEY, 7)
    update = decode_update(blob, CODEC, SHAPES, 1 << 20, HOTKEY, 7)
    assert update.keys() == SHAPES.keys()
    assert torch.equal(update["w"], CODEC.decode(enc.payload, enc.metadata, SHAPES)["w"])


@pytest.mark.parametrize(("hotkey", "window"), [(OTHER, 7), (HOTKEY, 6)])
def test_a_blob_made_for_another_miner_or_window_is_refused(hotkey, window):
    enc = encoded()
    blob = encode_update(enc.payload, enc.metadata, HOTKEY, 7)
    with pytest.raises(WireError) as caught:
        decode_update(blob, CODEC, SHAPES, 1 << 20, hotkey, window)
    assert caught.value.reason is Reason.WRONG_OWNER
    assert HOTKEY in str(caught.value) and "window '7'" in str(caught.value)


def test_a_blob_without_binding_is_refused():
    enc = encoded()
    with pytest.raises(WireError) as caught:
        decode_update(encode_tensors(enc.payload, enc.metadata), CODEC, SHAPES, 1 << 20, HOTKEY, 7)
    assert caught.value.reason is Reason.WRONG_OWNER


def test_the_same_update_encodes_to_the_same_bytes():
    enc = encoded()
    assert len({encode_update(enc.payload, enc.metadata, HOTKEY, 7) for _ in range(20)}) == 1


def test_is_encoding_of_compares_payload_metadata_and_binding():
    enc = encoded()
    blob = encode_update(enc.payload, enc.metadata, HOTKEY, 7)
    assert is_encoding_of(blob, enc.payload, enc.metadata, HOTKEY, 7)
    assert not is_encoding_of(blob, enc.payload, enc.metadata, OTHER, 7)
    assert not is_encoding_of(blob, enc.payload, enc.metadata, HOTKEY, 8)
    first = next(iter(enc.payload))
    changed = {**enc.payload, first: enc.payload[first].clone()}
    changed[first].view(-1)[0] += 1
    assert not is_encoding_of(blob, changed, enc.metadata, HOTKEY, 7)
    assert not is_encoding_of(b"garbage", enc.payload, enc.metadata, HOTKEY, 7)
