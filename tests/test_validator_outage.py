"""A validator that meets a store outage.

- Its reads of a challenged reveal (`Validator.check_window`, docs/protocol.md "Withheld reveals"):
  a store back before the read patience costs its miner nothing, even when the validator's first
  pass of reads ends after the patience (it was late, or the reads were slow), and a store that
  still does not answer is withheld, as before.
- Its own store, when it publishes the window's report, accepted updates and aggregate
  (`OwnStore.put`): tried again through the outage until the aggregate's anchor could no longer
  land before the aggregate deadline (`publish_until`), the outage logged once when it starts and
  once when it ends.

Two miners train, commit and reveal a window of the adversary config (every miner challenged; its
window here 4 one-step segments), each into its own real file store; the validator's clock moves
only when the test moves it, one block per wait and a few blocks per miner read in the first pass."""

from __future__ import annotations

import contextlib
import json
import logging
import sqlite3
import threading
from pathlib import Path

import pytest
from support.io_errors import serve_again, serve_io_errors
from support.local_harness import LocalHarness, make_local_harness
from support.short_windows import short_windows

from distrai.chain.local import LocalChain
from distrai.node.seat import Seat
from distrai.protocol.announce import anchored_aggregates
from distrai.protocol.layout import aggregate_key, report_key, window_prefix
from distrai.protocol.run import load_run_config
from distrai.protocol.runtime import build_runtime
from distrai.protocol.sync import StoreCache
from distrai.protocol.windows import (
    aggregate_deadline,
    commit_deadline,
    read_patience,
    reveal_deadline,
    window_start,
)
from distrai.store import FileStore, RetryPolicy, open_store
from miners.miner import Miner, MinerOptions
from miners.uploader import Uploader
from validators.own_store import publish_until
from validators.validator import Validator, ValidatorOptions
from validators.window_check import MinerReads

CONFIG = Path(__file__).parent / "support" / "adversary-localnet.toml"
WINDOW = 3
SLOW_READ_BLOCKS = 6  # blocks one miner's reads take in the first pass: two miners end it after the patience


@pytest.fixture(scope="module")
def config():
    """The adversary config with windows of 4 one-step segments (`short_windows`): what is under test
    is how the validator reads through outages."""
    return short_windows(load_run_config(CONFIG))


class Ticking(threading.Event):
    """The validator's stop event on a chain whose clock is frozen: every wait is one block, and
    `at[block]()` is called when the clock reaches that block."""

    def __init__(self, harness, at: dict | None = None):
        super().__init__()
        self.harness = harness
        self.at = dict(at or {})

    def wait(self, timeout=None) -> bool:
        self.harness.advance(1)
        event = self.at.pop(self.harness.local.block(), None)
        if event is not None:
            event()
        return self.is_set()


def cut(store: FileStore) -> Path:
    """Make the store's root unreachable (ELOOP on every path); returns where it was moved."""
    away = store.root.with_name(store.root.name + ".away")
    store.root.rename(away)
    store.root.symlink_to(store.root)
    return away


def restore(store: FileStore, away: Path) -> None:
    store.root.unlink()
    away.rename(store.root)


def train(
    root: Path, config, store_of: dict[str, str], absent: tuple[str, ...] = (), until: int | None = None
):
    """Miners (name → the name of its store folder) that revealed WINDOW in time: the chain's
    harness, at block `until` (by default the reveal deadline), and each miner's store by hotkey.
    `absent` names validators that hold a permit and stake beside the test's, and never run."""
    harness = make_local_harness(root)
    for name in ("validator", *absent):
        validator_wallet = harness.new_wallet(name)
        harness.chain.register(validator_wallet)
        harness.add_stake(validator_wallet, 1000.0)
    wallets = [harness.new_wallet(name) for name in store_of]
    for wallet in wallets:
        harness.chain.register(wallet)
    harness.advance(harness.chain.hyperparameters().tempo + 2)
    harness.advance(window_start(config.windows, WINDOW) - harness.local.block())
    stores, miners, opened = {}, [], {}
    for wallet in wallets:
        folder = store_of[wallet.name]
        store = opened.setdefault(folder, FileStore(root / f"store-{folder}"))
        miner = Miner(
            Seat(build_runtime(config), harness.chain, wallet, store, store.url),
            MinerOptions(root / f"miner-{wallet.name}"),
        )
        miner.uploader = Uploader(miner, harness.chain.connect_again())
        miner.run_window(WINDOW, stop=None)
        stores[miner.hotkey] = store
        miners.append(miner)
    harness.advance(commit_deadline(config.windows, WINDOW) + 1 - harness.local.block())
    for miner in miners:
        result = miner.uploader.upload(miner.uploader.jobs.get())
        assert result is not None and not result.late
    harness.advance((until or reveal_deadline(config.windows, WINDOW)) - harness.local.block())
    return harness, stores


