"""G_w → G_{w+1}: aggregates apply only from the right base to the named result; checkpoints
round-trip exactly and refuse what does not fit the model."""

from __future__ import annotations

import hashlib

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from distrai.chain.base import Commitment
from distrai.codec import get_codec
from distrai.protocol.announce import (
    Announcement,
    anchored_aggregates,
    claims,
    committed_updates,
    parse_announcement,
    sharing_validators,
)
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


def test_announcements_round_trip_and_filter_by_window_and_time():
    miner = Announcement("file:///s", 4, "ab" * 32, segments=46)
    assert parse_announcement(miner.encode()) == miner
    assert parse_announcement(Announcement("s3://b/p").encode()) == Announcement("s3://b/p")
    commitments = {
        "m1": Commitment("m1", miner.encode(), 10),
        "m2": Commitment("m2", Announcement("file:///t", 3, "cd" * 32, segments=1).encode(), 10),
        "m3": Commitment("m3", Announcement("file:///u", 4, "ef" * 32, segments=2).encode(), 99),
        "owner": Commitment("owner", "distrai-run:" + "0" * 64, 1),
        "v1": Commitment("v1", Announcement("file:///v", 4, aggregate_sha256="12" * 32).encode(), 40),
        "v2": Commitment("v2", Announcement("file:///w", 3, aggregate_sha256="34" * 32).encode(), 40),
    }
    assert set(committed_updates(commitments, 4, lambda block: block < 50)) == {"m1"}
    assert set(anchored_aggregates(commitments, 4, lambda block: block < 50)) == {"v1"}
    assert parse_announcement(commitments["v1"].data).aggregate_sha256 == "12" * 32
    assert parse_announcement('{"s":"x","w":1,"m":"' + "a" * 64 + '","a":"' + "b" * 64 + '"}') is None
    with pytest.raises(ValueError, match="one manifest or one aggregate"):
        Announcement("file:///v", 4, "ab" * 32, "cd" * 32)
    assert claims(committed_updates(commitments, 4, lambda block: block < 100)) == {"m1": 46, "m3": 2}


def test_a_manifest_anchor_names_the_segments_it_claims_and_nothing_else_does():
    """The claim is on chain, so every node draws the same challenge from it (`windows.extra_runs`)."""
    sha = "ab" * 32
    assert parse_announcement(f'{{"s":"x","w":1,"m":"{sha}","n":3}}') == Announcement("x", 1, sha, segments=3)
    for bad in ("", ',"n":0', ',"n":true', ',"n":"3"', ',"n":-1'):
        assert parse_announcement(f'{{"s":"x","w":1,"m":"{sha}"{bad}}}') is None, bad
    assert parse_announcement(f'{{"s":"x","w":1,"a":"{sha}","n":3}}') is None
    with pytest.raises(ValueError, match="names the segments it claims"):
        Announcement("x", 1, sha)
    with pytest.raises(ValueError, match="names the segments it claims"):
        Announcement("x", 1, aggregate_sha256=sha, segments=2)
    with pytest.raises(ValueError, match="at least one segment"):
        Announcement("x", 1, sha, segments=0)


def test_the_replays_are_shared_by_the_permitted_validators_that_aggregate():
    def aggregated(window):
        return Announcement("file:///v", window, aggregate_sha256="12" * 32).encode()

    commitments = {
        "v1": Commitment("v1", aggregated(9), 40),
        "v2": Commitment("v2", aggregated(8), 30),
        "v3": Commitment("v3", aggregated(7), 20),  # silent for three windows: out
        "v4": Commitment("v4", aggregated(10), 45),  # an anchor for a window not yet checked: out
        "copier": Commitment("copier", "hello", 45),
        "m1": Commitment(
            "m1", Announcement("file:///m", 10, manifest_sha256="34" * 32, segments=1).encode(), 41
        ),
    }
    permitted = ["v1", "v2", "v3", "v4", "copier", "v1"]
    assert sharing_validators(permitted, commitments, 10) == ["v1", "v2"]
    assert sharing_validators(["v2", "m1"], commitments, 10) == ["v2"]
    # a permitted hotkey that aggregates but lost its permit takes no share
    assert sharing_validators(["v2"], commitments, 10) == ["v2"]
    # nobody has aggregated yet (a run's first windows): every permitted validator shares
    assert sharing_validators(["copier", "v3"], commitments, 10) == ["copier", "v3"]
    assert sharing_validators([], commitments, 10) == []


@given(st.text(max_size=200))
@settings(max_examples=200, deadline=None)
def test_any_commitment_text_parses_or_is_ignored(text):
    parsed = parse_announcement(text)
    assert parsed is None or parse_announcement(parsed.encode()) == parsed
