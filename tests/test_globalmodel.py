"""G_w → G_{w+1}: aggregates apply only from the right base to the named result; checkpoints
round-trip exactly and refuse what does not fit the model."""

from __future__ import annotations

import hashlib

import pytest
import torch

from distrai.codec import get_codec
from distrai.protocol.globalmodel import (
    GlobalModel,
    SyncError,
    apply_aggregate,
    decode_checkpoint,
    encode_checkpoint,
    outer_config,
    skip_window,
)
from distrai.protocol.layout import checkpoint_key, checkpoint_window
from distrai.protocol.run import OuterConfig as RunOuterConfig
from distrai.protocol.runtime import params_hash
from distrai.protocol.update import decode_update, encode_update
from distrai.train.outer import Contribution, OuterState, outer_state_hash, outer_step
from distrai.wire.window_documents import AggregateManifest

CODEC = get_codec("int8")
OUTER = RunOuterConfig()
HOTKEYS = ["5" + c * 47 for c in "ABC"]


def model_at(window: int) -> GlobalModel:
    g = torch.Generator().manual_seed(0)
    params = {"a.weight": torch.randn(16, 8, generator=g), "b.bias": torch.randn(40, generator=g)}
    return GlobalModel(window, params, OuterState(momentum={}))


def blobs_for(model: GlobalModel, n: int) -> dict[str, bytes]:
    out = {}
    for i in range(n):
        g = torch.Generator().manual_seed(100 + i)
        delta = {k: 0.01 * torch.randn(v.shape, generator=g) for k, v in model.params.items()}
        enc = CODEC.encode(delta, None)
        blob = encode_update(enc.payload, enc.metadata, HOTKEYS[i], model.window)
        out[hashlib.sha256(blob).hexdigest()] = blob
    return out


def aggregate_for(model: GlobalModel, blobs: dict[str, bytes], **overrides) -> AggregateManifest:
    shapes = {k: tuple(v.shape) for k, v in model.params.items()}
    contributions = [
        Contribution(
            HOTKEYS[i], decode_update(blob, CODEC, shapes, 1 << 20, HOTKEYS[i], model.window), 1 / len(blobs)
        )
        for i, blob in enumerate(blobs.values())
    ]
    result = outer_step(model.params, contributions, model.outer, outer_config(OUTER))
    body = {
        "run_id": "ab" * 32,
        "window": model.window,
        "base_hash": model.hash,
        "report_sha256": "cd" * 32,
        "accepted": [
            {
                "hotkey": HOTKEYS[i],
                "manifest_sha256": "ef" * 32,
                "update_sha256": sha,
                "weight": 1 / len(blobs),
            }
            for i, sha in enumerate(blobs)
        ],
        "result_hash": params_hash(result.params),
        "outer_hash": outer_state_hash(result.state),
    }
    body.update(overrides)
    return AggregateManifest.model_validate(body)


def test_applying_an_aggregate_reaches_its_result_and_keeps_momentum():
    model = model_at(5)
    blobs = blobs_for(model, 2)
    following = apply_aggregate(model, aggregate_for(model, blobs), blobs.__getitem__, CODEC, OUTER, 1 << 20)
    assert following.window == 6 and following.hash != model.hash
    assert set(following.outer.momentum) == set(model.params) and following.outer.step == 1


@pytest.mark.parametrize("fault", ["window", "base", "result", "outer", "blob"])
def test_aggregates_that_cannot_be_followed_are_refused(fault):
    model = model_at(5)
    blobs = blobs_for(model, 2)
    overrides = {
        "window": {"window": 4},
        "base": {"base_hash": "cd" * 32},
        "result": {"result_hash": "ef" * 32},
        "outer": {"outer_hash": "ef" * 32},
    }
    aggregate = aggregate_for(model, blobs, **overrides.get(fault, {}))
    fetch = blobs.__getitem__ if fault != "blob" else (lambda sha: b"\x00" * 64)
    with pytest.raises(SyncError):
        apply_aggregate(model, aggregate, fetch, CODEC, OUTER, 1 << 20)


def test_skipped_window_keeps_params_and_momentum():
    model = model_at(2)
    assert skip_window(model).window == 3 and skip_window(model).hash == model.hash


def test_checkpoint_round_trips_bit_exactly():
    model = model_at(7)
    blobs = blobs_for(model, 1)
    stepped = apply_aggregate(model, aggregate_for(model, blobs), blobs.__getitem__, CODEC, OUTER, 1 << 20)
    shapes = {k: tuple(v.shape) for k, v in model.params.items()}
    back = decode_checkpoint(encode_checkpoint(stepped), shapes, 1 << 20)
    assert back.window == 8 and back.hash == stepped.hash and back.outer.step == stepped.outer.step
    assert all(torch.equal(back.outer.momentum[k], stepped.outer.momentum[k]) for k in shapes)


def test_checkpoint_of_another_model_is_refused():
    model = model_at(1)
    with pytest.raises(SyncError, match="names and shapes"):
        decode_checkpoint(encode_checkpoint(model), {"a.weight": (8, 16), "b.bias": (40,)}, 1 << 20)
    with pytest.raises(ValueError):
        decode_checkpoint(b"junk" * 10, {"a.weight": (16, 8)}, 1 << 20)


def test_checkpoint_keys_name_their_window():
    assert checkpoint_window(checkpoint_key("ab" * 32, 42, "5Validator")) == 42
    assert checkpoint_window("runs/x/checkpoints/readme.txt") is None