@pytest.fixture(scope="module")
def trained(module_folders, config):
    """Two miners that revealed WINDOW in time, each into its own store (trained once for the
    module: the validators of the tests read these stores and never write to them)."""
    return train(module_folders("trained"), config, {"alpha": "alpha", "beta": "beta"})


def at_the_reveal_deadline(tmp_path, config, trained, stores: StoreCache | None = None):
    """The trained miners' chain, copied, with a validator at the window's reveal deadline."""
    original, _ = trained
    copy = tmp_path / "chain.db"
    with (
        contextlib.closing(sqlite3.connect(original.local.path)) as src,
        contextlib.closing(sqlite3.connect(copy)) as dst,
    ):
        src.backup(dst)
    chain = LocalChain(copy, original.local.netuid)
    harness = LocalHarness(chain, chain, original.wallet_path, original.owner_coldkey, original.owner_hotkey)
    validator_store = FileStore(tmp_path / "store-validator")
    validator = Validator(
        Seat(
            build_runtime(config),
            harness.chain,
            harness.new_wallet("validator"),
            validator_store,
            validator_store.url,
            stores=stores,
        ),
        ValidatorOptions(tmp_path / "validator"),
    )
    return harness, validator, validator_store


@pytest.fixture
def revealed(tmp_path, config, trained):
    """The trained miners' chain, copied for this test, with a validator at the window's reveal
    deadline; a miner store a test cut is put back afterwards."""
    stores = trained[1]
    harness, validator, validator_store = at_the_reveal_deadline(tmp_path, config, trained)
    yield harness, validator, stores, validator_store
    for store in stores.values():
        away = store.root.with_name(store.root.name + ".away")
        if away.exists():
            restore(store, away)


def slow_first_pass(harness, validator, store_back, monkeypatch) -> list[tuple[str, int]]:
    """Make each miner's reads in the validator's first pass take SLOW_READ_BLOCKS blocks; at the
    block before the read patience `store_back()` is called. Returns every read as (hotkey, block)."""
    patience = read_patience(validator.windows, WINDOW)
    check = MinerReads.check
    reads = []

    def slow(self, view, hotkey, uid, replay=True):
        reads.append((hotkey, harness.local.block()))
        result = check(self, view, hotkey, uid, replay=replay)
        if not replay:  # the first pass
            for _ in range(SLOW_READ_BLOCKS):
                harness.advance(1)
                if harness.local.block() == patience - 1:
                    store_back()
        return result

    monkeypatch.setattr(MinerReads, "check", slow)
    return reads


def test_a_store_back_before_the_read_patience_costs_nothing_when_the_first_pass_ends_after_it(
    revealed, monkeypatch
):
    harness, validator, stores, _ = revealed
    alpha = min(stores)  # read first
    away = cut(stores[alpha])
    reads = slow_first_pass(harness, validator, lambda: restore(stores[alpha], away), monkeypatch)

    assert validator.run_window(WINDOW, Ticking(harness))

    patience = read_patience(validator.windows, WINDOW)
    first_pass_end = reveal_deadline(validator.windows, WINDOW) + len(stores) * SLOW_READ_BLOCKS
    assert first_pass_end > patience
    again = [block for hotkey, block in reads if hotkey == alpha][1:]
    assert again and again[0] > patience, "the validator did not ask the silent store again"
    verdict = validator.held.verdicts[alpha]
    assert verdict.passed and not verdict.withheld, verdict.verdicts
    assert alpha not in validator.state.banned_until


