"""Withheld reveals (validators/withheld.py): a challenged miner whose store will not serve what it
committed to gains nothing by it. The miner's side is the project's own inner loop and reveal
(tests/test_validator_replay.py); its store is a real file store that answers the reads of the
challenged reveal with a service error, as an S3 endpoint under a miner's control can (a 503).

- Unread after the validator's patience, a challenged miner's reveal is withheld: fraud, published
  as a finding, and adopted by a validator that cannot read it either.
- Read one window later, what is there is judged on its content: an honest reveal lifts the bar (the
  window's pay is all an honest miner whose store was down loses), a cheat's fails its replay.
- A miner nobody challenged is only absent, and a validator that hears from most miners' stores
  nothing blames its own link, not them."""

from __future__ import annotations

import dataclasses

import pytest
from bittensor.keyfiles import Keypair
from support.short_windows import short_windows
from test_validator_replay import CONFIG, MINER, OTHER, WINDOW, Window, publish, train, window_basis

from distrai.protocol.announce import Announcement
from distrai.protocol.globalmodel import GlobalModel
from distrai.protocol.layout import manifest_key, states_prefix, trajectory_key
from distrai.protocol.run import load_run_config
from distrai.protocol.runtime import build_runtime
from distrai.protocol.sync import StoreCache
from distrai.store import FileStore, StoreError
from distrai.train.inner import window_start_state
from distrai.train.outer import OuterState
from distrai.train.train_state import state_hash
from distrai.wire import sha256_hex, sign_document
from distrai.wire.window_documents import Finding
from validators.checks import check_miner
from validators.findings import ADOPTED, REFUTED, finding_body, recheck
from validators.held_window import held_window
from validators.pay import add_window, mature
from validators.replay_check import verify_challenge
from validators.validator_state import Suspension, ValidatorState
from validators.withheld import after_reread, own_outage, reread, settle

CATCHER = Keypair.create_from_uri("//Catcher")
BLOCK_HASH = "0x" + "77" * 32


class RefusingStore(FileStore):
    """A miner's own store that answers reads of chosen keys with a service error while `refusing`."""

    def __init__(self, root, prefixes: tuple[str, ...]):
        super().__init__(root)
        self.prefixes = prefixes
        self.refusing = True

    def get(self, key: str, max_bytes: int) -> bytes:
        if self.refusing and key.startswith(self.prefixes):
            raise StoreError(f"s3 get {key!r} failed: 503 Service Unavailable (SlowDown)")
        return super().get(key, max_bytes)


@pytest.fixture(scope="module")
def runtime():
    """The adversary config's run, its windows 4 one-step segments (`short_windows`)."""
    return build_runtime(short_windows(load_run_config(CONFIG)))


@pytest.fixture(scope="module")
def model(runtime):
    return GlobalModel(WINDOW, runtime.initial_params(), OuterState(momentum={}))


def published(runtime, model, store, window: Window) -> Announcement:
    """Everything a challenged miner publishes: its signed manifest (anchored: the announcement
    names its hash), its update blob, its revealed states and trajectory reveal."""
    verdict = publish(runtime, store, window)
    body = verdict.manifest.model_copy(update={"base_hash": model.hash}).model_dump()
    manifest = sign_document(Keypair.create_from_uri("//ReplayMiner"), body)
    store.put(manifest_key(runtime.run_id, WINDOW, MINER), manifest)
    store.put_blob(verdict.blob)
    return Announcement(
        store_url=store.url,
        window=WINDOW,
        manifest_sha256=sha256_hex(manifest),
        segments=verdict.manifest.n_segments,
    )


def first_look(runtime, model, store, announcement):
    """The validator of the miner's share: cheap checks, then the challenged segments."""
    runtime.load_params(model.params)
    start = state_hash(window_start_state(runtime.model))
    basis = window_basis(runtime, model, BLOCK_HASH, announcements={MINER: announcement}, start_hash=start)
    verdict = check_miner(basis, MINER, 1, store, challenged=True)
    assert verdict.passed, verdict.verdicts
    segments = basis.segments(MINER, verdict.manifest.n_segments)
    verify_challenge(basis, verdict, store, segments, basis.sample(MINER))
    return verdict, basis.inputs


def basis_of(runtime, model, announcement, shares=None):
    """The window as the checks read it, the miner committed as `announcement` says."""
    return window_basis(runtime, model, BLOCK_HASH, shares=shares or {}, announcements={MINER: announcement})


def held(runtime, model, verdict, store, announcement, shares):
    return held_window(basis_of(runtime, model, announcement, shares), [verdict], {MINER: store})


def withheld_window(runtime, model, tmp_path, window: Window):
    store = RefusingStore(
        tmp_path / "miner",
        (states_prefix(runtime.run_id, WINDOW, MINER), trajectory_key(runtime.run_id, WINDOW, MINER)),
    )
    announcement = published(runtime, model, store, window)
    verdict, inputs = first_look(runtime, model, store, announcement)
    return store, announcement, verdict, inputs


