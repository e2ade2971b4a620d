"""Update and aggregate manifests: valid ones parse, each kind of bad field is named."""

from __future__ import annotations

import pytest
from bittensor.keyfiles import Keypair

from distrai.wire import Reason, WireError, open_document, sign_document
from distrai.wire.window_documents import AggregateManifest, UpdateManifest, WindowReport, parse_body

H = "ab" * 32
ALICE = Keypair.create_from_uri("//Alice")


REPLAY_CLASS = {
    "device": "cpu (AVX2)",
    "torch": "2.13.0",
    "cuda": None,
    "dtype": "float32",
    "attention": "eager",
    "micro_batches": 1,
}


def manifest_body(**overrides):
    body = {
        "kind": "update",
        "run_id": H,
        "window": 3,
        "hotkey": ALICE.ss58_address,
        "base_hash": H,
        "update": {"sha256": H, "size": 100, "codec": "topk", "codec_metadata": {"codec": "topk"}},
        "micro_batches": 1,
        "losses": [3.0, 2.9, 2.8, 2.7],
        "boundaries": [
            {"step": 0, "state_hash": H, "sketch": [0.0, 1.0]},
            {"step": 2, "state_hash": H, "sketch": [0.5, 1.5]},
            {"step": 4, "state_hash": H, "sketch": [0.25, 1.25]},
        ],
        "residual_in_hash": None,
        "residual_out_hash": H,
    }
    body.update(overrides)
    return body


def test_signed_manifest_round_trips():
    data = sign_document(ALICE, manifest_body())
    doc = open_document(data, max_bytes=1 << 16, is_registered=lambda hk: True, run_id=H, window=3)
    manifest = parse_body(UpdateManifest, doc.body)
    assert manifest.window == 3 and manifest.shape_matches(inner_steps=4, segment_steps=2)
    assert not manifest.shape_matches(inner_steps=4, segment_steps=1)
    assert manifest.shape_matches(inner_steps=6, segment_steps=2), "fewer whole segments than H fit"
    assert not manifest.shape_matches(inner_steps=2, segment_steps=2), "more steps than H"
    assert (manifest.steps, manifest.n_segments) == (4, 2)


@pytest.mark.parametrize(
    ("override", "reason", "field"),
    [
        ({"window": -1}, Reason.BAD_FIELD, "window"),
        ({"run_id": "xyz"}, Reason.BAD_FIELD, "run_id"),
        ({"losses": [1.0, float("nan"), 1.0, 1.0]}, Reason.BAD_FIELD, "losses"),
        ({"micro_batches": 0}, Reason.BAD_FIELD, "micro_batches"),
        ({"ranks": 0}, Reason.BAD_FIELD, "ranks"),
        (
            {"ranks": 2, "replay_class": {**REPLAY_CLASS, "ranks": 4}},
            Reason.BAD_FIELD,
            "replay_class.ranks 4 is not ranks 2",
        ),
        ({"sharded": True}, Reason.BAD_FIELD, "a sharded update needs at least 2 ranks, got 1"),
        (
            {"ranks": 2, "sharded": True, "replay_class": {**REPLAY_CLASS, "ranks": 2}},
            Reason.BAD_FIELD,
            "replay_class.sharded False is not sharded True",
        ),
        (
            {"update": {"sha256": H, "size": 0, "codec": "topk", "codec_metadata": {}}},
            Reason.BAD_FIELD,
            "update.size",
        ),
        (
            {"boundaries": [{"step": 0, "state_hash": H, "sketch": []}]},
            Reason.BAD_FIELD,
            "boundaries must start",
        ),
        ({"losses": [1.0]}, Reason.BAD_FIELD, "losses are given"),
        ({"extra": 1}, Reason.BAD_FIELD, "extra"),
        ({"window": True}, Reason.BAD_FIELD, "window"),
    ],
)
def test_bad_fields_are_named(override, reason, field):
    with pytest.raises(WireError) as refused:
        parse_body(UpdateManifest, manifest_body(**override))
    assert refused.value.reason == reason
    assert field in str(refused.value)


def test_missing_field_is_named():
    body = manifest_body()
    del body["base_hash"]
    with pytest.raises(WireError) as refused:
        parse_body(UpdateManifest, body)
    assert refused.value.reason == Reason.MISSING_FIELD and "base_hash" in str(refused.value)


def test_aggregate_manifest_validates_weights():
    good = {
        "run_id": H,
        "window": 1,
        "base_hash": H,
        "report_sha256": H,
        "result_hash": H,
        "outer_hash": H,
        "accepted": [{"hotkey": ALICE.ss58_address, "manifest_sha256": H, "update_sha256": H, "weight": 0.5}],
    }
    assert parse_body(AggregateManifest, good).accepted[0].weight == 0.5
    with pytest.raises(WireError) as refused:
        parse_body(AggregateManifest, {**good, "accepted": [{**good["accepted"][0], "weight": 0.0}]})
    assert "weight" in str(refused.value)
    with pytest.raises(WireError, match="report_sha256"):
        parse_body(AggregateManifest, {k: v for k, v in good.items() if k != "report_sha256"})


def test_a_report_names_every_miner_and_refuses_non_finite_numbers():
    entry = {
        "uid": 1,
        "verdicts": {"update": "pass"},
        "numbers": {"mark": 0.1},
        "score": 0.5,
        "reason": None,
    }
    good = {
        "run_id": H,
        "window": 1,
        "validator": ALICE.ss58_address,
        "observed_block": 18,
        "miners": {ALICE.ss58_address: entry},
        "refused": [{"validator": ALICE.ss58_address, "window": 0, "reason": "its aggregate is malformed"}],
    }
    assert parse_body(WindowReport, good).miners[ALICE.ss58_address].score == 0.5
    for bad, field in (
        ({**entry, "numbers": {"x": float("inf")}}, "numbers"),
        ({**entry, "score": -1.0}, "score"),
        ({**entry, "score": float("inf")}, "score"),
    ):
        with pytest.raises(WireError, match=field):
            parse_body(WindowReport, {**good, "miners": {ALICE.ss58_address: bad}})
