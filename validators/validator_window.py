"""A window as one validator takes it (`ValidatorWindow`), stage by stage, and the checks of one
miner in it.

- **noted** at the window's start: its miners (`pending.PendingWindow`, kept on disk: the data
  assignment depends on who was registered then);
- **listed** at the reveal deadline: the manifests anchored in time and every commitment as of the
  commit deadline, and what the miners' stores held (`listing.py`): a `ValidatorWindow`;
- **framed** once its base model is reached: what every check of it reads (`window.WindowBasis`: the
  base, the challenge drawn from the block at the commit deadline, the replays shared) and the miners
  to check with their uids (`window_check.frame_window`): the same `ValidatorWindow`, `framed`;
- **checked**: the verdicts, the measurements pooled, and what is held for the next window's
  re-checks (`held_window.HeldWindow`).

`check_one` runs a miner's cheap checks (`checks.py`) and, for the miners of this validator's share
of the replays, the verification by recomputation (`replay_check.py`); it is called again for a
miner whose store did not answer, until the read patience runs out.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from distrai.chain.base import Commitment
from distrai.protocol.announce import Announcement
from distrai.protocol.sync import StoreCache
from distrai.store import StoreError
from distrai.wire.verdicts import Check
from validators.checks import MinerVerdict, check_miner
from validators.inventory import AtDeadline, Inventory
from validators.pending import PendingWindow
from validators.replay_check import verify_challenge
from validators.window import WindowBasis


@dataclass(frozen=True)
class ValidatorWindow:
    """Window `number` as this validator takes it: listed at the reveal deadline, then framed
    against its base model (`framed`); every part fixed at its own moment."""

    noted: PendingWindow
    """its miners, noted at its start"""
    in_time: dict[str, Announcement]
    """miner hotkey → its announcement anchoring a manifest of the window before the commit deadline"""
    commitments: dict[str, Commitment]
    """every commitment as of the commit deadline"""
    inventory: Inventory
    """what the miners' stores held at the reveal deadline (listed again for those that did not answer)"""
    validator: str
    """this validator's hotkey"""
    reveal_deadline: int
    frame: WindowBasis | None = None
    """what every check of the window reads; None until it is framed"""
    challenged: frozenset[str] = frozenset()
    """every miner the window's seed challenged, whoever replays it"""
    sharing: tuple[str, ...] = ()
    """the validators sharing the window's replays and measurements"""
    uids: Mapping[str, int] = field(default_factory=dict)
    """miner → uid, for each miner with a manifest in time that is registered now: the miners to check"""

    @property
    def number(self) -> int:
        return self.noted.window

    @property
    def miners(self) -> list[str]:
        return self.noted.miners

    @property
    def basis(self) -> WindowBasis:
        if self.frame is None:
            raise RuntimeError(f"window {self.number} is checked before it is framed against its base model")
        return self.frame

    @property
    def replays(self) -> frozenset[str]:
        """The challenged miners this validator replays."""
        return frozenset(self.basis.shares.get(self.validator, []))

    def framed(
        self, basis: WindowBasis, challenged: frozenset[str], sharing: Iterable[str], uids: Mapping[str, int]
    ) -> ValidatorWindow:
        return dataclasses.replace(
            self, frame=basis, challenged=challenged, sharing=tuple(sharing), uids=uids
        )

    def listed_again(self, inventory: Inventory) -> ValidatorWindow:
        return dataclasses.replace(self, inventory=inventory)


def check_one(
    stores: StoreCache, window: ValidatorWindow, hotkey: str, uid: int, replay: bool = True
) -> tuple[MinerVerdict, AtDeadline | None]:
    """One miner's verdict in the window, and its store as it stood at the reveal deadline (None
    when it could not be opened or listed); `replay=False` leaves the replay of a miner of this
    validator's share for later (`replay_challenge`)."""
    announcement = window.basis.announcements[hotkey]
    url = announcement.store_url
    if url in window.inventory.unreachable:
        verdict = MinerVerdict(hotkey, uid).unreadable(Check.STORE, f"its store {url} could not be listed")
        return verdict, None
    try:
        reader = AtDeadline(stores.get(url), url, window.inventory, window.reveal_deadline)
    except (StoreError, ValueError) as exc:
        return MinerVerdict(hotkey, uid).fail(Check.STORE, f"unusable store URL: {exc}", fraud=False), None
    verdict = check_miner(window.basis, hotkey, uid, reader, challenged=hotkey in window.challenged)
    if replay:
        replay_challenge(window, verdict, reader)
    return verdict, reader


def replay_challenge(window: ValidatorWindow, verdict: MinerVerdict, reader: AtDeadline | None) -> None:
    """Verify by recomputation a miner of this validator's share of the replays whose cheap checks
    passed (`replay.verify_challenge`); nothing for any other miner."""
    if not verdict.passed or verdict.hotkey not in window.replays or reader is None:
        return
    assert verdict.manifest is not None, "a passed verdict holds its manifest"
    basis = window.basis
    segments = basis.segments(verdict.hotkey, verdict.manifest.n_segments)
    verify_challenge(basis, verdict, reader, segments, basis.sample(verdict.hotkey), window.validator)
