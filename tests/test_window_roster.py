"""Every node deals a window's data over one miner list: the hotkeys registered at the window's roster
block (`distrai.protocol.windows.roster_block`), whenever in the window the node reads it."""

from __future__ import annotations

from pathlib import Path

from support.local_harness import make_local_harness

from distrai.node.seat import Seat
from distrai.protocol.run import load_run_config
from distrai.protocol.runtime import build_runtime
from distrai.protocol.windows import reveal_deadline, roster_block, window_start
from distrai.store import FileStore
from distrai.train.assignment import batch_indices
from miners.miner import Miner, MinerOptions
from validators.validator import Validator, ValidatorOptions

CONFIG = Path(__file__).parent / "support" / "adversary-localnet.toml"
WINDOW = 2


def test_roster_block_is_the_block_before_the_window():
    windows = load_run_config(CONFIG).windows
    assert roster_block(windows, 0) == 0
    assert roster_block(windows, WINDOW) == window_start(windows, WINDOW) - 1


def test_a_registration_in_a_windows_first_block_leaves_every_nodes_assignment_alike(tmp_path):
    config = load_run_config(CONFIG)
    h = make_local_harness(tmp_path)
    wallets = {name: h.new_wallet(name) for name in ("validator", "miner", "other", "newcomer")}
    for name in ("validator", "miner", "other"):
        h.chain.register(wallets[name])
    store = FileStore(tmp_path / "store")
    runtime = build_runtime(config)
    miner = Miner(Seat(runtime, h.chain, wallets["miner"], store, store.url), MinerOptions(tmp_path / "m"))
    validator = Validator(
        Seat(runtime, h.chain, wallets["validator"], store, store.url), ValidatorOptions(tmp_path / "v")
    )
    h.advance(window_start(config.windows, WINDOW) - h.local.block())

    miner_list = miner.window_miners(WINDOW)  # the miner reads as the window starts
    h.chain.register(wallets["newcomer"])  # and a registration lands in the window's first block
    assert h.local.block() == window_start(config.windows, WINDOW)
    h.advance(reveal_deadline(config.windows, WINDOW) - h.local.block())
    validator_list = validator.note_miners(WINDOW).miners  # the validator reads it later

    newcomer = wallets["newcomer"].hotkey.ss58_address
    assert miner_list == validator_list and newcomer not in validator_list
    assert newcomer in miner.window_miners(WINDOW + 1)

    def assignment(miners: list[str]) -> list[int]:
        data = runtime.data
        return [
            int(i)
            for step in range(config.train.inner_steps)
            for i in batch_indices(
                runtime.run_id,
                WINDOW,
                miner.hotkey,
                step,
                config.train.batch_size,
                data.n_train,
                miners,
                data.unit,
            )
        ]

    assert assignment(miner_list) == assignment(validator_list)
