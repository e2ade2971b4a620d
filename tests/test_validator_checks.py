"""A validator's checks on one miner's window: honest work passes, and every kind of bad input
becomes a named verdict (never an exception that would stop the validator)."""

from __future__ import annotations

import dataclasses
import hashlib
import json
import pickle

import pytest
import torch
from bittensor.keyfiles import Keypair

from distrai.localnet.network import local_runtime
from distrai.protocol.announce import Announcement
from distrai.protocol.globalmodel import GlobalModel
from distrai.protocol.layout import manifest_key
from distrai.protocol.run import challenge_inputs, load_run_config, shipped_config_path
from distrai.protocol.sync import StoreCache
from distrai.protocol.update import encode_update
from distrai.store import FileStore
from distrai.train.outer import OuterState
from distrai.wire import sign_document
from validators.checks import PASS, check_miner, flag_copies
from validators.inventory import AtDeadline, Inventory, take_inventory
from validators.window import WindowBasis

WINDOW = 3
MINER = Keypair.create_from_uri("//Miner")
THIEF = Keypair.create_from_uri("//Thief")
START = "ef" * 32


@pytest.fixture(scope="module")
def runtime(tmp_path_factory):
    return local_runtime(
        load_run_config(shipped_config_path("cpu-localnet")), tmp_path_factory.mktemp("data")
    )


@pytest.fixture(scope="module")
def model(runtime):
    return GlobalModel(WINDOW, runtime.initial_params(), OuterState(momentum={}))


def update_blob(runtime, model, seed=0, hotkey=MINER.ss58_address, window=WINDOW):
    generator = torch.Generator().manual_seed(seed)
    delta = {n: 1e-3 * torch.randn(p.shape, generator=generator) for n, p in model.params.items()}
    encoded = runtime.codec.encode(delta, None)
    return encode_update(encoded.payload, encoded.metadata, hotkey, window), encoded.metadata


def manifest_body(runtime, model, blob, metadata, hotkey, **overrides):
    cfg = runtime.config.train
    body = {
        "kind": "update",
        "run_id": runtime.run_id,
        "window": WINDOW,
        "hotkey": hotkey,
        "base_hash": model.hash,
        "update": {
            "sha256": hashlib.sha256(blob).hexdigest(),
            "size": len(blob),
            "codec": runtime.config.codec.name,
            "codec_metadata": dict(metadata),
        },
        "micro_batches": 1,
        "losses": [3.0] * cfg.inner_steps,
        "boundaries": [
            {"step": s, "state_hash": "ab" * 32, "sketch": [0.0]}
            for s in range(0, cfg.inner_steps + 1, cfg.segment_steps)
        ],
        "residual_in_hash": None,
        "residual_out_hash": None,
    }
    body.update(overrides)
    return body


def publish(
    store, runtime, hotkey, manifest: bytes, blob: bytes | None, segments: int | None = None
) -> Announcement:
    """The miner's manifest and blob in its store, and its anchor claiming `segments` (by default the
    segments the manifest claims, as an honest miner announces them)."""
    store.put(manifest_key(runtime.run_id, WINDOW, hotkey), manifest)
    if blob is not None:
        store.put_blob(blob)
    claimed = segments or claimed_segments(manifest)
    return Announcement(
        store_url=store.url,
        window=WINDOW,
        manifest_sha256=hashlib.sha256(manifest).hexdigest(),
        segments=claimed,
    )


def claimed_segments(manifest: bytes) -> int:
    """The segments a signed manifest claims (1 for bytes that are no manifest)."""
    try:
        return max(1, len(json.loads(manifest)["body"]["boundaries"]) - 1)
    except (ValueError, KeyError, TypeError):
        return 1


def check(
    runtime,
    model,
    store,
    announcement,
    hotkey=MINER.ss58_address,
    start_hash=None,
    challenged=False,
    behind=False,
):
    registered = {MINER.ss58_address, THIEF.ss58_address}
    basis = WindowBasis(
        runtime=runtime,
        number=WINDOW,
        base=model,
        inputs=challenge_inputs(runtime.config, "0x" + "00" * 32, WINDOW, [hotkey]),
        miners=(hotkey,),
        shares={},
        announcements={hotkey: announcement},
        is_registered=lambda hk: hk in registered,
        start_hash=start_hash,
        behind=behind,
    )
    return check_miner(basis, hotkey, 1, store, challenged=challenged)


