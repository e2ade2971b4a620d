"""Several processes share one embedded chain and one store at once; nothing is lost or corrupted."""

from __future__ import annotations

import hashlib
import multiprocessing as mp
import sqlite3
from pathlib import Path

from distrai.chain.base import Hyperparameters
from distrai.chain.local import LocalChain
from distrai.node.wallets import create_dev_wallet, open_wallet
from distrai.store import open_store

WORKERS = 4
BLOBS_PER_WORKER = 6
HP = Hyperparameters(
    tempo=6,
    max_uids=16,
    max_validators=8,
    immunity_period=100,
    weights_rate_limit=2,
    activity_cutoff=10_000,
    max_registrations_per_block=1,
)


def payload(worker: int, i: int) -> bytes:
    return hashlib.sha256(f"{worker}:{i}".encode()).digest() * (1000 + 37 * i)


def worker(index: int, chain_path: str, store_url: str, wallet_path: str) -> None:
    chain = LocalChain(chain_path)
    store = open_store(store_url)
    wallet = open_wallet(f"w{index}", "default", wallet_path)
    uid = chain.register(wallet)
    chain.add_stake(wallet, 10.0 + index)
    digests = [store.put_blob(payload(index, i)) for i in range(BLOBS_PER_WORKER)]
    complete_values = {f"{i}".encode() * 1000 for i in range(WORKERS)}
    for _ in range(20):
        store.put("shared/last-writer", f"{index}".encode() * 1000)
        if store.get("shared/last-writer", 1 << 20) not in complete_values:
            raise AssertionError("a reader saw a partial or foreign value")
    chain.commit(wallet, f"{store_url}#{','.join(d[:8] for d in digests)}")
    chain.wait_for_block(chain.block() + 2 * HP.tempo + 2, timeout=60)
    while not chain.metagraph().neurons[uid].validator_permit or chain.metagraph().n < WORKERS:
        chain.wait_for_block(chain.block() + 1, timeout=60)
    others = [u for u in chain.metagraph().uids if u != uid]
    chain.set_weights(wallet, others, [1.0] * len(others))


def test_four_processes_share_chain_and_store(tmp_path: Path):
    chain = LocalChain.create(tmp_path / "chain.db", block_time=0.2, hyperparameters=HP)
    store_url = f"file://{tmp_path / 'store'}"
    wallet_path = str(tmp_path / "wallets")
    for i in range(WORKERS):
        create_dev_wallet(f"w{i}", "default", wallet_path)
    ctx = mp.get_context("spawn")
    procs = [
        ctx.Process(target=worker, args=(i, str(chain.path), store_url, wallet_path)) for i in range(WORKERS)
    ]
    for p in procs:
        p.start()
    for p in procs:
        p.join(timeout=240)
    assert [p.exitcode for p in procs] == [0] * WORKERS

    mg = chain.metagraph()
    hotkeys = {open_wallet(f"w{i}", "default", wallet_path).hotkey.ss58_address for i in range(WORKERS)}
    assert set(mg.hotkeys) == hotkeys and sorted(mg.uids) == list(range(WORKERS))
    assert sorted(n.stake for n in mg.neurons) == [10.0, 11.0, 12.0, 13.0]
    store = open_store(store_url)
    for i in range(WORKERS):
        for j in range(BLOBS_PER_WORKER):
            data = payload(i, j)
            assert store.get_blob(hashlib.sha256(data).hexdigest(), 1 << 20) == data
    last = store.get("shared/last-writer", 1 << 20)
    assert last in {f"{i}".encode() * 1000 for i in range(WORKERS)}
    commitments = chain.commitments()
    assert set(commitments) == hotkeys
    weights = chain.weights()
    assert sorted(weights) == list(range(WORKERS))
    for uid, row in weights.items():
        assert sorted(row) == [u for u in range(WORKERS) if u != uid]
    with sqlite3.connect(chain.path) as db:
        calls = dict(
            db.execute("SELECT call, COUNT(*) FROM extrinsics WHERE ok = 1 GROUP BY call").fetchall()
        )
    assert calls == {
        "burned_register": WORKERS,
        "add_stake": WORKERS,
        "set_commitment": WORKERS,
        "set_weights": WORKERS,
    }
