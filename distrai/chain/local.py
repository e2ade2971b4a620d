"""The embedded chain: one SQLite file that many processes share, following subtensor's rules.

Blocks follow the wall clock: block `b` begins `b * block_time` seconds after genesis. A block's
hash is drawn from fresh randomness by the first process that observes the block, so nobody can
know it before the block exists. Blocks, and the epochs due in them, are produced lazily by the
first read or write that finds the chain behind the clock; an epoch therefore sees the state as
it stands when the block is produced (on a live chain that is the same moment, give or take a
block).

Every write is an sr25519-signed extrinsic (see `signing.py`), verified and applied in one
transaction, so no process can act for a key it does not hold.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import secrets
import sqlite3
import time
from collections.abc import Sequence
from dataclasses import asdict
from pathlib import Path
from typing import Any

from distrai.chain import commit_reveal, rules
from distrai.chain.base import Chain, ChainError, Commitment, Hyperparameters, Metagraph, Neuron, WalletLike
from distrai.chain.local_calls import CALLS, check_ss58
from distrai.chain.local_db import connect, get_meta, migrate, write_transaction
from distrai.chain.local_epoch import run_subnet_epoch
from distrai.chain.local_reveal import SealedCommit, reveal_weight_commits, sealed_commits
from distrai.chain.local_settings import SubnetSettings, check_same_settings
from distrai.chain.signing import Keypair, SignedExtrinsic, sign_extrinsic, verify_extrinsic


class LocalChain(Chain):
    """One subnet of an embedded chain file."""

    def __init__(self, path: str | Path, netuid: int = 1):
        self.path = Path(path)
        if not self.path.exists():
            raise ChainError(
                "NoChain", f"no embedded chain at {self.path}; create it with `distrai chain init`"
            )
        self.netuid = netuid
        try:
            self._conn = connect(self.path)
            self.genesis = get_meta(self._conn, "genesis_hash")
            migrate(self._conn)
        except (KeyError, sqlite3.DatabaseError) as exc:
            raise ChainError("NoChain", f"{self.path} is not an embedded chain file") from exc
        if self._conn.execute("SELECT 1 FROM subnets WHERE netuid = ?", (netuid,)).fetchone() is None:
            raise ChainError("SubnetNotExists", f"subnet {netuid} does not exist on {self.path}")

    @classmethod
    def create(
        cls,
        path: str | Path,
        *,
        netuid: int = 1,
        block_time: float = 12.0,
        hyperparameters: Hyperparameters | None = None,
        emission_per_block: float = 1.0,
        owner_cut: float = 0.18,
        owner_coldkey: str = "",
        owner_hotkey: str = "",
        defaulted: frozenset[str] = frozenset(),
    ) -> LocalChain:
        """Create the chain file if it does not exist, and subnet `netuid` on it if it is missing; a
        subnet (or chain) that exists with other settings is refused (`AlreadyInitialised`), naming
        the settings in `defaulted` (by field name: ones the caller's user did not give) as defaults.

        `owner_hotkey` is the subnet owner's hotkey (subtensor sets it when the subnet is
        registered); its coldkey can change it later with `set_subnet_owner_hotkey`."""
        if block_time <= 0:
            raise ChainError("BadConfig", f"block_time must be positive, got {block_time}")
        if not 0.0 <= owner_cut <= 1.0:
            raise ChainError("BadConfig", f"owner_cut must lie in [0, 1], got {owner_cut}")
        hp = hyperparameters or Hyperparameters()
        if not (math.isfinite(hp.stake_threshold) and hp.stake_threshold >= 0):
            raise ChainError(
                "BadConfig", f"stake_threshold must be finite and >= 0, got {hp.stake_threshold}"
            )
        commit_reveal.check_reveal_period(hp.commit_reveal_period)
        if owner_hotkey:
            check_ss58(owner_hotkey, "BadHotkey")
        asked = SubnetSettings(block_time, hp, emission_per_block, owner_cut, owner_coldkey, owner_hotkey)
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        conn = connect(path)
        try:
            migrate(conn)
            with write_transaction(conn):
                check_same_settings(conn, str(path), netuid, asked, defaulted)
                _insert_genesis(conn, netuid, asked)
        finally:
            conn.close()
        return cls(path, netuid)

    # -- time ---------------------------------------------------------------------------------

    def _clock(self) -> tuple[float, float]:
        row = self._conn.execute(
            "SELECT (SELECT value FROM meta WHERE key='genesis_time'), (SELECT value FROM meta WHERE key='block_time')"
        ).fetchone()
        return float(row[0]), float(row[1])

    def block_time(self) -> float:
        return self._clock()[1]

    inclusion_blocks = 0
    """A call lands in the block current when it is made."""

    def block_timestamp(self, block: int) -> float:
        """Unix time at which `block` begins: blocks follow the wall clock."""
        genesis_time, block_time = self._clock()
        return genesis_time + block * block_time

    def connect_again(self) -> LocalChain:
        return LocalChain(self.path, self.netuid)

    def block(self) -> int:
        genesis_time, block_time = self._clock()
        return max(0, int((time.time() - genesis_time) / block_time))

    def advance(self, blocks: int) -> int:
        """Move the clock on by `blocks` blocks for every process sharing this file (dev and tests)."""
        if blocks < 0:
            raise ChainError("BadConfig", "the clock cannot go back")
        with write_transaction(self._conn) as conn:
            genesis_time, block_time = self._clock()
            conn.execute(
                "UPDATE meta SET value = ? WHERE key = 'genesis_time'",
                (repr(genesis_time - blocks * block_time),),
            )
        self._produce()
        return self.block()

    def _produce(self) -> int:
        """Produce every block up to the clock, running the epochs due in them."""
        target = self.block()
        last = self._conn.execute("SELECT MAX(number) FROM blocks").fetchone()[0]
        if last >= target:
            return target
        with write_transaction(self._conn) as conn:
            last, prev_hash = conn.execute(
                "SELECT number, hash FROM blocks ORDER BY number DESC LIMIT 1"
            ).fetchone()
            subnets = conn.execute("SELECT netuid, hyperparameters FROM subnets").fetchall()
            params = {netuid: Hyperparameters(**json.loads(hp)) for netuid, hp in subnets}
            for number in range(last + 1, target + 1):
                digest = hashlib.sha256(f"{prev_hash}|{number}|".encode() + os.urandom(32)).hexdigest()
                prev_hash = "0x" + digest
                conn.execute("INSERT INTO blocks VALUES (?, ?)", (number, prev_hash))
                for netuid, hp in params.items():
                    if rules.is_epoch_block(number, netuid, hp.tempo):
                        if hp.commit_reveal_weights:
                            reveal_weight_commits(conn, netuid, number)
                        run_subnet_epoch(conn, netuid, number)
            conn.execute("DELETE FROM registrations WHERE block < ?", (target - 1,))
        return target

    def _produced(self, block: int | None) -> int:
        """`block` (the current block when None), once produced; ChainError for one that never was."""
        current = self._produce()
        number = current if block is None else block
        if number > current:
            raise ChainError("BlockNotYetProduced", f"block {number} is in the future (now {current})")
        if number < 0:
            raise ChainError("BadBlock", f"block {number} does not exist")
        return number

    def block_hash(self, block: int | None = None) -> str:
        number = self._produced(block)
        return self._conn.execute("SELECT hash FROM blocks WHERE number = ?", (number,)).fetchone()[0]

    def block_number(self, block_hash: str) -> int | None:
        """The number of the block with hash `block_hash`, or None when no block has it."""
        row = self._conn.execute("SELECT number FROM blocks WHERE hash = ?", (block_hash,)).fetchone()
        return None if row is None else row[0]

    # -- reads --------------------------------------------------------------------------------

    def hyperparameters(self) -> Hyperparameters:
        row = self._conn.execute(
            "SELECT hyperparameters FROM subnets WHERE netuid = ?", (self.netuid,)
        ).fetchone()
        return Hyperparameters(**json.loads(row[0]))

    def subnet_owner(self) -> str:
        return self.subnet_info()["owner_coldkey"]

    def subnet_owner_hotkey(self) -> str:
        return self.subnet_info()["owner_hotkey"]

    def subnet_info(self) -> dict[str, Any]:
        row = self._conn.execute(
            "SELECT owner_coldkey, owner_hotkey, emission_per_block, owner_cut, owner_emission, burned,"
            " last_epoch_block FROM subnets WHERE netuid = ?",
            (self.netuid,),
        ).fetchone()
        keys = (
            "owner_coldkey",
            "owner_hotkey",
            "emission_per_block",
            "owner_cut",
            "owner_emission",
            "burned",
            "last_epoch_block",
        )
        return dict(zip(keys, row, strict=True))

    def metagraph(self) -> Metagraph:
        block = self._produce()
        rows = self._conn.execute(
            "SELECT n.uid, n.hotkey, n.coldkey, COALESCE(s.amount, 0), n.validator_permit, n.registered_at,"
            " n.last_update, n.rank, n.trust, n.consensus, n.validator_trust, n.incentive, n.dividends,"
            " n.emission, COALESCE(e.amount, 0)"
            " FROM neurons n LEFT JOIN stake s ON s.netuid = n.netuid AND s.hotkey = n.hotkey"
            " LEFT JOIN earnings e ON e.netuid = n.netuid AND e.hotkey = n.hotkey"
            " WHERE n.netuid = ? ORDER BY n.uid",
            (self.netuid,),
        ).fetchall()
        neurons = tuple(
            Neuron(
                uid=r[0],
                hotkey=r[1],
                coldkey=r[2],
                stake=r[3],
                validator_permit=bool(r[4]),
                registered_at=r[5],
                last_update=r[6],
                rank=r[7],
                trust=r[8],
                consensus=r[9],
                validator_trust=r[10],
                incentive=r[11],
                dividends=r[12],
                emission=r[13],
                total_emission=r[14],
            )
            for r in rows
        )
        return Metagraph(netuid=self.netuid, block=block, neurons=neurons, commitments=self.commitments())

    def commitments(self, block: int | None = None) -> dict[str, Commitment]:
        if block is None:
            rows = self._conn.execute(
                "SELECT c.hotkey, c.data, c.block FROM commitments c JOIN neurons n"
                " ON n.netuid = c.netuid AND n.hotkey = c.hotkey WHERE c.netuid = ?",
                (self.netuid,),
            ).fetchall()
        else:
            number = self._produced(block)
            registered = self.registrations(number)
            rows = [
                row
                for row in self._conn.execute(
                    "SELECT hotkey, data, block FROM commitment_history WHERE id IN"
                    " (SELECT MAX(id) FROM commitment_history WHERE netuid = ? AND block <= ? GROUP BY hotkey)",
                    (self.netuid, number),
                )
                if row[0] in registered
            ]
        return {hotkey: Commitment(hotkey, data, at) for hotkey, data, at in rows}

    def registrations(self, block: int | None = None) -> dict[str, int]:
        """Each hotkey registered at the end of `block` (now by default), with its uid then."""
        number = self._produced(block)
        rows = self._conn.execute(
            "SELECT hotkey, uid FROM neuron_history WHERE netuid = ? AND registered_at <= ?"
            " AND (deregistered_at IS NULL OR deregistered_at > ?)",
            (self.netuid, number, number),
        )
        return dict(rows.fetchall())

    def sealed_commits(self) -> list[SealedCommit]:
        """The weight commits waiting for their reveal: who committed and when, never what."""
        return sealed_commits(self._conn, self.netuid)

    def weights(self) -> dict[int, dict[int, float]]:
        """Each setter uid's weights as stored on chain (u16), normalized to sum to 1."""
        out: dict[int, dict[int, int]] = {}
        for uid, dest, value in self._conn.execute(
            "SELECT uid, dest, value FROM weights WHERE netuid = ? ORDER BY uid, dest", (self.netuid,)
        ):
            out.setdefault(uid, {})[dest] = value
        return {
            uid: dict(zip(row, rules.normalized(list(row.values())), strict=True)) for uid, row in out.items()
        }

    def nonce(self, ss58: str) -> int:
        row = self._conn.execute("SELECT nonce FROM accounts WHERE ss58 = ?", (ss58,)).fetchone()
        return 0 if row is None else row[0]

    # -- writes -------------------------------------------------------------------------------

    def submit(self, signer: Keypair, call: str, **args: Any) -> Any:
        """Sign `call(**args)` with `signer` and apply it; retried once if the nonce raced."""
        for attempt in range(3):
            ext = sign_extrinsic(signer, self.genesis, call, args, self.nonce(signer.ss58_address))
            try:
                return self.apply(ext)
            except ChainError as exc:
                if exc.reason != "StaleNonce" or attempt == 2:
                    raise
        raise AssertionError("unreachable")

    def apply(self, ext: SignedExtrinsic) -> Any:
        """Verify a signed extrinsic and apply it atomically; ChainError names any refusal."""
        body = verify_extrinsic(ext)
        if body["genesis"] != self.genesis:
            raise ChainError("BadGenesis", "the extrinsic was signed for another chain")
        call, args, signer = body["call"], body["args"], body["signer"]
        handler = CALLS.get(call)
        if handler is None:
            raise ChainError("UnknownCall", f"no call named {call!r}")
        block = self._produce()
        try:
            with write_transaction(self._conn) as conn:
                if body["nonce"] != self.nonce(signer):
                    raise ChainError("StaleNonce", f"nonce {body['nonce']} is not the account's next")
                conn.execute(
                    "INSERT INTO accounts VALUES (?, 1) ON CONFLICT(ss58) DO UPDATE SET nonce = nonce + 1",
                    (signer,),
                )
                result = handler(conn, self.netuid, signer, block, **args)
                conn.execute(
                    "INSERT INTO extrinsics (block, signer, call, ok) VALUES (?, ?, ?, 1)",
                    (block, signer, call),
                )
        except TypeError as exc:
            raise ChainError("BadArguments", f"{call}: {exc}") from exc
        return result

    def register(self, wallet: WalletLike) -> int:
        hotkey = wallet.hotkey.ss58_address
        uid = self.metagraph().uid_of(hotkey)
        if uid is not None:
            return uid
        deadline = self.block() + 50
        while True:
            try:
                return self.submit(wallet.coldkey, "burned_register", hotkey=hotkey)
            except ChainError as exc:
                if exc.reason != "TooManyRegistrationsThisBlock" or self.block() > deadline:
                    raise
                self.wait_for_block(self.block() + 1)

    def add_stake(self, wallet: WalletLike, amount: float) -> None:
        self.submit(wallet.coldkey, "add_stake", hotkey=wallet.hotkey.ss58_address, amount=amount)

    def commit(self, wallet: WalletLike, data: str) -> None:
        self.submit(wallet.hotkey, "set_commitment", data=data)

    def set_weights(self, wallet: WalletLike, uids: Sequence[int], weights: Sequence[float]) -> None:
        """Set weights, or commit them sealed when the subnet runs commit-reveal (as the SDK's
        `SetWeights` does); a sealed commit of nothing is refused here, as the SDK refuses it,
        since the chain could only drop it at the reveal."""
        u16_uids, values = rules.weights_to_u16(uids, weights)
        if not self.hyperparameters().commit_reveal_weights:
            self.submit(wallet.hotkey, "set_weights", uids=u16_uids, weights=values, version_key=0)
            return
        if not u16_uids:
            raise ChainError("WeightVecLengthIsLow", "all weights are zero: there is nothing to commit")
        self.submit(wallet.hotkey, "commit_weights", uids=u16_uids, weights=values, version_key=0)

    def set_subnet_owner_hotkey(self, wallet: WalletLike, hotkey: str) -> None:
        """Name `hotkey` the subnet owner's hotkey (signed by the owner's coldkey, as subtensor's
        `sudo_set_sn_owner_hotkey`; once per `SN_OWNER_HOTKEY_RATE_LIMIT` blocks)."""
        self.submit(wallet.coldkey, "sudo_set_sn_owner_hotkey", hotkey=hotkey)


def _insert_genesis(conn: sqlite3.Connection, netuid: int, settings: SubnetSettings) -> None:
    """The chain's first block and clock where the file has none, and subnet `netuid` where missing."""
    genesis = hashlib.sha256(secrets.token_bytes(32)).hexdigest()
    conn.execute("INSERT OR IGNORE INTO meta VALUES ('genesis_hash', ?)", ("0x" + genesis,))
    conn.execute("INSERT OR IGNORE INTO meta VALUES ('genesis_time', ?)", (repr(time.time()),))
    conn.execute("INSERT OR IGNORE INTO meta VALUES ('block_time', ?)", (repr(settings.block_time),))
    conn.execute("INSERT OR IGNORE INTO blocks VALUES (0, ?)", ("0x" + genesis,))
    conn.execute(
        "INSERT OR IGNORE INTO subnets (netuid, hyperparameters, owner_coldkey, owner_hotkey,"
        " emission_per_block, owner_cut, last_epoch_block) VALUES (?, ?, ?, ?, ?, ?, 0)",
        (
            netuid,
            json.dumps(asdict(settings.hyperparameters)),
            settings.owner_coldkey,
            settings.owner_hotkey,
            settings.emission_per_block,
            settings.owner_cut,
        ),
    )