def test_a_store_still_silent_after_the_one_more_pass_is_withheld(revealed, monkeypatch):
    harness, validator, stores, _ = revealed
    alpha = min(stores)
    cut(stores[alpha])  # a withholding miner: its store never answers
    reads = slow_first_pass(harness, validator, lambda: None, monkeypatch)

    assert validator.run_window(WINDOW, Ticking(harness))

    assert len([hotkey for hotkey, _ in reads if hotkey == alpha]) == 2, "one more pass, not more"
    verdict = validator.held.verdicts[alpha]
    assert verdict.withheld and verdict.fraud, verdict.verdicts
    assert alpha in validator.state.banned_until
    other = max(stores)
    assert validator.held.verdicts[other].passed and other not in validator.state.banned_until


@pytest.fixture(scope="module")
def revealing(module_folders, config):
    """Two miners that committed WINDOW and revealed it, each into its own store, the chain in the
    reveal phase two blocks after the commit deadline."""
    until = commit_deadline(config.windows, WINDOW) + 2
    return train(module_folders("revealing"), config, {"alpha": "alpha", "beta": "beta"}, until=until)


@pytest.mark.parametrize("lands", [True, False], ids=["honest, held up", "withholder"])
def test_an_outage_that_ends_just_before_the_reveal_deadline_is_not_withholding(
    tmp_path, config, revealing, lands
):
    """alpha's store is out from the reveal phase's second block to the block before the deadline,
    and its reveal, held up by the outage, lands at the block after (or, from a withholder, never).
    The validator's probes through the reveal phase saw the outage: the honest miner passes, the
    withholder is still barred at the read patience."""
    harness, validator, _ = at_the_reveal_deadline(tmp_path, config, revealing)
    stores = revealing[1]
    alpha = min(stores)
    store = stores[alpha]
    reveal = store.root / window_prefix(validator.rt.run_id, WINDOW)
    held = reveal.rename(tmp_path / "held-up")
    away = cut(store)
    deadline = reveal_deadline(validator.windows, WINDOW)
    try:
        validator.wait_noting_miners(
            deadline, Ticking(harness, {deadline - 1: lambda: restore(store, away)}), probe=WINDOW
        )
        assert validator.pending.load(WINDOW).probe_failed == {store.url: deadline - 2}
        arrival = {deadline + 1: lambda: held.rename(reveal)} if lands else {}
        assert validator.run_window(WINDOW, Ticking(harness, arrival))
    finally:
        if (store.root.with_name(store.root.name + ".away")).exists():
            restore(store, away)
        if held.exists():
            held.rename(reveal)
    verdict = validator.held.verdicts[alpha]
    if lands:
        assert verdict.passed and not verdict.fraud, verdict.verdicts
        assert alpha not in validator.state.banned_until
    else:
        assert verdict.withheld and verdict.fraud, verdict.verdicts
        assert alpha in validator.state.banned_until
    beta = max(stores)
    assert validator.held.verdicts[beta].passed and beta not in validator.state.banned_until


def cut_when_publishing(validator, store: FileStore) -> list:
    """Cut the validator's own store as it starts publishing the window; returns where it went."""
    publishing, away = validator.own_store.until_aggregate, []

    def cut_then_publish(windows, w, stop):
        away.append(cut(store))
        return publishing(windows, w, stop)

    validator.own_store.until_aggregate = cut_then_publish
    return away


def anchored(harness, validator) -> dict:
    deadline = aggregate_deadline(validator.windows, WINDOW)
    harness.advance(max(0, deadline - harness.local.block()))
    commitments = harness.chain.commitments(block=deadline - 1)
    return anchored_aggregates(commitments, WINDOW, lambda block: block < deadline)


def outage_lines(caplog) -> list[str]:
    return [r.getMessage() for r in caplog.records if "reports and aggregates" in r.getMessage()]


def test_the_last_block_to_publish_leaves_the_anchor_time_to_land(config):
    deadline = aggregate_deadline(config.windows, WINDOW)
    assert publish_until(config.windows, WINDOW, inclusion_blocks=1) == deadline - 1
    assert publish_until(config.windows, WINDOW, inclusion_blocks=3) == deadline - 3


