"""What `distrai localnet` checks before it imports the model code: its flags, the dashboard's port
and the work folder. A refusal answers in a fraction of a second instead of after the ~4 s of torch
and transformers imports a network needs (docs/startup.md); a refused flag leaves no folder behind.
"""

from __future__ import annotations

import argparse
import shutil
from dataclasses import dataclass
from pathlib import Path

from distrai.dashboard.cli import check_port_free
from distrai.node.folders import unwritable, writable_folder
from miners.adversary_names import ADVERSARY_NAMES
from validators.leader_adversary_names import LEADER_ADVERSARY_NAMES

MARKER = ".distrai-localnet"
DASHBOARD_HOST = "127.0.0.1"
COLLUDING_LEADER = "collude"
COLLUDING_MINER = "poison"
"""The leader adversary that colludes with a miner adversary, and the miner it colludes with: the
local network gives the leader the `adversary-poison` wallet's hotkey."""


@dataclass(frozen=True)
class Checked:
    """The flags `preflight` parsed."""

    adversaries: tuple[str, ...]
    leader_adversaries: tuple[str, ...]


def parse_adversaries(text: str, known=ADVERSARY_NAMES, flag: str = "--adversary") -> tuple[str, ...]:
    """`--adversary lazy,noise` → ("lazy", "noise"); unknown or repeated types are refused."""
    names = tuple(name.strip() for name in text.split(",") if name.strip())
    unknown = [name for name in names if name not in known]
    if unknown:
        raise ValueError(f"unknown {flag} {', '.join(unknown)}; known: {', '.join(known)}")
    if len(set(names)) != len(names):
        raise ValueError(f"{flag} names a type twice")
    return names


def prepare_work_dir(work: Path) -> None:
    """Make `work` an empty localnet folder; refuse to clear a folder localnet did not make, and say
    which folder and flag when it cannot be written in."""
    try:
        if work.exists() and any(work.iterdir()):
            if not (work / MARKER).exists():
                raise ValueError(
                    f"{work} is not empty and was not made by `distrai localnet`; choose another --work"
                )
            shutil.rmtree(work)
        writable_folder(work, "--work")
        (work / MARKER).write_text("made by distrai localnet; cleared by the next run\n")
    except OSError as exc:
        raise unwritable(work, "--work", exc) from None


def preflight(args: argparse.Namespace) -> Checked:
    """Refuse flags that do not make a network, a dashboard port in use, or a work folder that cannot
    be written (made, or cleared, here, once every flag has passed)."""
    adversaries = parse_adversaries(args.adversary)
    leaders = parse_adversaries(args.leader_adversary, LEADER_ADVERSARY_NAMES, "--leader-adversary")
    if args.miners < 1 or args.validators < 1 or args.windows < 1:
        raise ValueError("--miners, --validators and --windows must each be at least 1")
    if args.miner_ranks < 1 or args.sharded_miner_ranks < 1:
        raise ValueError("--miner-ranks and --sharded-miner-ranks must be at least 1")
    if args.sharded_miner_ranks > 1 and args.miners < 2:
        raise ValueError("--sharded-miner-ranks runs miner1: it needs --miners 2 or more")
    if not 0 <= args.idle_miners <= args.miners:
        raise ValueError("--idle-miners must lie between 0 and --miners")
    if len(leaders) >= args.validators:
        raise ValueError("--leader-adversary needs an honest validator left to follow: add --validators")
    if COLLUDING_LEADER in leaders and COLLUDING_MINER not in adversaries:
        raise ValueError(
            f"--leader-adversary {COLLUDING_LEADER} needs --adversary {COLLUDING_MINER} (its miner)"
        )
    if args.dashboard:
        check_port_free(DASHBOARD_HOST, args.dashboard_port)
    prepare_work_dir(Path(args.work).resolve())
    return Checked(adversaries, leaders)
