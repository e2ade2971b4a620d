"""A miner's settings: the nodes' (`distrai.node.settings.NodeSettings`) and its own flags, each with
its environment variable, read once by its entry point (`miners.main`)."""

from __future__ import annotations

import argparse
from typing import Any

from pydantic import field_validator

from distrai.node.settings import NodeSettings, setting
from miners.adversary_names import ADVERSARY_NAMES
from miners.kept_states import DEFAULT_MAX_KEPT, check_kept_states

MINER_BEHAVIOURS = ("honest", *ADVERSARY_NAMES)


class MinerSettings(NodeSettings):
    miner_adversary: str = setting(
        "--miner.adversary",
        "DISTRAI_MINER_ADVERSARY",
        "honest",
        "cheat in one of the ways validators must catch, for demonstrations and tests",
        choices=list(MINER_BEHAVIOURS),
    )
    miner_shard: bool = setting(
        "--miner.shard",
        "DISTRAI_MINER_SHARD",
        False,
        "shard the model, its gradients and AdamW's state over the miner's torchrun ranks (FSDP2) even "
        "when they fit one device; without it the ranks shard only when nothing else fits",
        action="store_true",
    )
    miner_kept_states: int = setting(
        "--miner.kept-states",
        "DISTRAI_MINER_KEPT_STATES",
        DEFAULT_MAX_KEPT,
        "the most boundary states of a window kept on disk while it trains (0: every one); a challenged "
        "one not kept is rebuilt by replay after the draw (miners/kept_states.py)",
    )

    @classmethod
    def parser(cls, prog: str | None = None, description: str | None = None) -> argparse.ArgumentParser:
        parser = super().parser(prog, description)
        parser.add_argument(
            "--miner.idle",
            action="store_const",
            const="idle",
            dest="miner.adversary",
            default=argparse.SUPPRESS,
            help="publish a zero update every window without training (the same as --miner.adversary idle)",
        )
        return parser

    @field_validator("miner_adversary")
    @classmethod
    def _known(cls, name: str) -> str:
        if name not in MINER_BEHAVIOURS:
            raise ValueError(
                f"--miner.adversary: unknown adversary {name!r}; known: {', '.join(MINER_BEHAVIOURS)}"
            )
        return name

    @field_validator("miner_shard", mode="before")
    @classmethod
    def _on_unless_0(cls, value: Any) -> Any:
        """DISTRAI_MINER_SHARD shards with any value but 0 (and empty)."""
        return value not in ("", "0") if isinstance(value, str) else value

    @field_validator("miner_kept_states")
    @classmethod
    def _kept(cls, kept: int) -> int:
        return check_kept_states(kept)
