"""One window as every check of it reads it, built once per window (`WindowBasis`).

A validator checks each miner of a window against the same things: the run's runtime, the window's
number and base model G_w, the hash boundary 0 must commit to, the challenge drawn from the block
hash at the commit deadline, the miners noted at the window's start, how the replays are shared,
the miners' commitments and who may sign. `check_miner` (`checks.py`), `verify_challenge`
(`replay_check.py`) and the window a validator keeps to re-check findings (`held_window.HeldWindow`)
take them together instead of one argument each.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from distrai.protocol.announce import Announcement
from distrai.protocol.globalmodel import GlobalModel
from distrai.protocol.run import challenge_inputs
from distrai.protocol.runtime import Runtime
from distrai.protocol.trajectory import drawn_pieces
from distrai.protocol.windows import ChallengeInputs, miner_segments
from distrai.train.hashing import PieceRef


@dataclass(frozen=True)
class WindowBasis:
    """What every check of one window reads, the same for every miner of it."""

    runtime: Runtime
    number: int
    """the window"""
    base: GlobalModel
    """G_w: the model the window's miners trained from"""
    inputs: ChallengeInputs
    """what the window's challenge is drawn from (`protocol.windows`)"""
    miners: tuple[str, ...]
    """the miners noted at the window's start (the data assignment)"""
    shares: Mapping[str, list[str]]
    """validator → the challenged miners it replays (`replay_shares`)"""
    announcements: Mapping[str, Announcement]
    """miner → its commitment for the window, as the chain held it before the commit deadline"""
    is_registered: Callable[[str], bool]
    """whether a hotkey may sign a manifest: registered in the metagraph the window was read from"""
    start_hash: str | None = None
    """the hash of G_w with a fresh optimizer at step 0, which every boundary 0 must commit to
    (None: not checked)"""
    behind: bool = False
    """whether this validator passed over an aggregate out of reach and may be behind the network
    (`distrai.protocol.sync.Syncer.behind`): a manifest built on another model is then not judged"""

    @classmethod
    def measured_outside(
        cls, runtime: Runtime, base: GlobalModel, block_hash: str, miners: Sequence[str]
    ) -> WindowBasis:
        """Window `base.window` as a tool measures its updates outside a validator (the scoring tests,
        `bench/incentives.py`): its challenge drawn from `block_hash`, no replay shares and no
        commitments read, every hotkey taken as registered."""
        return cls(
            runtime=runtime,
            number=base.window,
            base=base,
            inputs=challenge_inputs(runtime.config, block_hash, base.window, miners),
            miners=tuple(miners),
            shares={},
            announcements={},
            is_registered=lambda hotkey: True,
        )

    def segments(self, hotkey: str, n_segments: int) -> list[int]:
        """The segments of `hotkey`'s manifest of `n_segments` the window's challenge replays."""
        return miner_segments(self.inputs, hotkey, n_segments)

    def sample(self, hotkey: str) -> list[PieceRef]:
        """The pieces of `hotkey`'s trajectory the window's challenge draws."""
        fraction = self.runtime.config.verification.trajectory_fraction
        return drawn_pieces(self.inputs, hotkey, self.base.params, fraction)
