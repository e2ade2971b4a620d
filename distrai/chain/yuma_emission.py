"""How one epoch's emission is paid out: subtensor's dynamic-TAO coinbase for a single subnet.

Follows `coinbase/run_coinbase.rs` (`emit_to_subnets`, `distribute_emission`) and the emission
scores at the end of `epoch/run_epoch.rs`, for a subnet without a root network, child keys or
validator takes (every dividend goes to the validator's own hotkey).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

import numpy as np

from distrai.chain.yuma_math import Vector, normalize

SUBTENSOR_OWNER_CUT = 0.18
"""Subtensor's default SubnetOwnerCut (11796 / 65535)."""


class EpochShares(Protocol):
    """What the payout reads of an epoch (`distrai.chain.yuma.EpochResult`), per uid."""

    @property
    def stake(self) -> Vector: ...

    @property
    def active_stake(self) -> Vector: ...

    @property
    def incentive(self) -> Vector: ...

    @property
    def dividends(self) -> Vector: ...


@dataclass(frozen=True)
class EmissionSplit:
    """One epoch's emission: `server.sum() + validator.sum() + owner + burned == total`."""

    server: Vector
    """Per uid, paid for incentive (miners)."""
    validator: Vector
    """Per uid, paid for dividends (validators)."""
    owner: float
    """The subnet owner's cut."""
    burned: float
    """Paid to nobody: incentive on owner uids, or the rest when no uid has stake."""

    @property
    def total(self) -> float:
        return float(self.server.sum() + self.validator.sum() + self.owner + self.burned)


def split_emission(
    result: EpochShares,
    total_emission: float,
    owner_cut: float = SUBTENSOR_OWNER_CUT,
    owner_uids: Sequence[int] = (),
) -> EmissionSplit:
    """Split `total_emission` as subtensor does.

    The owner takes `owner_cut`; of the rest, half goes to miners by incentive and half to
    validators by dividends. When no miner has incentive (no usable weights) there are no
    dividends either, and validators get the whole rest by active stake (by stake when no
    stake is active), as subtensor's epoch falls back to. When no uid has stake at all,
    subtensor credits that rest to nobody: it is reported as `burned`. (Dividends without
    incentive cannot happen; incentive without dividends would pay miners the whole rest.)
    Incentive that lands on `owner_uids` (the owner's own hotkeys, which validators weight
    to burn emission) is burned too, as subtensor does by default (it may recycle instead).
    """
    if not (np.isfinite(total_emission) and total_emission >= 0):
        raise ValueError(f"total_emission must be finite and >= 0, got {total_emission}")
    if not 0.0 <= owner_cut <= 1.0:
        raise ValueError(f"owner_cut must be in [0, 1], got {owner_cut}")
    n = result.incentive.shape[0]
    if any(not 0 <= uid < n for uid in owner_uids):
        raise ValueError(f"owner_uids {list(owner_uids)} are not all uids of this {n}-uid subnet")

    owner = total_emission * owner_cut
    rest = total_emission - owner
    server_budget = rest * 0.5
    validator_budget = rest - server_budget

    score_sum = result.incentive.sum() + result.dividends.sum()
    if score_sum > 0:
        server = result.incentive / score_sum * rest
        validator_scores = result.dividends / score_sum
    else:
        server = np.zeros(n)
        validator_scores = result.active_stake if result.active_stake.any() else result.stake
    validator_pot = validator_budget if server.any() else validator_budget + server_budget
    validator = normalize(validator_scores) * validator_pot
    burned = 0.0 if validator_scores.any() or server.any() else validator_pot

    server = server.copy()
    burn_mask = np.zeros(n, dtype=bool)
    burn_mask[list(owner_uids)] = True
    burned += float(server[burn_mask].sum())
    server[burn_mask] = 0.0
    return EmissionSplit(server=server, validator=validator, owner=owner, burned=burned)