def test_honest_update_passes(runtime, model, tmp_path):
    store = FileStore(tmp_path)
    blob, meta = update_blob(runtime, model)
    manifest = sign_document(MINER, manifest_body(runtime, model, blob, meta, MINER.ss58_address))
    verdict = check(runtime, model, store, publish(store, runtime, MINER.ss58_address, manifest, blob))
    assert verdict.passed, verdict.verdicts
    assert set(verdict.update) == set(model.params)


def test_fewer_whole_segments_than_h_pass(runtime, model, tmp_path):
    """A miner whose time ran out commits the whole segments it trained."""
    store = FileStore(tmp_path)
    blob, meta = update_blob(runtime, model)
    body = manifest_body(runtime, model, blob, meta, MINER.ss58_address)
    k = runtime.config.train.segment_steps
    body["losses"], body["boundaries"] = body["losses"][:k], body["boundaries"][:2]
    manifest = sign_document(MINER, body)
    verdict = check(runtime, model, store, publish(store, runtime, MINER.ss58_address, manifest, blob))
    assert verdict.passed, verdict.verdicts
    assert verdict.manifest.steps == k and verdict.manifest.n_segments == 1


@pytest.mark.parametrize("anchored", [1, 3])
def test_a_manifest_claiming_other_segments_than_its_anchor_is_fraud(runtime, model, tmp_path, anchored):
    """The challenge is drawn from the claim on chain (`windows.extra_runs`): a manifest that claims
    more than its anchor would be paid for segments the draw never weighed, and one that claims
    less could have dodged the draw it owed."""
    store = FileStore(tmp_path)
    blob, meta = update_blob(runtime, model)
    manifest = sign_document(MINER, manifest_body(runtime, model, blob, meta, MINER.ss58_address))
    claimed = runtime.config.train.n_segments
    assert anchored != claimed
    announcement = publish(store, runtime, MINER.ss58_address, manifest, blob, segments=anchored)
    verdict = check(runtime, model, store, announcement)
    assert (
        verdict.fraud
        and f"claims {claimed} segments where its anchor on chain claims {anchored}"
        in (verdict.verdicts["consistency"])
    )


@pytest.mark.parametrize(
    ("case", "check_name", "words"),
    [
        ("no manifest", "manifest", "not fetched"),
        ("tampered after commit", "manifest", "hash_mismatch"),
        ("signed by another key", "manifest", "wrong_signer"),
        ("wrong window", "manifest", "wrong_window"),
        ("pickle", "manifest", "pickle"),
        ("other base", "consistency", "another base model"),
        ("more steps than H", "consistency", "does not cover"),
        ("a part of a segment", "consistency", "does not cover"),
        ("a split that does not divide the batch", "consistency", "3 rank(s) of 1 micro-batches"),
        ("no blob", "update", "no key"),
        ("garbage blob", "update", "malformed_safetensors"),
        ("wrong size", "update", "the manifest says"),
        ("blob of an earlier window", "update", "wrong_owner"),
        ("not from the window's start", "consistency", "boundary 0"),
    ],
)
def test_bad_input_becomes_a_named_verdict(runtime, model, tmp_path, case, check_name, words):
    store = FileStore(tmp_path)
    blob, meta = update_blob(runtime, model)
    hk = MINER.ss58_address
    body = manifest_body(runtime, model, blob, meta, hk)
    signer = MINER
    publish_blob: bytes | None = blob
    if case == "signed by another key":
        signer = THIEF
    elif case == "wrong window":
        body["window"] = WINDOW + 1
    elif case == "other base":
        body["base_hash"] = "cd" * 32
    elif case == "more steps than H":
        k = runtime.config.train.segment_steps
        body["losses"] = body["losses"] + [3.0] * k
        body["boundaries"] = body["boundaries"] + [{**body["boundaries"][-1], "step": len(body["losses"])}]
    elif case == "a part of a segment":
        body["losses"] = body["losses"][:-1]
        body["boundaries"] = body["boundaries"][:-1] + [
            {**body["boundaries"][-1], "step": len(body["losses"])}
        ]
    elif case == "a split that does not divide the batch":
        body["ranks"] = 3
    elif case == "no blob":
        publish_blob = None
    elif case == "garbage blob":
        garbage = b"\x10\x00\x00\x00\x00\x00\x00\x00not a header at all"
        body["update"] = {
            **body["update"],
            "sha256": hashlib.sha256(garbage).hexdigest(),
            "size": len(garbage),
        }
        publish_blob = garbage
    elif case == "wrong size":
        body["update"] = {**body["update"], "size": len(blob) + 1}
    elif case == "blob of an earlier window":
        publish_blob, _ = update_blob(runtime, model, window=WINDOW - 1)
        body["update"] = {
            **body["update"],
            "sha256": hashlib.sha256(publish_blob).hexdigest(),
            "size": len(publish_blob),
        }
    manifest = sign_document(signer, body)
    if case == "pickle":
        manifest = pickle.dumps(body)
    announcement = publish(store, runtime, hk, manifest, publish_blob)
    if case == "no manifest":
        store.delete(manifest_key(runtime.run_id, WINDOW, hk))
    if case == "tampered after commit":
        store.put(
            manifest_key(runtime.run_id, WINDOW, hk), sign_document(MINER, {**body, "micro_batches": 2})
        )
    verdict = check(
        runtime, model, store, announcement, start_hash=START if case.startswith("not from") else None
    )
    assert not verdict.passed
    assert verdict.verdicts[check_name] != PASS
    assert words in verdict.verdicts[check_name], verdict.verdicts
    assert verdict.fraud == (case not in ("no manifest", "no blob")), case


