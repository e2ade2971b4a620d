"""A validator's settings: the nodes' (`distrai.node.settings.NodeSettings`) and its own flags, each
with its environment variable, read once by its entry point (`validators.main`)."""

from __future__ import annotations

from pydantic import model_validator

from distrai.node.settings import NodeSettings, setting
from validators.leader_adversary_names import LEADER_ADVERSARY_NAMES, check_leader_adversary


class ValidatorSettings(NodeSettings):
    validator_adversary: str = setting(
        "--validator.adversary",
        "DISTRAI_VALIDATOR_ADVERSARY",
        "honest",
        "as the aggregating leader, try to steer the global model in one of the ways every follower must "
        "refuse, for demonstrations and tests",
        choices=["honest", *LEADER_ADVERSARY_NAMES],
    )
    validator_colluder: str | None = setting(
        "--validator.colluder",
        "DISTRAI_VALIDATOR_COLLUDER",
        None,
        "with --validator.adversary collude: the ss58 hotkey of the colluding miner whose update the report "
        "passes (distrai localnet gives the poison adversary's)",
        metavar="HOTKEY",
    )

    @model_validator(mode="after")
    def _leader(self) -> ValidatorSettings:
        check_leader_adversary(self.validator_adversary, self.validator_colluder)
        return self
