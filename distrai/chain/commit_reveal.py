"""Subtensor's timelocked weight commits as pure rules: who may commit, and when a commit opens.

A commit made while the subnet's epoch index is `e` opens in the block where epoch
`e + reveal_period` fires, before that epoch's Yuma Consensus runs; commits older than that
have expired. Subtensor keys commits by epoch, so the limit of unrevealed commits counts one
hotkey's commits in one epoch.
"""

from __future__ import annotations

from dataclasses import dataclass

from distrai.chain.base import ChainError, Hyperparameters

MAX_UNREVEALED_COMMITS = 10
"""Subtensor's limit on one hotkey's unrevealed commits in one epoch."""
MIN_REVEAL_PERIOD = 1
MAX_REVEAL_PERIOD = 100
"""Subtensor's bounds on `RevealPeriodEpochs` (`MIN_COMMIT_REVEAL_PEROIDS`, `MAX_COMMIT_REVEAL_PEROIDS`)."""


@dataclass(frozen=True)
class CommitCall:
    """Everything `check_commit_weights` needs, read from the chain by the caller."""

    registered: bool
    block: int
    last_update: int
    """The block the hotkey last committed, set weights or registered; 0 means never."""
    unrevealed_this_epoch: int
    """The hotkey's commits already keyed by the current epoch."""


def check_reveal_period(period: int) -> None:
    """Subtensor's `set_reveal_period` bounds."""
    if period < MIN_REVEAL_PERIOD:
        raise ChainError("RevealPeriodTooSmall", f"reveal period {period} is below {MIN_REVEAL_PERIOD}")
    if period > MAX_REVEAL_PERIOD:
        raise ChainError("RevealPeriodTooLarge", f"reveal period {period} exceeds {MAX_REVEAL_PERIOD}")


def check_commit_weights(call: CommitCall, hp: Hyperparameters) -> None:
    """Subtensor's `internal_commit_timelocked_weights` checks, in its order."""
    if not hp.commit_reveal_weights:
        raise ChainError("CommitRevealDisabled", "this subnet sets weights directly; use set_weights")
    if not call.registered:
        raise ChainError("HotKeyNotRegisteredInSubNet", "the signer holds no uid on this subnet")
    if call.last_update and call.block - call.last_update < hp.weights_rate_limit:
        raise ChainError(
            "CommittingWeightsTooFast",
            f"last commit at block {call.last_update}; wait until block {call.last_update + hp.weights_rate_limit}",
        )
    if call.unrevealed_this_epoch >= MAX_UNREVEALED_COMMITS:
        raise ChainError(
            "TooManyUnrevealedCommits",
            f"{call.unrevealed_this_epoch} commits already wait in this epoch (at most {MAX_UNREVEALED_COMMITS})",
        )


def reveal_epoch(current_epoch: int, reveal_period: int) -> int:
    """The commit epoch whose commits open when epoch `current_epoch` fires (negative: none yet)."""
    return current_epoch - reveal_period


def is_commit_expired(commit_epoch: int, current_epoch: int, reveal_period: int) -> bool:
    """Subtensor's `is_commit_expired`: the epoch that should have opened it has passed."""
    return current_epoch > commit_epoch + reveal_period
