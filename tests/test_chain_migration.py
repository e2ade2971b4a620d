"""Chain files written before schema version 1 open, and are brought up to date, safely."""

from __future__ import annotations

import multiprocessing as mp
import sqlite3
from pathlib import Path

from support.local_harness import make_local_harness

from distrai.chain.local import LocalChain
from distrai.chain.local_db import SCHEMA_VERSION

VERSION_1_ADDITIONS = """
DROP TABLE commitment_history;
DROP TABLE neuron_history;
DROP TABLE weight_commits;
ALTER TABLE subnets DROP COLUMN owner_hotkey;
ALTER TABLE subnets DROP COLUMN owner_hotkey_set_block;
PRAGMA user_version = 0;
"""
"""What version 1 added; taking it away leaves a file as version 0 wrote it."""


def version_0_chain(tmp_path: Path):
    """A chain with a registered miner and a commitment, rewritten as a version-0 file."""
    h = make_local_harness(tmp_path)
    miner = h.new_wallet("miner")
    h.chain.register(miner)
    h.advance(2)
    h.chain.commit(miner, "s3://bucket/miner")
    committed = h.chain.block()
    h.advance(3)
    with sqlite3.connect(h.local.path) as db:
        db.executescript(VERSION_1_ADDITIONS)
    return h.local.path, miner.hotkey.ss58_address, committed


def columns(path: Path) -> list[str]:
    with sqlite3.connect(path) as db:
        return [row[1] for row in db.execute("PRAGMA table_info(subnets)")]


def test_a_version_0_file_opens_with_its_history_started_from_its_present(tmp_path):
    path, hotkey, committed = version_0_chain(tmp_path)
    chain = LocalChain(path, 1)
    assert chain.subnet_owner_hotkey() == ""
    assert columns(path).count("owner_hotkey") == 1
    # The latest commitment and the registrations of version 0 begin the history.
    assert {h: c.data for h, c in chain.commitments(committed).items()} == {hotkey: "s3://bucket/miner"}
    assert chain.commitments(committed - 1) == {}
    assert chain.registrations(0) == {hotkey: 0}
    with sqlite3.connect(path) as db:
        assert db.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION
    again = LocalChain(path, 1)
    assert again.commitments(committed) == chain.commitments(committed)


def open_chain(path: str, ready, results) -> None:
    ready.wait()
    chain = LocalChain(path, 1)
    results.put(sorted(chain.registrations()))


def test_processes_opening_a_version_0_file_together_migrate_it_once(tmp_path):
    path, hotkey, committed = version_0_chain(tmp_path)
    ctx = mp.get_context("spawn")
    ready, results = ctx.Event(), ctx.Queue()
    procs = [ctx.Process(target=open_chain, args=(str(path), ready, results)) for _ in range(3)]
    for p in procs:
        p.start()
    ready.set()
    for p in procs:
        p.join(timeout=120)
    assert [p.exitcode for p in procs] == [0, 0, 0]
    assert [results.get(timeout=5) for _ in procs] == [[hotkey]] * 3
    assert columns(path).count("owner_hotkey") == 1
    with sqlite3.connect(path) as db:
        assert db.execute("SELECT COUNT(*) FROM commitment_history").fetchone()[0] == 1
        assert db.execute("SELECT COUNT(*) FROM neuron_history").fetchone()[0] == 1
