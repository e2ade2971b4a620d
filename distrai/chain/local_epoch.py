"""One subnet epoch on the embedded chain: read state, run Yuma Consensus, write results.

The owner uid Yuma sees is the uid of the subnet's owner hotkey (subtensor's `get_owner_uid`);
the incentive burned is that of every hotkey of the owner's coldkey (subtensor's burn of the
owner's own hotkeys). Emission credited to a hotkey accumulates in `earnings`; unlike subtensor it is not added to
the hotkey's stake, so the stake an operator sets is the stake that votes (a decision recorded in
docs/chain.md).
"""

from __future__ import annotations

import json
import sqlite3

import numpy as np

from distrai.chain import rules, yuma
from distrai.chain.base import Hyperparameters
from distrai.chain.local_reveal import earliest_pending_commit_blocks
from distrai.chain.yuma_emission import EmissionSplit, split_emission


def run_subnet_epoch(conn: sqlite3.Connection, netuid: int, block: int) -> None:
    hp_json, per_block, owner_cut, last_epoch, owner_coldkey, owner_hotkey = conn.execute(
        "SELECT hyperparameters, emission_per_block, owner_cut, last_epoch_block, owner_coldkey, owner_hotkey"
        " FROM subnets WHERE netuid = ?",
        (netuid,),
    ).fetchone()
    hp = Hyperparameters(**json.loads(hp_json))
    rows = conn.execute(
        "SELECT n.uid, n.hotkey, n.registered_at, n.last_update, n.validator_permit, COALESCE(s.amount, 0),"
        " n.coldkey"
        " FROM neurons n LEFT JOIN stake s ON s.netuid = n.netuid AND s.hotkey = n.hotkey"
        " WHERE n.netuid = ? ORDER BY n.uid",
        (netuid,),
    ).fetchall()
    conn.execute("UPDATE subnets SET last_epoch_block = ? WHERE netuid = ?", (block, netuid))
    n = len(rows)
    if n == 0:
        return
    hotkeys = [r[1] for r in rows]
    stake = np.array([r[5] for r in rows], dtype=np.float64)
    weights = _matrix(conn, "weights", netuid, n) / rules.U16_MAX
    bonds = _matrix(conn, "bonds", netuid, n)
    pending = None
    if hp.commit_reveal_weights:
        earliest = earliest_pending_commit_blocks(conn, netuid, block)
        pending = np.array([earliest.get(h, yuma.NO_PENDING_COMMIT) for h in hotkeys], dtype=np.int64)
    inputs = yuma.EpochInputs(
        weights=weights,
        stake=stake,
        validator_permit=np.array([bool(r[4]) for r in rows]),
        active=np.array([block - r[3] <= hp.activity_cutoff for r in rows]),
        registered_at=np.array([r[2] for r in rows], dtype=np.int64),
        last_update=np.array([r[3] for r in rows], dtype=np.int64),
        bonds=bonds,
        current_block=block,
        owner_uid=hotkeys.index(owner_hotkey) if owner_hotkey in hotkeys else None,
        pending_commit_block=pending,
    )
    params = yuma.EpochParams(
        kappa=hp.kappa,
        bonds_moving_avg=hp.bonds_moving_avg,
        yuma3=hp.yuma3,
        tempo=hp.tempo,
        max_validators=hp.max_validators,
        stake_threshold=hp.stake_threshold,
    )
    result = yuma.run_epoch(inputs, params)
    total = per_block * max(0, block - last_epoch)
    owner_uids = [r[0] for r in rows if owner_coldkey and r[6] == owner_coldkey]
    split = split_emission(result, total, owner_cut, owner_uids=owner_uids)
    _write_epoch(conn, netuid, hotkeys, result, split)


def _matrix(conn: sqlite3.Connection, table: str, netuid: int, n: int) -> np.ndarray:
    """The subnet's `table` (weights or bonds: uid, dest, value) as an n × n matrix of its values."""
    matrix = np.zeros((n, n))
    for uid, dest, value in conn.execute(f"SELECT uid, dest, value FROM {table} WHERE netuid = ?", (netuid,)):
        if uid < n and dest < n:
            matrix[uid, dest] = value
    return matrix


def _write_epoch(
    conn: sqlite3.Connection, netuid: int, hotkeys: list[str], result: yuma.EpochResult, split: EmissionSplit
) -> None:
    """Store an epoch's result: each neuron's ranks and emission, the owner's cut and what was burned,
    and the new bonds."""
    n = len(hotkeys)
    permits = result.validator_permit
    for uid in range(n):
        earned = float(split.server[uid] + split.validator[uid])
        conn.execute(
            "UPDATE neurons SET rank = ?, trust = ?, consensus = ?, validator_trust = ?, incentive = ?,"
            " dividends = ?, emission = ?, validator_permit = ? WHERE netuid = ? AND uid = ?",
            (
                float(result.rank[uid]),
                float(result.trust[uid]),
                float(result.consensus[uid]),
                float(result.validator_trust[uid]),
                float(result.incentive[uid]),
                float(result.dividends[uid]),
                earned,
                int(permits[uid]),
                netuid,
                uid,
            ),
        )
        conn.execute(
            "INSERT INTO earnings VALUES (?, ?, ?) ON CONFLICT(netuid, hotkey) DO UPDATE SET amount = amount + ?",
            (netuid, hotkeys[uid], earned, earned),
        )
    conn.execute(
        "UPDATE subnets SET owner_emission = owner_emission + ?, burned = burned + ? WHERE netuid = ?",
        (float(split.owner), float(split.burned), netuid),
    )
    conn.execute("DELETE FROM bonds WHERE netuid = ?", (netuid,))
    new_bonds = [
        (netuid, int(i), int(j), float(result.bonds[i, j]))
        for i, j in zip(*np.nonzero(result.bonds), strict=True)
    ]
    conn.executemany("INSERT INTO bonds VALUES (?, ?, ?, ?)", new_bonds)
