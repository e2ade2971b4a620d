"""Findings (validators/findings.py): a validator that catches a miner of its share publishes a
signed finding; another validator reads it from the first one's store, re-checks it by replaying
the miner from its own view of the window, and adopts it when the re-check confirms it or refutes
it when it does not. The miner's side is the project's own inner loop and reveal
(tests/test_validator_replay.py); the stores are real file stores."""

from __future__ import annotations

import dataclasses

import pytest
from bittensor.keyfiles import Keypair
from support.short_windows import short_windows
from test_validator_replay import CONFIG, MINER, OTHER, WINDOW, publish, train, verify, window_basis

from distrai.chain.base import Commitment, Metagraph, Neuron
from distrai.protocol.announce import Announcement
from distrai.protocol.globalmodel import GlobalModel
from distrai.protocol.layout import finding_key, findings_prefix, trajectory_key
from distrai.protocol.run import load_run_config
from distrai.protocol.runtime import build_runtime
from distrai.protocol.sync import StoreCache
from distrai.store import FileStore
from distrai.train.outer import OuterState
from distrai.wire import sha256_hex, sign_document
from distrai.wire.window_documents import Finding
from validators import held_window as holding
from validators.checks import MinerVerdict
from validators.findings import (
    ADOPTED,
    NOT_RECHECKED,
    REFUTED,
    finding_body,
    publish_findings,
    read_findings,
    recheck,
)
from validators.held_window import HeldWindow
from validators.published import OthersWindow, publishing_validators

CATCHER = Keypair.create_from_uri("//Catcher")
CHECKER = Keypair.create_from_uri("//Checker")
BLOCK_HASH = "0x" + "5e" * 32


@pytest.fixture(scope="module")
def runtime():
    """The adversary config's run, its windows 4 one-step segments (`short_windows`)."""
    return build_runtime(short_windows(load_run_config(CONFIG)))


@pytest.fixture(scope="module")
def model(runtime):
    return GlobalModel(WINDOW, runtime.initial_params(), OuterState(momentum={}))


def signed_manifest(verdict: MinerVerdict) -> MinerVerdict:
    """The verdict with its manifest as the miner signed and committed it."""
    verdict.manifest_bytes = sign_document(
        Keypair.create_from_uri("//ReplayMiner"), verdict.manifest.model_dump()
    )
    return verdict


def basis_of(runtime, model, store, verdict, shares=None):
    """The window as the checks read it, the miner's manifest committed from `store`."""
    announcement = Announcement(
        store_url=store.url,
        window=WINDOW,
        manifest_sha256=sha256_hex(verdict.manifest_bytes),
        segments=verdict.manifest.n_segments,
    )
    return window_basis(runtime, model, BLOCK_HASH, shares=shares or {}, announcements={MINER: announcement})


def held_window(runtime, model, store, verdict, shares) -> HeldWindow:
    """What a validator keeps of the window: its own verdict on the miner, without the decoded update."""
    store.put_blob(verdict.blob)
    held = holding.held_window(basis_of(runtime, model, store, verdict, shares), [verdict], {MINER: store})
    assert held.verdicts[MINER].update is None and verdict.update is not None
    return held


def fresh(verdict: MinerVerdict) -> MinerVerdict:
    """The verdict as a validator that did not replay the miner holds it: its cheap checks only."""
    return dataclasses.replace(verdict, verdicts=dict(verdict.verdicts), numbers={}, fraud=False)


@pytest.fixture
def cheat(runtime, model, tmp_path):
    """A miner that trained on another miner's data, its reveal in its store, and the catcher's verdict."""
    store = FileStore(tmp_path / "miner")
    cheap = signed_manifest(publish(runtime, store, train(runtime, model, data_of=OTHER)))
    caught = verify(runtime, model, store, fresh(cheap))
    assert caught.fraud and "replay" in caught.verdicts
    return store, cheap, caught


def published_findings(runtime, model, tmp_path, miner_store, caught, shares):
    """The catcher publishes its findings in its own store; the checker reads them back."""
    catcher_store = FileStore(tmp_path / "catcher")
    held = held_window(runtime, model, miner_store, caught, shares)
    published = publish_findings(
        runtime, held, CATCHER, lambda key, data: catcher_store.put(key, data) or True
    )
    others = {CATCHER.ss58_address: catcher_store.url}
    found = read_findings(
        OthersWindow(StoreCache(), others, runtime.run_id, WINDOW, 1 << 20, lambda hk: True)
    )
    return published, found, catcher_store


def test_a_catch_is_published_with_its_evidence_and_adopted_after_a_re_check(runtime, model, tmp_path, cheat):
    miner_store, cheap, caught = cheat
    shares = {CATCHER.ss58_address: [MINER], CHECKER.ss58_address: []}
    published, found, catcher_store = published_findings(
        runtime, model, tmp_path, miner_store, caught, shares
    )
    assert published == 1
    assert catcher_store.list(findings_prefix(runtime.run_id, WINDOW, CATCHER.ss58_address)) == [
        finding_key(runtime.run_id, WINDOW, CATCHER.ss58_address, MINER)
    ]
    (finding,) = found
    assert finding.miner == MINER and finding.check == "replay" and "another state" in finding.reason
    assert finding.manifest_sha256 == sha256_hex(cheap.manifest_bytes)
    assert finding.store_url == miner_store.url
    assert all(key.startswith(f"runs/{runtime.run_id[:16]}/") for key in finding.evidence)
    # the checker never replayed the miner: its own verdict holds the cheap checks only
    result = recheck(
        runtime, held_window(runtime, model, miner_store, fresh(cheap), shares), finding, StoreCache()
    )
    assert result.outcome == ADOPTED, result
    assert result.validator == CATCHER.ss58_address and "another state" in result.reason


