"""A miner started right after its registration trains the first window whose roster holds it.

A window's miners are the hotkeys registered at its roster block, the block before it starts
(`windows.roster_block`): data is dealt over that list. A miner that registers inside window w is
not on w's roster, so it must not set out to train w (its batches cannot be dealt: it used to end in
`ValueError: hotkey … is not among the window's miners` and a traceback); it trains w + 1 and says
so once. The embedded chain's clock moves only when the test moves it."""

from __future__ import annotations

import logging

import pytest
from support.local_harness import make_local_harness
from test_validator_outage import CONFIG

from distrai.node.seat import Seat
from distrai.protocol.run import load_run_config
from distrai.protocol.runtime import build_runtime
from distrai.protocol.windows import roster_block, window_start
from distrai.store import FileStore
from miners.miner import Miner, MinerOptions

WINDOW = 4


def miner_registered_at(tmp_path, offset: int) -> tuple[Miner, object]:
    """A miner registered `offset` blocks after WINDOW's start (negative: before it), and the
    harness, its clock at the window's second block."""
    config = load_run_config(CONFIG)
    harness = make_local_harness(tmp_path)
    start = window_start(config.windows, WINDOW)
    harness.advance(start + offset - harness.local.block())
    wallet = harness.new_wallet("latecomer")
    harness.chain.register(wallet)
    harness.advance(max(start + 1, harness.local.block() + 1) - harness.local.block())
    store = FileStore(tmp_path / "store")
    miner = Miner(
        Seat(build_runtime(config), harness.chain, wallet, store, store.url), MinerOptions(tmp_path / "m")
    )
    return miner, harness


@pytest.mark.parametrize("offset", [0, 1])
def test_a_miner_registered_in_a_window_trains_the_next_and_says_so_once(tmp_path, caplog, offset):
    miner, harness = miner_registered_at(tmp_path, offset)
    assert miner.hotkey not in miner.window_miners(WINDOW)
    assert (
        miner.hotkey in miner.chain.registrations()
    )  # registered now: window WINDOW + 1's roster will hold it
    with caplog.at_level(logging.INFO, logger="distrai.miner"):
        assert miner.next_window() == WINDOW + 1
        assert miner.next_window() == WINDOW + 1
    said = [r.getMessage() for r in caplog.records if "not trained" in r.getMessage()]
    assert said == [
        f"window {WINDOW}: not trained: this hotkey registered after its miners were read "
        f"(block {roster_block(miner.windows, WINDOW)}); window {WINDOW + 1} is the first whose roster holds it"
    ]


def test_a_miner_registered_before_the_window_trains_it(tmp_path):
    miner, _ = miner_registered_at(tmp_path, -1)  # in the roster block itself
    assert miner.next_window() == WINDOW
