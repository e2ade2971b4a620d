"""What an embedded chain's subnet is created with, and how a second creation compares with it.

Creating a subnet that exists already is fine when it asks for the settings the file holds; asked
for others, it is refused, naming each setting that differs, rather than silently keeping the old.
"""

from __future__ import annotations

import dataclasses
import json
import sqlite3
from dataclasses import asdict, dataclass, fields

from distrai.chain.base import ChainError, Hyperparameters


@dataclass(frozen=True)
class SubnetSettings:
    block_time: float
    """seconds per block: the whole chain's, not the subnet's"""
    hyperparameters: Hyperparameters
    emission_per_block: float
    owner_cut: float
    owner_coldkey: str
    owner_hotkey: str


def stored_block_time(conn: sqlite3.Connection) -> float | None:
    """The chain's block time, or None for a file with no chain in it yet."""
    row = conn.execute("SELECT value FROM meta WHERE key = 'block_time'").fetchone()
    return None if row is None else float(row[0])


def stored_settings(conn: sqlite3.Connection, netuid: int) -> SubnetSettings | None:
    """Subnet `netuid`'s settings as the file holds them (the owner hotkey as it stands now), or None."""
    row = conn.execute(
        "SELECT hyperparameters, emission_per_block, owner_cut, owner_coldkey, owner_hotkey"
        " FROM subnets WHERE netuid = ?",
        (netuid,),
    ).fetchone()
    if row is None:
        return None
    block_time = stored_block_time(conn)
    assert block_time is not None, "a subnet's row is written with the chain's block time"
    return SubnetSettings(
        block_time=block_time,
        hyperparameters=Hyperparameters(**json.loads(row[0])),
        emission_per_block=row[1],
        owner_cut=row[2],
        owner_coldkey=row[3],
        owner_hotkey=row[4],
    )


def differences(
    stored: SubnetSettings, asked: SubnetSettings, defaulted: frozenset[str] = frozenset()
) -> list[str]:
    """One `name stored (asked value)` entry per setting that differs, hyperparameters by field; a
    setting in `defaulted` (one the caller left at its default) reads `name stored (value by
    default, not given)`."""

    def entry(name: str, have: object, want: object) -> str:
        said = f"{want!r} by default, not given" if name in defaulted else f"asked {want!r}"
        return f"{name} {have!r} ({said})"

    found = []
    for field in fields(SubnetSettings):
        if field.name == "hyperparameters":
            continue
        have, want = getattr(stored, field.name), getattr(asked, field.name)
        if have != want:
            found.append(entry(field.name, have, want))
    have_hp, want_hp = asdict(stored.hyperparameters), asdict(asked.hyperparameters)
    found += [entry(name, have_hp[name], want) for name, want in want_hp.items() if have_hp[name] != want]
    return found


def check_same_settings(
    conn: sqlite3.Connection,
    path: str,
    netuid: int,
    asked: SubnetSettings,
    defaulted: frozenset[str] = frozenset(),
) -> None:
    """Refuse (`AlreadyInitialised`) to create subnet `netuid` in a file that holds it, or the chain,
    with other settings (those in `defaulted` named as defaults the caller did not give)."""
    stored = stored_settings(conn, netuid)
    if stored is not None:
        found, held = differences(stored, asked, defaulted), f"subnet {netuid}"
    else:
        have = stored_block_time(conn)
        chain_only = dataclasses.replace(asked, block_time=have) if have is not None else asked
        found = [
            entry for entry in differences(chain_only, asked, defaulted) if entry.startswith("block_time ")
        ]
        held = "a chain"
    if found:
        raise ChainError(
            "AlreadyInitialised",
            f"{path} already holds {held} with other settings, and nothing was changed: {'; '.join(found)}. "
            "Ask for the settings it holds, or create the chain in another file",
        )