def test_a_validator_publishes_through_an_outage_of_its_own_store_that_ends_in_time(revealed, caplog):
    harness, validator, _, store = revealed
    away = cut_when_publishing(validator, store)
    back = publish_until(validator.windows, WINDOW, harness.chain.inclusion_blocks) - 2
    stop = Ticking(harness, {back: lambda: restore(store, away[0])})

    with caplog.at_level(logging.WARNING, logger="distrai.validator"):
        assert validator.run_window(WINDOW, stop)

    assert back not in stop.at, "the store did not come back while the validator was still trying"
    assert store.exists(report_key(validator.rt.run_id, WINDOW, validator.hotkey))
    assert store.exists(aggregate_key(validator.rt.run_id, WINDOW, validator.hotkey))
    assert validator.hotkey in anchored(harness, validator), "the aggregate was not anchored in time"
    lines = outage_lines(caplog)
    assert len(lines) == 2, lines
    assert "is out of reach" in lines[0] and "answered again after" in lines[1]


def test_a_validator_stops_publishing_when_its_aggregate_could_no_longer_count(revealed, caplog):
    harness, validator, _, store = revealed
    away = cut_when_publishing(validator, store)

    with caplog.at_level(logging.WARNING, logger="distrai.validator"):
        assert validator.run_window(WINDOW, Ticking(harness))

    assert harness.local.block() >= publish_until(validator.windows, WINDOW, harness.chain.inclusion_blocks)
    assert harness.local.block() < aggregate_deadline(validator.windows, WINDOW) + 2, (
        "it tried on past the deadline"
    )
    restore(store, away[0])
    assert not store.exists(aggregate_key(validator.rt.run_id, WINDOW, validator.hotkey))
    assert validator.hotkey not in anchored(harness, validator)
    lines = outage_lines(caplog)
    assert len(lines) == 2, lines
    assert "is out of reach" in lines[0] and "not tried any more" in lines[1]


# A store that gives up in an outage within a pass of reads (`distrai.store.breaker`): three miners
# share one store, a fourth has its own; the stores' objects answer reads with EIO, a transient error
# the stores retry (without waiting here: the retries are counted by their log lines, not timed).

NO_WAIT = RetryPolicy(attempts=5, base_delay_s=0.0, max_delay_s=0.0)
RETRY_LOGGER = "distrai.store.retry"


@pytest.fixture(scope="module")
def trained_shared(module_folders, config):
    """Three miners that revealed WINDOW into one store, and one into its own."""
    folders = {"gamma": "shared", "delta": "shared", "epsilon": "shared", "zeta": "zeta"}
    return train(module_folders("trained-shared"), config, folders)


@pytest.fixture
def shared(tmp_path, config, trained_shared):
    """A validator at the reveal deadline of the miners of `trained_shared`, whose reads of their
    stores retry without waiting; the objects of a store a test makes fail are put back afterwards."""
    stores = trained_shared[1]
    no_wait = StoreCache(lambda url: open_store(url, create=False, retry=NO_WAIT))
    harness, validator, _ = at_the_reveal_deadline(tmp_path, config, trained_shared, no_wait)
    failing: dict[Path, Path] = {}

    def fail(store: FileStore) -> None:
        failing[store.root] = serve_io_errors(store.root)

    def back(store: FileStore) -> None:
        serve_again(store.root, failing.pop(store.root))

    yield harness, validator, stores, fail, back
    for root, away in failing.items():
        serve_again(root, away)


def read_blocks(validator, monkeypatch) -> list[tuple[str, int]]:
    """Every miner the validator reads, with the block: the first pass's reads are at one block, and
    each pass of asking again at a block of its own."""
    check, reads = MinerReads.check, []

    def recorded(self, view, hotkey, uid, replay=True):
        reads.append((hotkey, validator.chain.block()))
        return check(self, view, hotkey, uid, replay=replay)

    monkeypatch.setattr(MinerReads, "check", recorded)
    return reads


def exhausted(caplog) -> int:
    """Store operations that spent all their retries."""
    last = f"retry {NO_WAIT.attempts - 1} of {NO_WAIT.attempts - 1}"
    return sum(r.name == RETRY_LOGGER and last in r.getMessage() for r in caplog.records)