def test_a_challenged_reveal_its_store_will_not_serve_is_withheld(runtime, model, tmp_path):
    store, announcement, verdict, inputs = withheld_window(runtime, model, tmp_path, train(runtime, model))
    assert verdict.unread and not verdict.fraud, verdict.verdicts  # not decided before the patience ends
    assert "503" in verdict.verdicts["states"]
    settle(verdict, challenged=True, outage=False, patience_block=123)
    assert verdict.withheld and verdict.fraud and not verdict.unread
    assert verdict.reason.startswith("states: withheld:") and "block 123" in verdict.reason
    body = finding_body(basis_of(runtime, model, announcement), CATCHER.ss58_address, verdict, [0, 1, 2, 3])
    finding = Finding.model_validate(body)
    assert finding.withheld
    shares = {CATCHER.ss58_address: [MINER]}
    # another validator, one window later, cannot read it either: it adopts the finding
    checker = held(
        runtime, model, dataclasses.replace(verdict, fraud=False, withheld=False), store, announcement, shares
    )
    stores = StoreCache(lambda url: store)
    result = recheck(runtime, checker, finding, stores)
    assert result.outcome == ADOPTED and "withheld here too" in result.reason, result


def test_an_honest_reveal_read_a_window_late_lifts_the_bar(runtime, model, tmp_path):
    store, announcement, verdict, inputs = withheld_window(runtime, model, tmp_path, train(runtime, model))
    settle(verdict, challenged=True, outage=False, patience_block=123)
    store.refusing = False  # the store is back
    window = held(runtime, model, verdict, store, announcement, {CATCHER.ss58_address: [MINER]})
    again = reread(runtime, window, MINER, store)
    assert again.passed, again.verdicts
    finding = Finding.model_validate(
        finding_body(basis_of(runtime, model, announcement), CATCHER.ss58_address, verdict, [0, 1, 2, 3])
    )
    result = recheck(runtime, window, finding, StoreCache(lambda url: store))
    assert result.outcome == REFUTED and "is there and passes" in result.reason, result


def test_a_cheat_that_withholds_and_reveals_later_still_fails(runtime, model, tmp_path):
    cheat = train(runtime, model, data_of=OTHER)  # trained on another miner's data
    store, announcement, verdict, inputs = withheld_window(runtime, model, tmp_path, cheat)
    settle(verdict, challenged=True, outage=False, patience_block=123)
    store.refusing = False
    window = held(runtime, model, verdict, store, announcement, {CATCHER.ss58_address: [MINER]})
    again = reread(runtime, window, MINER, store)
    assert again.fraud and "replay" in again.verdicts, again.verdicts
    finding = Finding.model_validate(
        finding_body(basis_of(runtime, model, announcement), CATCHER.ss58_address, verdict, [0, 1, 2, 3])
    )
    result = recheck(runtime, window, finding, StoreCache(lambda url: store))
    assert result.outcome == ADOPTED and "replay" in result.reason, result


def test_unread_is_absent_when_nobody_challenged_and_nothing_when_the_validator_is_cut_off(
    runtime, model, tmp_path
):
    _, _, verdict, _ = withheld_window(runtime, model, tmp_path, train(runtime, model))
    absent = dataclasses.replace(verdict, verdicts=dict(verdict.verdicts))
    settle(absent, challenged=False, outage=False, patience_block=9)
    assert not absent.fraud and not absent.withheld and "unanswered at block 9" in absent.verdicts["states"]
    cut_off = dataclasses.replace(verdict, verdicts=dict(verdict.verdicts))
    settle(cut_off, challenged=True, outage=True, patience_block=9)
    assert not cut_off.fraud and not cut_off.withheld and "not counted against" in cut_off.verdicts["states"]


@pytest.mark.parametrize(
    ("unheard", "announced", "outage"),
    [(0, 5, False), (2, 5, False), (3, 5, True), (1, 1, True), (0, 0, False)],
)
def test_a_validator_blames_its_own_link_when_most_stores_are_silent(unheard, announced, outage):
    assert own_outage(unheard, announced) is outage


def test_the_reread_gives_back_a_sound_miners_bar_and_held_pay_and_forfeits_the_others():
    hotkeys = ["honest", "cheat", "bystander"]
    held = add_window(add_window({}, 5, dict.fromkeys(hotkeys, 4.0)), 6, dict.fromkeys(hotkeys, 0.0))
    state = ValidatorState(
        run_id="run",
        hotkeys=hotkeys,
        averages=[10.0, 8.0, 5.0],
        pending=held,
        banned_until={"honest": 20, "cheat": 20, "bystander": 9},
        suspended={
            "honest": Suspension(window=6, banned_until=-1),
            "cheat": Suspension(window=6, banned_until=-1),
            "bystander": Suspension(window=7, banned_until=4),
        },
    )
    after = after_reread(state, hotkeys, due=["honest", "cheat"], sound=["honest"])
    assert after.averages == [10.0, 0.0, 5.0], "the sound miner keeps its average; the cheat's is zeroed"
    assert after.pending["honest"] == held["honest"], "its held scores mature again, the window withheld at 0"
    assert "cheat" not in after.pending and after.pending["bystander"] == held["bystander"]
    assert after.banned_until == {"cheat": 20, "bystander": 9}
    assert set(after.suspended) == {"bystander"}, "a suspension not yet due stays"
    earlier = after_reread(state, hotkeys, due=["bystander"], sound=["bystander"])
    assert earlier.banned_until["bystander"] == 4 and earlier.averages[2] == 5.0
    # while held, nothing matures and no weight is set on it (`Validator.set_weights` excludes it)
    averages, kept = mature(dict(zip(hotkeys, state.averages, strict=True)), held, 6, 0.5, state.suspended)
    assert averages == dict(zip(hotkeys, state.averages, strict=True)) and kept == held
