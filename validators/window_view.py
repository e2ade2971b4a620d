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

from collections.abc import Callable, Mapping
from dataclasses import dataclass

from distrai.protocol.announce import Announcement
from distrai.protocol.globalmodel import GlobalModel
from distrai.protocol.runtime import Runtime
from distrai.protocol.sync import StoreCache
from distrai.protocol.trajectory import drawn_pieces
from distrai.protocol.windows import ChallengeInputs, miner_segments
from distrai.store import StoreError
from distrai.wire.verdicts import Check
from validators.checks import MinerVerdict, check_miner
from validators.inventory import AtDeadline, Inventory
from validators.replay_check import verify_challenge


@dataclass(frozen=True)
class WindowView:
    window: int
    base: GlobalModel
    """G_w: the model the window's miners trained from"""
    start_hash: str
    """the hash of G_w with a fresh optimizer at step 0, which every boundary 0 must commit to"""
    inputs: ChallengeInputs
    challenged: frozenset[str]
    """every miner the window's seed challenged, whoever replays it"""
    shares: Mapping[str, list[str]]
    """validator → the challenged miners it replays"""
    validator: str
    """this validator's hotkey"""
    miners: tuple[str, ...]
    """the miners noted at the window's start (the data assignment)"""
    announcements: Mapping[str, Announcement]
    """miner → its commitment for the window, as the chain held it before the commit deadline"""
    inventory: Inventory
    reveal_deadline: int

    @property
    def replays(self) -> frozenset[str]:
        """The challenged miners this validator replays."""
        return frozenset(self.shares.get(self.validator, []))


def check_one(
    runtime: Runtime,
    stores: StoreCache,
    view: WindowView,
    hotkey: str,
    uid: int,
    is_registered: Callable[[str], bool],
    replay: bool = True,
) -> tuple[MinerVerdict, AtDeadline | None]:
    """One miner's verdict in the window, and its store as it stood at the reveal deadline (None
    when it could not be opened or listed); `replay=False` leaves the replay of a miner of this
    validator's share for later (`replay_challenge`)."""
    announcement = view.announcements[hotkey]
    url = announcement.store_url
    if url in view.inventory.unreachable:
        verdict = MinerVerdict(hotkey, uid).unreadable(Check.STORE, f"its store {url} could not be listed")
        return verdict, None
    try:
        reader = AtDeadline(stores.get(url), url, view.inventory, view.reveal_deadline)
    except (StoreError, ValueError) as exc:
        return MinerVerdict(hotkey, uid).fail(Check.STORE, f"unusable store URL: {exc}", fraud=False), None
    verdict = check_miner(
        runtime,
        view.base,
        view.window,
        hotkey,
        uid,
        announcement,
        reader,
        is_registered,
        start_hash=view.start_hash,
        challenged=hotkey in view.challenged,
    )
    if replay:
        replay_challenge(runtime, view, verdict, reader)
    return verdict, reader


def replay_challenge(
    runtime: Runtime, view: WindowView, verdict: MinerVerdict, reader: AtDeadline | None
) -> None:
    """Verify by recomputation a miner of this validator's share of the replays whose cheap checks
    passed (`replay.verify_challenge`); nothing for any other miner."""
    if not verdict.passed or verdict.hotkey not in view.replays or reader is None:
        return
    fraction = runtime.config.verification.trajectory_fraction
    sample = drawn_pieces(view.inputs, verdict.hotkey, view.base.params, fraction)
    assert verdict.manifest is not None, "a passed verdict holds its manifest"
    segments = miner_segments(view.inputs, verdict.hotkey, verdict.manifest.n_segments)
    verify_challenge(runtime, view.base, view.window, verdict, reader, segments, list(view.miners), sample)
