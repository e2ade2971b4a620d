"""The embedded chain's reveal of sealed weight commits, run in an epoch block before Yuma.

Subtensor takes weights under commit-reveal as drand-timelocked ciphertext and decrypts them
when the beacon publishes the round they were locked to. The embedded chain runs offline, with
no beacon, so it emulates the lock: it keeps the weights it was sent, exposes them through no
read, and applies them at the epoch subtensor would (`commit_reveal.py`). Until then a copier
sees nothing newer than the weights revealed at the last epoch.

A commit that fails the set-weights rules when it opens is dropped, as subtensor logs and skips
it; the outcome of every reveal is recorded in the `extrinsics` table under the call
`reveal_timelocked_weights`, with subtensor's error name for one that failed.
"""

from __future__ import annotations

import json
import logging
import sqlite3
from dataclasses import dataclass

from distrai.chain import commit_reveal, rules
from distrai.chain.base import ChainError
from distrai.chain.local_calls import apply_weights, subnet_hyperparameters

log = logging.getLogger(__name__)
REVEAL_CALL = "reveal_timelocked_weights"


@dataclass(frozen=True)
class SealedCommit:
    """What anyone may know of a commit before it opens: who, and when (as subtensor's storage shows)."""

    hotkey: str
    commit_epoch: int
    commit_block: int


def sealed_commits(conn: sqlite3.Connection, netuid: int) -> list[SealedCommit]:
    rows = conn.execute(
        "SELECT hotkey, commit_epoch, commit_block FROM weight_commits WHERE netuid = ? ORDER BY id",
        (netuid,),
    ).fetchall()
    return [SealedCommit(*row) for row in rows]


def reveal_weight_commits(conn: sqlite3.Connection, netuid: int, block: int) -> None:
    """Open and apply the commits due in epoch block `block`; drop the expired ones."""
    hp = subnet_hyperparameters(conn, netuid)
    due = commit_reveal.reveal_epoch(rules.epoch_index(block, netuid, hp.tempo), hp.commit_reveal_period)
    rows = conn.execute(
        "SELECT hotkey, uids, weight_values FROM weight_commits WHERE netuid = ? AND commit_epoch = ? ORDER BY id",
        (netuid, due),
    ).fetchall()
    conn.execute("DELETE FROM weight_commits WHERE netuid = ? AND commit_epoch <= ?", (netuid, due))
    for hotkey, uids, values in rows:
        try:
            apply_weights(conn, netuid, hotkey, block, json.loads(uids), json.loads(values))
        except ChainError as exc:
            log.info("weights committed by %s dropped at their reveal: %s", hotkey, exc)
            conn.execute(
                "INSERT INTO extrinsics (block, signer, call, ok, error) VALUES (?, ?, ?, 0, ?)",
                (block, hotkey, REVEAL_CALL, exc.reason),
            )
        else:
            conn.execute(
                "INSERT INTO extrinsics (block, signer, call, ok) VALUES (?, ?, ?, 1)",
                (block, hotkey, REVEAL_CALL),
            )


def earliest_pending_commit_blocks(conn: sqlite3.Connection, netuid: int, block: int) -> dict[str, int]:
    """Per hotkey, the block of its earliest commit that has not expired at `block`.

    Yuma drops a validator's weights to a uid registered after that commit (subtensor's
    commit-reveal column mask)."""
    hp = subnet_hyperparameters(conn, netuid)
    current = rules.epoch_index(block, netuid, hp.tempo)
    earliest: dict[str, int] = {}
    for hotkey, commit_epoch, commit_block in conn.execute(
        "SELECT hotkey, commit_epoch, commit_block FROM weight_commits WHERE netuid = ?", (netuid,)
    ):
        if not commit_reveal.is_commit_expired(commit_epoch, current, hp.commit_reveal_period):
            earliest[hotkey] = min(commit_block, earliest.get(hotkey, commit_block))
    return earliest