@pytest.mark.parametrize("behind", [False, True], ids=["with the network", "behind"])
def test_a_manifest_on_another_base_is_fraud_unless_this_validator_may_be_behind(
    runtime, model, tmp_path, behind
):
    """A validator that passed over an aggregate out of reach cannot tell whether the miner or itself
    has the network's model: it does not judge the miner (no score, no bar)."""
    store = FileStore(tmp_path)
    blob, meta = update_blob(runtime, model)
    body = {**manifest_body(runtime, model, blob, meta, MINER.ss58_address), "base_hash": "cd" * 32}
    announcement = publish(store, runtime, MINER.ss58_address, sign_document(MINER, body), blob)
    verdict = check(runtime, model, store, announcement, behind=behind)
    assert not verdict.passed
    assert verdict.fraud is not behind and verdict.unmeasured is behind
    words = "not judged: trained from model cdcdcdcdcd" if behind else "another base model"
    assert words in verdict.verdicts["consistency"], verdict.verdicts


def test_a_missing_update_is_fraud_only_for_a_challenged_miner(runtime, model, tmp_path):
    store = FileStore(tmp_path)
    blob, meta = update_blob(runtime, model)
    manifest = sign_document(MINER, manifest_body(runtime, model, blob, meta, MINER.ss58_address))
    announcement = publish(store, runtime, MINER.ss58_address, manifest, None)
    assert not check(runtime, model, store, announcement, challenged=False).fraud
    assert check(runtime, model, store, announcement, challenged=True).fraud


def test_a_copied_update_names_the_miner_it_was_copied_from(runtime, model, tmp_path):
    store = FileStore(tmp_path)
    blob, meta = update_blob(runtime, model)
    original = sign_document(MINER, manifest_body(runtime, model, blob, meta, MINER.ss58_address))
    assert check(runtime, model, store, publish(store, runtime, MINER.ss58_address, original, blob)).passed
    copied = sign_document(THIEF, manifest_body(runtime, model, blob, meta, THIEF.ss58_address))
    announcement = publish(store, runtime, THIEF.ss58_address, copied, blob)
    verdict = check(runtime, model, store, announcement, THIEF.ss58_address)
    assert verdict.fraud and "wrong_owner" in verdict.verdicts["update"]
    assert MINER.ss58_address in verdict.verdicts["update"]


def test_identical_updates_fail_for_the_later_committer(runtime, model, tmp_path):
    store = FileStore(tmp_path)
    blob, meta = update_blob(runtime, model)
    manifest = sign_document(MINER, manifest_body(runtime, model, blob, meta, MINER.ss58_address))
    first = check(runtime, model, store, publish(store, runtime, MINER.ss58_address, manifest, blob))
    second = dataclasses.replace(first, hotkey=THIEF.ss58_address, uid=2, verdicts=dict(first.verdicts))
    verdicts = [first, second]
    flag_copies(verdicts, {MINER.ss58_address: 10, THIEF.ss58_address: 11})
    assert verdicts[0].passed
    assert not verdicts[1].passed and "identical" in verdicts[1].verdicts["copy"]


