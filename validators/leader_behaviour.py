"""How a validator leads: the hooks a leader adversary (`validators.leader_adversaries`) overrides to
cheat, each given the validator as it sees it (`LeaderView`). The honest behaviour changes nothing."""

from __future__ import annotations

from typing import Protocol

from distrai.protocol.runtime import Runtime
from distrai.store import Store
from distrai.train.outer import Contribution
from distrai.wire.window_documents import AcceptedUpdate, Measurement, Receipt
from validators.checks import MinerVerdict
from validators.held_window import HeldWindow


class LeaderView(Protocol):
    """The validator as a leader's hooks see it (`validators.validator.Validator`)."""

    rt: Runtime
    store: Store
    held: HeldWindow | None


class LeaderBehaviour:
    """An honest validator: the report is what its checks found, the aggregate what the rule gives.
    Each leader adversary (`leader_adversaries.py`) overrides the hooks it cheats in."""

    name = "honest"

    def judge(self, validator: LeaderView, w: int, verdicts: list[MinerVerdict]) -> None:
        """Change the window's verdicts (in place) before the report is signed."""

    def measured(self, validator: LeaderView, w: int, own: dict[str, Measurement]) -> dict[str, Measurement]:
        """The measurements of its share it publishes, and scores with, given what it measured."""
        return own

    def receipted(self, validator: LeaderView, w: int, receipts: list[Receipt]) -> list[Receipt]:
        """The receipts for its replays of window w it publishes, given those its replays gave."""
        return receipts

    def tamper(
        self,
        validator: LeaderView,
        w: int,
        accepted: list[AcceptedUpdate],
        contributions: list[Contribution],
    ) -> tuple[list[AcceptedUpdate], list[Contribution]]:
        """The accepted list and the contributions the outer step applies, given the honest ones."""
        return accepted, contributions
