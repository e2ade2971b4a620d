"""The embedded chain's calls: what each signed extrinsic does to the chain file.

Each handler runs inside the write transaction that verified the extrinsic, with the signer's
ss58 address and the block it lands in, and raises `ChainError` with subtensor's error name to
refuse. Call names are subtensor's dispatch names, so an operator sees the same words on either
chain. `apply_weights` is shared with the chain's own reveal of timelocked commits.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Callable
from typing import Any

from distrai.chain import commit_reveal, rules
from distrai.chain.base import ChainError, Hyperparameters
from distrai.chain.signing import Keypair

SN_OWNER_HOTKEY_RATE_LIMIT = 50400
"""Blocks between two changes of a subnet's owner hotkey (subtensor's `DefaultSetSNOwnerHotkeyRateLimit`)."""


def subnet_hyperparameters(conn: sqlite3.Connection, netuid: int) -> Hyperparameters:
    row = conn.execute("SELECT hyperparameters FROM subnets WHERE netuid = ?", (netuid,)).fetchone()
    return Hyperparameters(**json.loads(row[0]))


def uid_of(conn: sqlite3.Connection, netuid: int, hotkey: str) -> int | None:
    row = conn.execute("SELECT uid FROM neurons WHERE netuid = ? AND hotkey = ?", (netuid, hotkey)).fetchone()
    return None if row is None else row[0]


def check_ss58(address: str, reason: str) -> None:
    try:
        Keypair(ss58_address=address)
    except Exception as exc:  # the SDK raises its own types for a malformed address
        raise ChainError(reason, f"{address!r} is not an ss58 address") from exc


def burned_register(conn: sqlite3.Connection, netuid: int, signer: str, block: int, *, hotkey: str) -> int:
    hp = subnet_hyperparameters(conn, netuid)
    check_ss58(hotkey, "BadHotkey")
    owner = conn.execute("SELECT coldkey FROM owners WHERE hotkey = ?", (hotkey,)).fetchone()
    if owner is not None and owner[0] != signer:
        raise ChainError("NonAssociatedColdKey", f"hotkey {hotkey} belongs to another coldkey")
    if uid_of(conn, netuid, hotkey) is not None:
        raise ChainError(
            "HotKeyAlreadyRegisteredInSubNet", f"{hotkey} is already registered on subnet {netuid}"
        )
    count = conn.execute(
        "SELECT count FROM registrations WHERE netuid = ? AND block = ?", (netuid, block)
    ).fetchone()
    if count is not None and count[0] >= hp.max_registrations_per_block:
        raise ChainError(
            "TooManyRegistrationsThisBlock", f"block {block} already has {count[0]} registrations"
        )
    conn.execute(
        "INSERT INTO registrations VALUES (?, ?, 1) ON CONFLICT(netuid, block) DO UPDATE SET count = count + 1",
        (netuid, block),
    )
    conn.execute("INSERT OR IGNORE INTO owners VALUES (?, ?)", (hotkey, signer))
    n = conn.execute("SELECT COUNT(*) FROM neurons WHERE netuid = ?", (netuid,)).fetchone()[0]
    if n < hp.max_uids:
        uid = n
    else:
        candidates = [
            rules.PruneCandidate(uid, registered_at, emission)
            for uid, registered_at, emission in conn.execute(
                "SELECT uid, registered_at, emission FROM neurons WHERE netuid = ?", (netuid,)
            )
        ]
        uid = rules.neuron_to_prune(candidates, block, hp.immunity_period)
        for table in ("neurons", "weights", "bonds"):
            conn.execute(f"DELETE FROM {table} WHERE netuid = ? AND uid = ?", (netuid, uid))
        conn.execute("DELETE FROM bonds WHERE netuid = ? AND dest = ?", (netuid, uid))
        conn.execute(
            "UPDATE neuron_history SET deregistered_at = ? WHERE netuid = ? AND uid = ? AND deregistered_at IS NULL",
            (block, netuid, uid),
        )
    conn.execute(
        "INSERT INTO neurons (netuid, uid, hotkey, coldkey, registered_at, last_update) VALUES (?, ?, ?, ?, ?, ?)",
        (netuid, uid, hotkey, signer, block, block),
    )
    conn.execute(
        "INSERT INTO neuron_history (netuid, uid, hotkey, registered_at) VALUES (?, ?, ?, ?)",
        (netuid, uid, hotkey, block),
    )
    return uid


def add_stake(
    conn: sqlite3.Connection, netuid: int, signer: str, block: int, *, hotkey: str, amount: float
) -> None:
    if not (isinstance(amount, int | float) and 0 < amount < float("inf")):
        raise ChainError("AmountTooLow", f"stake amount must be positive and finite, got {amount!r}")
    owner = conn.execute("SELECT coldkey FROM owners WHERE hotkey = ?", (hotkey,)).fetchone()
    if owner is None:
        raise ChainError("HotKeyAccountNotExists", f"hotkey {hotkey} is not registered anywhere")
    if owner[0] != signer:
        raise ChainError("NonAssociatedColdKey", f"hotkey {hotkey} does not belong to {signer}")
    conn.execute(
        "INSERT INTO stake VALUES (?, ?, ?) ON CONFLICT(netuid, hotkey) DO UPDATE SET amount = amount + excluded.amount",
        (netuid, hotkey, float(amount)),
    )


def check_integers(uids: Any, weights: Any) -> None:
    """The shape a weights payload must have to be decoded at all: two lists of integers."""
    if not (isinstance(uids, list) and isinstance(weights, list)):
        raise ChainError("BadArguments", "uids and weights must be lists")
    if not all(isinstance(v, int) and not isinstance(v, bool) for v in [*uids, *weights]):
        raise ChainError("InvalidWeights", "uids and weights must be integers")


def apply_weights(
    conn: sqlite3.Connection, netuid: int, hotkey: str, block: int, uids: list[int], values: list[int]
) -> None:
    """Check `hotkey`'s weights with subtensor's set-weights rules and store them.

    With commit-reveal on, last_update stays at the commit's block: the commit was the activity.
    """
    hp = subnet_hyperparameters(conn, netuid)
    check_integers(uids, values)
    row = conn.execute(
        "SELECT n.uid, n.validator_permit, n.last_update, COALESCE(s.amount, 0) FROM neurons n"
        " LEFT JOIN stake s ON s.netuid = n.netuid AND s.hotkey = n.hotkey"
        " WHERE n.netuid = ? AND n.hotkey = ?",
        (netuid, hotkey),
    ).fetchone()
    owner_hotkey = conn.execute("SELECT owner_hotkey FROM subnets WHERE netuid = ?", (netuid,)).fetchone()[0]
    n = conn.execute("SELECT COUNT(*) FROM neurons WHERE netuid = ?", (netuid,)).fetchone()[0]
    call = rules.WeightsCall(
        setter_uid=None if row is None else row[0],
        n=n,
        has_permit=row is not None and bool(row[1]),
        block=block,
        last_set_block=None if row is None else row[2],
        uids=uids,
        values=values,
        stake=0.0 if row is None else row[3],
        is_owner=bool(owner_hotkey) and owner_hotkey == hotkey,
    )
    rules.check_set_weights(call, hp)
    uid = row[0]
    conn.execute("DELETE FROM weights WHERE netuid = ? AND uid = ?", (netuid, uid))
    conn.executemany(
        "INSERT INTO weights VALUES (?, ?, ?, ?)",
        [(netuid, uid, u, v) for u, v in zip(uids, values, strict=True)],
    )
    if not hp.commit_reveal_weights:
        conn.execute("UPDATE neurons SET last_update = ? WHERE netuid = ? AND uid = ?", (block, netuid, uid))


def set_weights(
    conn: sqlite3.Connection,
    netuid: int,
    signer: str,
    block: int,
    *,
    uids: list[int],
    weights: list[int],
    version_key: int,
) -> None:
    if subnet_hyperparameters(conn, netuid).commit_reveal_weights:
        raise ChainError("CommitRevealEnabled", f"subnet {netuid} takes weights as commits (commit_weights)")
    apply_weights(conn, netuid, signer, block, uids, weights)


def commit_weights(
    conn: sqlite3.Connection,
    netuid: int,
    signer: str,
    block: int,
    *,
    uids: list[int],
    weights: list[int],
    version_key: int,
) -> int:
    """Seal weights until the chain reveals them; returns the commit's epoch.

    Subtensor receives them drand-timelocked and cannot check them before the reveal either, so
    only their shape is checked here; the set-weights rules apply when they open.
    """
    hp = subnet_hyperparameters(conn, netuid)
    epoch = rules.epoch_index(block, netuid, hp.tempo)
    row = conn.execute(
        "SELECT uid, last_update FROM neurons WHERE netuid = ? AND hotkey = ?", (netuid, signer)
    ).fetchone()
    waiting = conn.execute(
        "SELECT COUNT(*) FROM weight_commits WHERE netuid = ? AND hotkey = ? AND commit_epoch = ?",
        (netuid, signer, epoch),
    ).fetchone()[0]
    commit_reveal.check_commit_weights(
        commit_reveal.CommitCall(
            registered=row is not None,
            block=block,
            last_update=0 if row is None else row[1],
            unrevealed_this_epoch=waiting,
        ),
        hp,
    )
    check_integers(uids, weights)
    if not isinstance(version_key, int):
        raise ChainError("BadArguments", "version_key must be an integer")
    conn.execute(
        "INSERT INTO weight_commits (netuid, hotkey, commit_epoch, commit_block, uids, weight_values, version_key)"
        " VALUES (?, ?, ?, ?, ?, ?, ?)",
        (netuid, signer, epoch, block, json.dumps(uids), json.dumps(weights), version_key),
    )
    conn.execute("UPDATE neurons SET last_update = ? WHERE netuid = ? AND uid = ?", (block, netuid, row[0]))
    return epoch


def set_commitment(conn: sqlite3.Connection, netuid: int, signer: str, block: int, *, data: str) -> None:
    hp = subnet_hyperparameters(conn, netuid)
    if uid_of(conn, netuid, signer) is None:
        raise ChainError("HotKeyNotRegisteredInSubNet", f"{signer} is not registered on subnet {netuid}")
    if not isinstance(data, str):
        raise ChainError("BadArguments", "commitment data must be a string")
    size = len(data.encode())
    if size > hp.commitment_max_bytes:
        raise ChainError(
            "SpaceLimitExceeded", f"commitment of {size} bytes exceeds {hp.commitment_max_bytes}"
        )
    last = conn.execute(
        "SELECT block FROM commitments WHERE netuid = ? AND hotkey = ?", (netuid, signer)
    ).fetchone()
    if last is not None and block - last[0] < hp.commitment_rate_limit:
        raise ChainError(
            "CommitmentSetRateLimitExceeded",
            f"last commitment at block {last[0]}, limit {hp.commitment_rate_limit}",
        )
    conn.execute(
        "INSERT INTO commitments VALUES (?, ?, ?, ?) ON CONFLICT(netuid, hotkey)"
        " DO UPDATE SET data = excluded.data, block = excluded.block",
        (netuid, signer, data, block),
    )
    conn.execute(
        "INSERT INTO commitment_history (netuid, hotkey, data, block) VALUES (?, ?, ?, ?)",
        (netuid, signer, data, block),
    )


def sudo_set_sn_owner_hotkey(
    conn: sqlite3.Connection, netuid: int, signer: str, block: int, *, hotkey: str
) -> None:
    """Subtensor's `do_set_sn_owner_hotkey`: the owner's coldkey names the hotkey Yuma treats as the owner's."""
    owner_coldkey, last = conn.execute(
        "SELECT owner_coldkey, owner_hotkey_set_block FROM subnets WHERE netuid = ?", (netuid,)
    ).fetchone()
    if not owner_coldkey or signer != owner_coldkey:
        raise ChainError(
            "BadOrigin", f"only the subnet owner's coldkey may set subnet {netuid}'s owner hotkey"
        )
    if last and block - last < SN_OWNER_HOTKEY_RATE_LIMIT:
        raise ChainError(
            "TxRateLimitExceeded",
            f"owner hotkey set at block {last}; wait until block {last + SN_OWNER_HOTKEY_RATE_LIMIT}",
        )
    check_ss58(hotkey, "BadHotkey")
    conn.execute(
        "UPDATE subnets SET owner_hotkey = ?, owner_hotkey_set_block = ? WHERE netuid = ?",
        (hotkey, block, netuid),
    )


CALLS: dict[str, Callable[..., Any]] = {
    "burned_register": burned_register,
    "add_stake": add_stake,
    "set_weights": set_weights,
    "commit_weights": commit_weights,
    "set_commitment": set_commitment,
    "sudo_set_sn_owner_hotkey": sudo_set_sn_owner_hotkey,
}
