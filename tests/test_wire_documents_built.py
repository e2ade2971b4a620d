"""Documents built with the models that read them: the signed body is every field's plain JSON
value, it verifies and parses back to an equal model; the report's names are one `StrEnum` each,
and a report built from them signs the same bytes as one written with plain strings."""

from __future__ import annotations

from typing import get_args

from bittensor.keyfiles import Keypair

from distrai.dashboard.words import CHECKS
from distrai.wire import canonical_json, open_document, sign_document
from distrai.wire.verdicts import PASS, REPLAY_CHECKS, Check, Number
from distrai.wire.window_documents import (
    AcceptedUpdate,
    AggregateManifest,
    Boundary,
    Measurement,
    MinerEntry,
    ReplayCheckName,
    UpdateBlob,
    UpdateManifest,
    WindowReport,
    parse_body,
)

H = "ab" * 32
ALICE = Keypair.create_from_uri("//Alice")
BOB = Keypair.create_from_uri("//Bob")


def opened(model, data: bytes):
    doc = open_document(data, max_bytes=1 << 16, is_registered=lambda hk: True)
    return parse_body(model, doc.body)


def test_a_built_manifest_signs_every_field_and_parses_back_equal():
    manifest = UpdateManifest(
        run_id=H,
        window=3,
        hotkey=ALICE.ss58_address,
        base_hash=H,
        update=UpdateBlob(sha256=H, size=100, codec="topk", codec_metadata={"k": "8"}),
        micro_batches=1,
        losses=[3.0, 2.5],
        boundaries=[Boundary(step=s, state_hash=H, sketch=[0.5, 1.0]) for s in (0, 1, 2)],
        residual_in_hash=None,
        residual_out_hash=H,
    )
    body = manifest.body()
    assert set(body) == set(UpdateManifest.model_fields), "defaults are written too"
    assert body["kind"] == "update" and body["ranks"] == 1 and body["replay_class"] is None
    assert opened(UpdateManifest, sign_document(ALICE, body)) == manifest


def test_a_built_aggregate_parses_back_equal_and_ints_stay_floats():
    aggregate = AggregateManifest(
        run_id=H,
        window=2,
        base_hash=H,
        report_sha256=H,
        accepted=[AcceptedUpdate(hotkey=BOB.ss58_address, manifest_sha256=H, update_sha256=H, weight=1)],
        result_hash=H,
        outer_hash=H,
    )
    assert type(aggregate.body()["accepted"][0]["weight"]) is float
    assert opened(AggregateManifest, sign_document(ALICE, aggregate.body())) == aggregate


def test_a_report_built_from_the_enums_signs_the_bytes_plain_strings_give():
    def report(verdicts: dict, numbers: dict) -> WindowReport:
        entry = MinerEntry(uid=1, verdicts=verdicts, numbers=numbers, score=0.5, reason=None)
        return WindowReport(
            run_id=H,
            window=2,
            validator=ALICE.ss58_address,
            observed_block=7,
            miners={BOB.ss58_address: entry},
            refused=[],
        )

    built = report({Check.MANIFEST: PASS, Check.REPLAY: PASS}, {Number.MARK: 0.25, Number.TOKENS: 64.0})
    plain = report({"manifest": "pass", "replay": "pass"}, {"mark": 0.25, "tokens": 64.0})
    assert canonical_json(built.body()) == canonical_json(plain.body())
    assert all(type(k) is str for k in built.body()["miners"][BOB.ss58_address]["verdicts"])
    assert opened(WindowReport, sign_document(ALICE, built.body())) == plain


def test_the_names_are_defined_once():
    assert get_args(ReplayCheckName) == REPLAY_CHECKS
    assert set(Measurement.model_fields) <= set(Number)
    assert set(CHECKS) == set(Check), "the dashboard describes every check the validators write"
