"""The names of the aggregating leader's adversaries (`validators.leader_adversaries.LEADER_ADVERSARIES`
holds their classes, in this order) and the check of a choice of one, in a module that imports nothing:
`validators.settings` offers them as `--validator.adversary` choices, and refuses a bad choice,
before the validator loads torch and the model code."""

from __future__ import annotations

LEADER_ADVERSARY_NAMES: tuple[str, ...] = ("poison", "reweight", "collude", "censor", "invent", "skipper")

COLLUDE = "collude"
"""The adversary that needs the hotkey of its colluding miner (`--validator.colluder`)."""


def check_leader_adversary(name: str, colluder: str | None = None) -> None:
    """ValueError unless `name` is `honest` or a known adversary (listing them), with the colluding
    miner's hotkey that `collude` needs."""
    if name == "honest":
        return
    if name not in LEADER_ADVERSARY_NAMES:
        raise ValueError(f"unknown validator adversary {name!r}; known: {', '.join(LEADER_ADVERSARY_NAMES)}")
    if name == COLLUDE and not colluder:
        raise ValueError(
            "the collude adversary needs the hotkey of its colluding miner (--validator.colluder)"
        )
