"""The copycat adversary copies an update that could be paid: one the run's size and codec rules
let through. Copying the first committed update, whatever it was, made the local network's copycat
fail the consistency check (an oversized update) instead of the update check that catches copies,
whenever an oversized miner's hotkey sorted first."""

from __future__ import annotations

import json

from support.local_harness import make_local_harness
from test_miner_reveals import CONFIG, WINDOW

from distrai.node.seat import Seat
from distrai.protocol.layout import manifest_key
from distrai.protocol.run import load_run_config
from distrai.protocol.runtime import build_runtime
from distrai.protocol.windows import window_start
from distrai.store import FileStore
from miners.adversaries import Copycat, Oversize
from miners.miner import Behaviour, Miner, MinerOptions
from miners.uploader import Uploader


def test_the_copycat_copies_an_update_the_run_would_read_not_an_oversized_one(tmp_path):
    config = load_run_config(CONFIG)
    harness = make_local_harness(tmp_path)
    wallets = sorted((harness.new_wallet(f"miner{i}") for i in range(2)), key=lambda w: w.hotkey.ss58_address)
    copier = harness.new_wallet("copycat")
    for wallet in (*wallets, copier):
        harness.chain.register(wallet)
    harness.advance(harness.chain.hyperparameters().tempo + 2)
    harness.advance(window_start(config.windows, WINDOW) - harness.local.block())
    store = FileStore(tmp_path / "store")

    def miner(wallet, behaviour) -> Miner:
        work = tmp_path / wallet.hotkey.ss58_address
        node = Miner(
            Seat(build_runtime(config), harness.chain, wallet, store, store.url),
            MinerOptions(work, behaviour),
        )
        node.uploader = Uploader(node, harness.chain.connect_again())
        return node

    oversized, honest = wallets  # the oversized update's hotkey sorts first
    for wallet, behaviour in ((oversized, Oversize()), (honest, Behaviour())):
        miner(wallet, behaviour).run_window(WINDOW, stop=None)
    committed = harness.chain.metagraph().commitments
    assert {oversized.hotkey.ss58_address, honest.hotkey.ss58_address} <= set(committed)

    copied = Copycat().find_victim(miner(copier, Copycat()), WINDOW)
    assert copied is not None
    assert copied.size <= config.limits.max_update_bytes
    run_id = build_runtime(config).run_id
    published = json.loads(store.get(manifest_key(run_id, WINDOW, honest.hotkey.ss58_address), 1 << 20))
    assert copied.sha256 == published["body"]["update"]["sha256"]
