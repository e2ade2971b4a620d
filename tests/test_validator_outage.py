"""A validator whose reads of a challenged reveal meet a store outage (`Validator.check_window`,
docs/protocol.md "Withheld reveals"): a store back before the read patience costs its miner
nothing, even when the validator's first pass of reads ends after the patience (it was late, or the
reads were slow), and a store that still does not answer is withheld, as before.

Two miners train, commit and reveal a window of the adversary config (every miner challenged), each
into its own real file store; the validator's clock moves only when the test moves it, one block per
wait and a few blocks per miner read in the first pass."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest
from support.local_harness import make_local_harness

from distrai.run import load_run_config
from distrai.runtime import build_runtime
from distrai.store import FileStore
from distrai.windows import commit_deadline, read_patience, reveal_deadline, window_start
from miners.miner import Miner, MinerOptions
from miners.uploader import Uploader
from validators.validator import Validator, ValidatorOptions

CONFIG = Path(__file__).parent / "support" / "adversary-localnet.toml"
WINDOW = 3
SLOW_READ_BLOCKS = 6  # blocks one miner's reads take in the first pass: two miners end it after the patience


@pytest.fixture(scope="module")
def config():
    return load_run_config(CONFIG)


class Ticking(threading.Event):
    """The validator's stop event on a chain whose clock is frozen: every wait is one block."""

    def __init__(self, harness):
        super().__init__()
        self.harness = harness

    def wait(self, timeout=None) -> bool:
        self.harness.advance(1)
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


@pytest.fixture
def revealed(tmp_path, config):
    """Two miners that revealed WINDOW in time, each into its own store, and a validator at the
    window's reveal deadline."""
    harness = make_local_harness(tmp_path)
    validator_wallet = harness.new_wallet("validator")
    harness.chain.register(validator_wallet)
    harness.add_stake(validator_wallet, 1000.0)
    wallets = [harness.new_wallet(name) for name in ("alpha", "beta")]
    for wallet in wallets:
        harness.chain.register(wallet)
    harness.advance(harness.chain.hyperparameters().tempo + 2)
    harness.advance(window_start(config.windows, WINDOW) - harness.local.block())
    stores, miners = {}, []
    for wallet in wallets:
        store = FileStore(tmp_path / f"store-{wallet.name}")
        miner = Miner(
            build_runtime(config),
            harness.chain,
            wallet,
            store,
            store.url,
            MinerOptions(tmp_path / f"miner-{wallet.name}"),
        )
        miner.uploader = Uploader(miner, harness.chain.connect_again())
        miner.run_window(WINDOW, stop=None)
        stores[miner.hotkey] = store
        miners.append(miner)
    harness.advance(commit_deadline(config.windows, WINDOW) + 1 - harness.local.block())
    for miner in miners:
        result = miner.uploader.upload(miner.uploader.jobs.get())
        assert result is not None and not result.late
    harness.advance(reveal_deadline(config.windows, WINDOW) - harness.local.block())
    validator_store = FileStore(tmp_path / "store-validator")
    validator = Validator(
        build_runtime(config),
        harness.chain,
        validator_wallet,
        validator_store,
        validator_store.url,
        ValidatorOptions(tmp_path / "validator"),
    )
    return harness, validator, stores


def slow_first_pass(harness, validator, store_back) -> list[tuple[str, int]]:
    """Make each miner's reads in the validator's first pass take SLOW_READ_BLOCKS blocks; at the
    block before the read patience `store_back()` is called. Returns every read as (hotkey, block)."""
    patience = read_patience(validator.windows, WINDOW)
    check = validator.check_miner
    reads = []

    def slow(view, hotkey, uid, mg, replay=True):
        reads.append((hotkey, harness.local.block()))
        result = check(view, hotkey, uid, mg, replay=replay)
        if not replay:  # the first pass
            for _ in range(SLOW_READ_BLOCKS):
                harness.advance(1)
                if harness.local.block() == patience - 1:
                    store_back()
        return result

    validator.check_miner = slow
    return reads


def test_a_store_back_before_the_read_patience_costs_nothing_when_the_first_pass_ends_after_it(revealed):
    harness, validator, stores = revealed
    alpha = min(stores)  # read first
    away = cut(stores[alpha])
    reads = slow_first_pass(harness, validator, lambda: restore(stores[alpha], away))

    assert validator.run_window(WINDOW, Ticking(harness))

    patience = read_patience(validator.windows, WINDOW)
    first_pass_end = reveal_deadline(validator.windows, WINDOW) + len(stores) * SLOW_READ_BLOCKS
    assert first_pass_end > patience
    again = [block for hotkey, block in reads if hotkey == alpha][1:]
    assert again and again[0] > patience, "the validator did not ask the silent store again"
    verdict = validator.held.verdicts[alpha]
    assert verdict.passed and not verdict.withheld, verdict.verdicts
    assert alpha not in validator.state.banned_until


def test_a_store_still_silent_after_the_one_more_pass_is_withheld(revealed):
    harness, validator, stores = revealed
    alpha = min(stores)
    cut(stores[alpha])  # a withholding miner: its store never answers
    reads = slow_first_pass(harness, validator, lambda: None)

    assert validator.run_window(WINDOW, Ticking(harness))

    assert len([hotkey for hotkey, _ in reads if hotkey == alpha]) == 2, "one more pass, not more"
    verdict = validator.held.verdicts[alpha]
    assert verdict.withheld and verdict.fraud, verdict.verdicts
    assert alpha in validator.state.banned_until
    other = max(stores)
    assert validator.held.verdicts[other].passed and other not in validator.state.banned_until
