"""The embedded chain's SQLite file: schema, connections and write transactions.

Many processes open the same file. WAL mode lets readers run beside the one writer; every
write runs in `BEGIN IMMEDIATE`, so two processes never interleave a read-modify-write.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

SCHEMA = """
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS blocks (number INTEGER PRIMARY KEY, hash TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS accounts (ss58 TEXT PRIMARY KEY, nonce INTEGER NOT NULL);
CREATE TABLE IF NOT EXISTS owners (hotkey TEXT PRIMARY KEY, coldkey TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS subnets (
    netuid INTEGER PRIMARY KEY,
    hyperparameters TEXT NOT NULL,
    owner_coldkey TEXT NOT NULL,
    emission_per_block REAL NOT NULL,
    owner_cut REAL NOT NULL,
    owner_emission REAL NOT NULL DEFAULT 0,
    burned REAL NOT NULL DEFAULT 0,
    last_epoch_block INTEGER NOT NULL
);
CREATE TABLE IF NOT EXISTS neurons (
    netuid INTEGER NOT NULL, uid INTEGER NOT NULL, hotkey TEXT NOT NULL, coldkey TEXT NOT NULL,
    registered_at INTEGER NOT NULL, last_update INTEGER NOT NULL,
    validator_permit INTEGER NOT NULL DEFAULT 0,
    rank REAL NOT NULL DEFAULT 0, trust REAL NOT NULL DEFAULT 0, consensus REAL NOT NULL DEFAULT 0,
    validator_trust REAL NOT NULL DEFAULT 0, incentive REAL NOT NULL DEFAULT 0,
    dividends REAL NOT NULL DEFAULT 0, emission REAL NOT NULL DEFAULT 0,
    PRIMARY KEY (netuid, uid), UNIQUE (netuid, hotkey)
);
CREATE TABLE IF NOT EXISTS stake (
    netuid INTEGER NOT NULL, hotkey TEXT NOT NULL, amount REAL NOT NULL, PRIMARY KEY (netuid, hotkey)
);
CREATE TABLE IF NOT EXISTS earnings (
    netuid INTEGER NOT NULL, hotkey TEXT NOT NULL, amount REAL NOT NULL, PRIMARY KEY (netuid, hotkey)
);
CREATE TABLE IF NOT EXISTS weights (
    netuid INTEGER NOT NULL, uid INTEGER NOT NULL, dest INTEGER NOT NULL, value INTEGER NOT NULL,
    PRIMARY KEY (netuid, uid, dest)
);
CREATE TABLE IF NOT EXISTS bonds (
    netuid INTEGER NOT NULL, uid INTEGER NOT NULL, dest INTEGER NOT NULL, value REAL NOT NULL,
    PRIMARY KEY (netuid, uid, dest)
);
CREATE TABLE IF NOT EXISTS commitments (
    netuid INTEGER NOT NULL, hotkey TEXT NOT NULL, data TEXT NOT NULL, block INTEGER NOT NULL,
    PRIMARY KEY (netuid, hotkey)
);
CREATE TABLE IF NOT EXISTS registrations (
    netuid INTEGER NOT NULL, block INTEGER NOT NULL, count INTEGER NOT NULL, PRIMARY KEY (netuid, block)
);
CREATE TABLE IF NOT EXISTS extrinsics (
    id INTEGER PRIMARY KEY AUTOINCREMENT, block INTEGER NOT NULL, signer TEXT NOT NULL,
    call TEXT NOT NULL, ok INTEGER NOT NULL, error TEXT
);
"""


def connect(path: Path) -> sqlite3.Connection:
    conn = sqlite3.connect(str(path), timeout=60.0, isolation_level=None, check_same_thread=False)
    conn.execute("PRAGMA busy_timeout = 60000")
    conn.execute("PRAGMA journal_mode = WAL")
    conn.execute("PRAGMA synchronous = NORMAL")
    return conn


@contextmanager
def write_transaction(conn: sqlite3.Connection) -> Iterator[sqlite3.Connection]:
    """One atomic write: all of it lands, or (on any exception) none of it."""
    conn.execute("BEGIN IMMEDIATE")
    try:
        yield conn
    except BaseException:
        conn.execute("ROLLBACK")
        raise
    conn.execute("COMMIT")


def get_meta(conn: sqlite3.Connection, key: str) -> str:
    row = conn.execute("SELECT value FROM meta WHERE key = ?", (key,)).fetchone()
    if row is None:
        raise KeyError(key)
    return row[0]
