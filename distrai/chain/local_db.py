"""The embedded chain's SQLite file: schema, migrations, connections and write transactions.

Many processes open the same file. WAL mode lets readers run beside the one writer; every
write runs in `BEGIN IMMEDIATE`, so two processes never interleave a read-modify-write.
The schema version lives in SQLite's `user_version`; a file written by an older version is
brought up to date by the first process that opens it, inside one write transaction, so
processes opening it together neither migrate twice nor see it half migrated.
"""

from __future__ import annotations

import logging
import sqlite3
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from distrai.chain.base import ChainError

log = logging.getLogger("distrai.chain")

SLOW_LOCK_SECONDS = 2.0
BUSY_TIMEOUT_S = 60.0
"""How long a write waits for another process's lock on the file before it is refused (`ChainLocked`)."""

SCHEMA = """
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS blocks (number INTEGER PRIMARY KEY, hash TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS accounts (ss58 TEXT PRIMARY KEY, nonce INTEGER NOT NULL);
CREATE TABLE IF NOT EXISTS owners (hotkey TEXT PRIMARY KEY, coldkey TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS subnets (
    netuid INTEGER PRIMARY KEY,
    hyperparameters TEXT NOT NULL,
    owner_coldkey TEXT NOT NULL,
    owner_hotkey TEXT NOT NULL DEFAULT '',
    owner_hotkey_set_block INTEGER NOT NULL DEFAULT 0,
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
CREATE TABLE IF NOT EXISTS commitment_history (
    id INTEGER PRIMARY KEY AUTOINCREMENT, netuid INTEGER NOT NULL, hotkey TEXT NOT NULL,
    data TEXT NOT NULL, block INTEGER NOT NULL
);
CREATE INDEX IF NOT EXISTS commitment_history_by_hotkey ON commitment_history (netuid, hotkey, block);
CREATE TABLE IF NOT EXISTS neuron_history (
    netuid INTEGER NOT NULL, uid INTEGER NOT NULL, hotkey TEXT NOT NULL,
    registered_at INTEGER NOT NULL, deregistered_at INTEGER
);
CREATE INDEX IF NOT EXISTS neuron_history_by_hotkey ON neuron_history (netuid, hotkey);
CREATE TABLE IF NOT EXISTS weight_commits (
    id INTEGER PRIMARY KEY AUTOINCREMENT, netuid INTEGER NOT NULL, hotkey TEXT NOT NULL,
    commit_epoch INTEGER NOT NULL, commit_block INTEGER NOT NULL,
    uids TEXT NOT NULL, weight_values TEXT NOT NULL, version_key INTEGER NOT NULL
);
CREATE TABLE IF NOT EXISTS registrations (
    netuid INTEGER NOT NULL, block INTEGER NOT NULL, count INTEGER NOT NULL, PRIMARY KEY (netuid, block)
);
CREATE TABLE IF NOT EXISTS extrinsics (
    id INTEGER PRIMARY KEY AUTOINCREMENT, block INTEGER NOT NULL, signer TEXT NOT NULL,
    call TEXT NOT NULL, ok INTEGER NOT NULL, error TEXT
);
"""


SCHEMA_VERSION = 1
"""1: subnet owner hotkeys, commitment and registration history, sealed weight commits."""
ADDED_COLUMNS = (
    ("subnets", "owner_hotkey", "TEXT NOT NULL DEFAULT ''"),
    ("subnets", "owner_hotkey_set_block", "INTEGER NOT NULL DEFAULT 0"),
)
"""Columns that files of schema version 0 lack; `CREATE TABLE IF NOT EXISTS` cannot add them."""
BACKFILL = (
    "INSERT INTO commitment_history (netuid, hotkey, data, block)"
    " SELECT netuid, hotkey, data, block FROM commitments ORDER BY block",
    "INSERT INTO neuron_history (netuid, uid, hotkey, registered_at)"
    " SELECT netuid, uid, hotkey, registered_at FROM neurons",
)
"""Version 0 kept only the present: its latest commitments and neurons start the history."""


def migrate(conn: sqlite3.Connection) -> None:
    """Create the schema, or bring a file of an older schema version up to date."""
    if conn.execute("PRAGMA user_version").fetchone()[0] >= SCHEMA_VERSION:
        return
    with write_transaction(conn):
        if conn.execute("PRAGMA user_version").fetchone()[0] >= SCHEMA_VERSION:
            return
        had_subnets = conn.execute(
            "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'subnets'"
        ).fetchone()
        for statement in SCHEMA.split(";"):
            if statement.strip():
                conn.execute(statement)
        for table, column, declaration in ADDED_COLUMNS:
            present = {row[1] for row in conn.execute(f"PRAGMA table_info({table})")}
            if column not in present:
                conn.execute(f"ALTER TABLE {table} ADD COLUMN {column} {declaration}")
        if had_subnets:
            for statement in BACKFILL:
                conn.execute(statement)
        conn.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")


def connect(path: Path) -> sqlite3.Connection:
    conn = sqlite3.connect(str(path), timeout=BUSY_TIMEOUT_S, isolation_level=None, check_same_thread=False)
    conn.execute(f"PRAGMA busy_timeout = {int(BUSY_TIMEOUT_S * 1000)}")
    conn.execute("PRAGMA journal_mode = WAL")
    conn.execute("PRAGMA synchronous = NORMAL")
    return conn


@contextmanager
def write_transaction(conn: sqlite3.Connection) -> Iterator[sqlite3.Connection]:
    """One atomic write: all of it lands, or (on any exception) none of it. A write that waited
    seconds for another holder of the file's lock says so in the log; one that waited past
    `BUSY_TIMEOUT_S` is refused (`ChainLocked`), as a node refuses a call it cannot take."""
    asked = time.monotonic()
    try:
        conn.execute("BEGIN IMMEDIATE")
    except sqlite3.OperationalError as exc:
        raise ChainError(
            "ChainLocked",
            f"the embedded chain's file stayed locked by another process for "
            f"{time.monotonic() - asked:.1f} s: {exc}",
        ) from exc
    waited = time.monotonic() - asked
    if waited > SLOW_LOCK_SECONDS:
        log.warning("the embedded chain's file was locked by another process for %.1f s", waited)
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