def test_a_false_finding_is_refuted_and_names_its_author(runtime, model, tmp_path):
    miner_store = FileStore(tmp_path / "miner")
    cheap = signed_manifest(publish(runtime, miner_store, train(runtime, model)))
    accused = fresh(cheap).fail("replay", "segment 1 replayed to another state than the committed one")
    shares = {CATCHER.ss58_address: [MINER], CHECKER.ss58_address: []}
    published, (finding,), _ = published_findings(runtime, model, tmp_path, miner_store, accused, shares)
    assert published == 1
    result = recheck(
        runtime, held_window(runtime, model, miner_store, fresh(cheap), shares), finding, StoreCache()
    )
    assert result.outcome == REFUTED and result.validator == CATCHER.ss58_address, result
    assert "every replay check passed" in result.reason


def test_a_miner_that_deletes_its_evidence_before_the_re_check_is_adopted(runtime, model, tmp_path, cheat):
    miner_store, cheap, caught = cheat
    shares = {CATCHER.ss58_address: [MINER], CHECKER.ss58_address: []}
    _, (finding,), _ = published_findings(runtime, model, tmp_path, miner_store, caught, shares)
    miner_store.delete(trajectory_key(runtime.run_id, WINDOW, MINER))
    result = recheck(
        runtime, held_window(runtime, model, miner_store, fresh(cheap), shares), finding, StoreCache()
    )
    assert result.outcome == ADOPTED and "was not revealed" in result.reason, result


def test_findings_outside_the_share_or_about_another_manifest_are_not_adopted(
    runtime, model, tmp_path, cheat
):
    miner_store, cheap, caught = cheat
    not_its_share = {CATCHER.ss58_address: [], CHECKER.ss58_address: [MINER]}
    body = finding_body(basis_of(runtime, model, miner_store, caught), CATCHER.ss58_address, caught, [0])
    finding = Finding.model_validate(body)
    held = held_window(runtime, model, miner_store, fresh(cheap), not_its_share)
    assert recheck(runtime, held, finding, StoreCache()).outcome == NOT_RECHECKED
    shares = {CATCHER.ss58_address: [MINER]}
    other = Finding.model_validate({**body, "manifest_sha256": "00" * 32})
    held = held_window(runtime, model, miner_store, fresh(cheap), shares)
    assert recheck(runtime, held, other, StoreCache()).outcome == REFUTED
    with pytest.raises(ValueError, match="failed no replay check"):
        finding_body(basis_of(runtime, model, miner_store, cheap), CATCHER.ss58_address, fresh(cheap), [0])


def test_a_finding_signed_by_another_key_or_under_another_key_name_is_not_read(
    runtime, model, tmp_path, cheat
):
    miner_store, _, caught = cheat
    catcher_store = FileStore(tmp_path / "catcher")
    body = finding_body(basis_of(runtime, model, miner_store, caught), CATCHER.ss58_address, caught, [0])
    prefix = findings_prefix(runtime.run_id, WINDOW, CATCHER.ss58_address)
    catcher_store.put(prefix + f"{MINER}.json", sign_document(CHECKER, body))  # not the catcher's signature
    catcher_store.put(
        prefix + f"{OTHER}.json", sign_document(CATCHER, body)
    )  # names another miner than its key
    catcher_store.put(prefix + "garbage.json", b"\x80\x04not json")
    others = OthersWindow(
        StoreCache(),
        {CATCHER.ss58_address: catcher_store.url},
        runtime.run_id,
        WINDOW,
        1 << 20,
        lambda hk: True,
    )
    assert read_findings(others) == []
    catcher_store.put(prefix + f"{MINER}.json", sign_document(CATCHER, body))
    assert len(read_findings(others)) == 1


def test_findings_are_read_from_every_validator_with_a_permit_anchored_in_time_or_not(runtime):
    """A validator whose aggregate landed after the deadline (or that anchored none) has still caught
    what it caught: its findings are read and re-checked like the others'. A hotkey without a
    permit, or with no store announced, publishes none that count."""

    def neuron(uid: int, hotkey: str, permit: bool) -> Neuron:
        return Neuron(uid, hotkey, "cold", 10.0, permit, 0, 0)

    late = Announcement(store_url="file:///late", window=WINDOW, aggregate_sha256="a" * 64)
    commitments = {
        "in-time": Commitment(
            "in-time",
            Announcement(store_url="file:///a", window=WINDOW, aggregate_sha256="b" * 64).encode(),
            50,
        ),
        "late": Commitment("late", late.encode(), 400),
        "no-aggregate": Commitment("no-aggregate", Announcement(store_url="file:///c").encode(), 3),
        "miner": Commitment(
            "miner",
            Announcement(store_url="file:///m", window=WINDOW, manifest_sha256="c" * 64, segments=1).encode(),
            40,
        ),
        "garbled": Commitment("garbled", "not an announcement", 5),
    }
    permits = {
        "in-time": True,
        "late": True,
        "no-aggregate": True,
        "miner": False,
        "garbled": True,
        "silent": True,
    }
    mg = Metagraph(
        netuid=1,
        block=500,
        neurons=tuple(neuron(uid, hk, permit) for uid, (hk, permit) in enumerate(permits.items())),
        commitments=commitments,
    )
    publishers = publishing_validators(mg)
    assert publishers == {"in-time": "file:///a", "late": late.store_url, "no-aggregate": "file:///c"}
    # and a validator does not read its own documents
    others = OthersWindow.of(runtime, StoreCache(), mg, WINDOW, "late")
    assert set(others.urls) == {"in-time", "no-aggregate"} and others.window == WINDOW
    assert others.is_registered("miner") and not others.is_registered("stranger")
