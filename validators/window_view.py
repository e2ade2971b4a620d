"""What a validator fixes about one window before it checks it, built once, and the checks of one
miner against it.

Everything here is decided by the chain and the stores at the window's deadlines: the miners whose
commitments count, the challenge drawn from the block hash at the commit deadline and how the
replays are shared, the listing of the miners' stores at the reveal deadline, and the window's
base model. `check_one` runs a miner's cheap checks (`checks.py`) and, for the miners of this
validator's share of the replays, the verification by recomputation (`replay_check.py`); it is called
again for a miner whose store did not answer, until the read patience runs out.
"""

from __future__ import annotations

from dataclasses import dataclass

from distrai.protocol.sync import StoreCache
from distrai.store import StoreError
from distrai.wire.verdicts import Check
from validators.checks import MinerVerdict, check_miner
from validators.inventory import AtDeadline, Inventory
from validators.replay_check import verify_challenge
from validators.window import WindowBasis


@dataclass(frozen=True)
class WindowView:
    """The window as this validator checks it: what every check reads (`basis`), and what this
    validator fixed at the window's deadlines."""

    basis: WindowBasis
    challenged: frozenset[str]
    """every miner the window's seed challenged, whoever replays it"""
    validator: str
    """this validator's hotkey"""
    inventory: Inventory
    reveal_deadline: int

    @property
    def replays(self) -> frozenset[str]:
        """The challenged miners this validator replays."""
        return frozenset(self.basis.shares.get(self.validator, []))


def check_one(
    stores: StoreCache, view: WindowView, hotkey: str, uid: int, replay: bool = True
) -> tuple[MinerVerdict, AtDeadline | None]:
    """One miner's verdict in the window, and its store as it stood at the reveal deadline (None
    when it could not be opened or listed); `replay=False` leaves the replay of a miner of this
    validator's share for later (`replay_challenge`)."""
    announcement = view.basis.announcements[hotkey]
    url = announcement.store_url
    if url in view.inventory.unreachable:
        verdict = MinerVerdict(hotkey, uid).unreadable(Check.STORE, f"its store {url} could not be listed")
        return verdict, None
    try:
        reader = AtDeadline(stores.get(url), url, view.inventory, view.reveal_deadline)
    except (StoreError, ValueError) as exc:
        return MinerVerdict(hotkey, uid).fail(Check.STORE, f"unusable store URL: {exc}", fraud=False), None
    verdict = check_miner(view.basis, hotkey, uid, reader, challenged=hotkey in view.challenged)
    if replay:
        replay_challenge(view, verdict, reader)
    return verdict, reader


def replay_challenge(view: WindowView, verdict: MinerVerdict, reader: AtDeadline | None) -> None:
    """Verify by recomputation a miner of this validator's share of the replays whose cheap checks
    passed (`replay.verify_challenge`); nothing for any other miner."""
    if not verdict.passed or verdict.hotkey not in view.replays or reader is None:
        return
    assert verdict.manifest is not None, "a passed verdict holds its manifest"
    basis = view.basis
    segments = basis.segments(verdict.hotkey, verdict.manifest.n_segments)
    verify_challenge(basis, verdict, reader, segments, basis.sample(verdict.hotkey), view.validator)