def test_a_pass_over_several_miners_on_a_store_in_an_outage_spends_one_operations_retries(
    shared, caplog, monkeypatch
):
    harness, validator, stores, fail, _ = shared
    sharing = sorted(hk for hk, store in stores.items() if list(stores.values()).count(store) == 3)
    fail(stores[sharing[0]])
    reads = read_blocks(validator, monkeypatch)

    with caplog.at_level(logging.DEBUG, logger=RETRY_LOGGER):
        assert validator.run_window(WINDOW, Ticking(harness))

    # The listing at the deadline gives up on the store after one manifest read; the first pass then
    # leaves its miners unread (their store's listing did not finish), and each pass of asking again
    # lists it again and gives up after one read.
    asked_again = len({block for _, block in reads}) - 1
    assert asked_again >= 2, "the validator did not ask the silent store again"
    assert exhausted(caplog) == 1 + asked_again, "one operation's retries a pass, not one a miner"
    for hotkey in sharing:  # unread: three of four miners' stores silent reads as this validator's outage
        verdict = validator.held.verdicts[hotkey]
        assert not verdict.passed and not verdict.fraud, verdict.verdicts
    (other,) = set(stores) - set(sharing)
    assert validator.held.verdicts[other].passed, "the store of another miner was read in full"


def test_a_miners_dead_store_does_not_stop_the_reads_of_another_store(shared, caplog):
    harness, validator, stores, fail, _ = shared
    (alone,) = [hk for hk, store in stores.items() if list(stores.values()).count(store) == 1]
    fail(stores[alone])  # a withholding miner: its store never serves the reveal

    with caplog.at_level(logging.DEBUG, logger=RETRY_LOGGER):
        assert validator.run_window(WINDOW, Ticking(harness))

    for hotkey in set(stores) - {alone}:
        assert validator.held.verdicts[hotkey].passed, validator.held.verdicts[hotkey].verdicts
    verdict = validator.held.verdicts[alone]
    assert verdict.withheld and verdict.fraud, verdict.verdicts
    assert alone in validator.state.banned_until


def test_the_next_pass_reads_a_store_that_gave_up_again_and_it_passes_once_back(shared, caplog):
    harness, validator, stores, fail, back = shared
    sharing = sorted(hk for hk, store in stores.items() if list(stores.values()).count(store) == 3)
    store = stores[sharing[0]]
    fail(store)
    start = harness.local.block()
    stop = Ticking(harness, {start + 1: lambda: back(store)})  # back by the first pass of asking again

    with caplog.at_level(logging.DEBUG, logger=RETRY_LOGGER):
        assert validator.run_window(WINDOW, stop)

    assert start + 1 not in stop.at, "the store did not come back while the validator was asking"
    assert exhausted(caplog) == 1, "the listing gave up after one operation; the next pass read it all"
    for hotkey in stores:
        verdict = validator.held.verdicts[hotkey]
        assert verdict.passed and not verdict.withheld, verdict.verdicts
        assert hotkey not in validator.state.banned_until


# A validator down for the window (`validators.measuring`): the updates of its share of the shared
# scoring are measured by nobody else, so the validator that is up measures them itself.


@pytest.fixture(scope="module")
def trained_beside_an_absent_validator(module_folders, config):
    """Two miners that revealed WINDOW in time, and a second permitted validator that never runs:
    the scoring deals one miner to each of the two validators."""
    folders = {"eta": "eta", "theta": "theta"}
    return train(module_folders("trained-absent"), config, folders, absent=("absent",))


def test_the_scoring_share_of_a_validator_that_is_down_is_measured_by_the_one_that_is_up(
    tmp_path, config, trained_beside_an_absent_validator, caplog
):
    harness, validator, store = at_the_reveal_deadline(tmp_path, config, trained_beside_an_absent_validator)
    absent = harness.new_wallet("absent").hotkey.ss58_address
    miners = set(trained_beside_an_absent_validator[1])
    with caplog.at_level(logging.WARNING, logger="distrai.validator"):
        assert validator.run_window(WINDOW, Ticking(harness))

    said = [r.getMessage() for r in caplog.records]
    assert any(f"no measurements from {absent[:10]}" in line for line in said), said
    assert any("measuring here 1 passed updates nobody else measured in time" in line for line in said), said
    report = json.loads(store.get(report_key(validator.rt.run_id, WINDOW, validator.hotkey), 1 << 20))["body"]
    assert report["measured_by"] == dict.fromkeys(sorted(miners), validator.hotkey)
    assert report["workers"] == [validator.hotkey], "the absent validator did none of its share"
    for hotkey in miners:
        verdict = validator.held.verdicts[hotkey]
        assert verdict.passed and not verdict.unmeasured and verdict.score > 0, verdict.verdicts