def test_what_was_not_there_at_the_reveal_deadline_never_counts(runtime, model, tmp_path):
    store = FileStore(tmp_path)
    stores = StoreCache(lambda url: store)
    blob, meta = update_blob(runtime, model)
    manifest = sign_document(MINER, manifest_body(runtime, model, blob, meta, MINER.ss58_address))
    announcement = publish(store, runtime, MINER.ss58_address, manifest, None)
    inventory = take_inventory(
        stores, runtime.run_id, WINDOW, {MINER.ss58_address: announcement}, 1 << 20, lambda: 42
    )
    store.put_blob(blob)
    at_deadline = AtDeadline(store, announcement.store_url, inventory, deadline=40)
    assert check(runtime, model, store, announcement).passed
    for challenged in (False, True):
        verdict = check(runtime, model, at_deadline, announcement, challenged=challenged)
        why = verdict.verdicts["update"]
        assert "not in the store at the reveal deadline (block 40; listed at block 42)" in why, why
        assert "arrived later, which does not count" in why
        assert verdict.fraud == challenged

    on_time = take_inventory(
        stores, runtime.run_id, WINDOW, {MINER.ss58_address: announcement}, 1 << 20, lambda: 40
    )
    assert check(runtime, model, AtDeadline(store, announcement.store_url, on_time, 40), announcement).passed


def test_what_a_store_down_at_the_reveal_deadline_lacked_when_it_came_back_is_asked_again(
    runtime, model, tmp_path
):
    """An outage over the reveal deadline held up the miner's uploads too: a key absent when the store
    is first listed after it is not an answer yet (unread, tried again, settled at the read patience)."""
    store = FileStore(tmp_path)
    stores = StoreCache(lambda url: store)
    blob, meta = update_blob(runtime, model)
    manifest = sign_document(MINER, manifest_body(runtime, model, blob, meta, MINER.ss58_address))
    announcement = publish(store, runtime, MINER.ss58_address, manifest, None)
    miners, url = {MINER.ss58_address: announcement}, announcement.store_url
    at_deadline = Inventory(40, {url: frozenset()}, frozenset({url}))
    came_back = at_deadline.merged(
        take_inventory(stores, runtime.run_id, WINDOW, miners, 1 << 20, lambda: 42)
    )
    for challenged in (False, True):
        verdict = check(
            runtime, model, AtDeadline(store, url, came_back, 40), announcement, challenged=challenged
        )
        assert verdict.unread and not verdict.fraud, verdict.verdicts
        assert "answered after an outage over the reveal deadline" in verdict.verdicts["update"]

    store.put_blob(blob)  # the miner's upload, held up by the outage, lands
    again = came_back.merged(take_inventory(stores, runtime.run_id, WINDOW, miners, 1 << 20, lambda: 43))
    assert check(runtime, model, AtDeadline(store, url, again, 40), announcement, challenged=True).passed


def test_a_split_coarser_than_the_run_s_is_refused(runtime, model, tmp_path):
    """A miner may split its batch further than the run config, never less: the validator's memory is
    planned for the run's micro-batches, and it replays the miner's."""
    train = runtime.config.train.model_copy(update={"micro_batches": 2})
    strict = dataclasses.replace(runtime, config=runtime.config.model_copy(update={"train": train}))
    store = FileStore(tmp_path)
    blob, meta = update_blob(runtime, model)
    hk = MINER.ss58_address
    for micro_batches, passed in ((1, False), (2, True), (4, True)):
        body = manifest_body(runtime, model, blob, meta, hk, micro_batches=micro_batches)
        verdict = check(strict, model, store, publish(store, runtime, hk, sign_document(MINER, body), blob))
        assert verdict.passed == passed, verdict.verdicts
    assert (
        "1 micro-batches are not a multiple of the run's 2"
        in check(
            strict,
            model,
            store,
            publish(
                store, runtime, hk, sign_document(MINER, manifest_body(runtime, model, blob, meta, hk)), blob
            ),
        ).verdicts["consistency"]
    )
