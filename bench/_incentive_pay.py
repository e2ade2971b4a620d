"""What the miners of the bench's windows were paid, from their window scores, by the project's own
rule (`validators/scoring.py`): each window the moving averages take the scores
(`ema_update`, from zero at the first scored window) and the weights follow them
(`weights_from_averages`); a miner's pay is the sum of its weights over the windows, its pay per
token that over the tokens its manifests committed to. Pure functions."""

from __future__ import annotations

import math
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from _incentive_windows import Miner, WindowRecord

from validators.scoring import ema_update, weights_from_averages

TOLERANCE = 0.10
"""pay per token within ±10% of one another; split pay within ±10% of one hotkey's"""


def chain_pay(records: Sequence[WindowRecord], hotkeys: Sequence[str], alpha: float) -> dict[str, float]:
    """Each miner's weights summed over the windows."""
    averages = [0.0] * len(hotkeys)
    paid = dict.fromkeys(hotkeys, 0.0)
    for record in records:
        averages = ema_update(averages, [record.miners[hk].score for hk in hotkeys], alpha)
        for hk, weight in zip(
            hotkeys, weights_from_averages(averages, burn_share=0.0, owner_uid=None), strict=True
        ):
            paid[hk] += weight
    return paid


@dataclass(frozen=True)
class MinerPay:
    miner: Miner
    tokens: int
    """over the windows"""
    pay: float
    """its weights summed over the windows"""
    qualities: list[float]
    """its pay per token, window by window: score / tokens"""
    marks_z: list[float]

    @property
    def pay_per_token(self) -> float:
        return self.pay / self.tokens

    @property
    def unpaid_windows(self) -> int:
        return sum(q == 0 for q in self.qualities)

    @property
    def mean_quality(self) -> float:
        return statistics.fmean(self.qualities)

    @property
    def quality_spread(self) -> float:
        """The standard deviation of its pay per token across windows (0 for one window)."""
        return statistics.stdev(self.qualities) if len(self.qualities) > 1 else 0.0


def miner_pay(records: Sequence[WindowRecord], miners: Sequence[Miner], alpha: float) -> dict[str, MinerPay]:
    """Label → what the miner was paid over `records`."""
    hotkeys = [m.hotkey for m in miners]
    paid = chain_pay(records, hotkeys, alpha)
    return {
        m.label: MinerPay(
            miner=m,
            tokens=sum(r.miners[m.hotkey].tokens for r in records),
            pay=paid[m.hotkey],
            qualities=[r.miners[m.hotkey].pay_per_token for r in records],
            marks_z=[r.miners[m.hotkey].numbers.get("mark_z", math.nan) for r in records],
        )
        for m in miners
    }


def spread(values: Sequence[float]) -> float:
    """max / min − 1: how far apart the values are (infinite when one is 0)."""
    low, high = min(values), max(values)
    return math.inf if low <= 0 else high / low - 1


@dataclass(frozen=True)
class GroupPay:
    label: str
    hotkeys: int
    tokens: int
    pay: float


def group_pay(pays: Mapping[str, MinerPay], groups: Mapping[str, Sequence[str]]) -> list[GroupPay]:
    """Each group of miners' labels (one operator's hotkeys) with its members' pay summed."""
    return [
        GroupPay(
            label,
            len(members),
            sum(pays[m].tokens for m in members),
            sum(pays[m].pay for m in members),
        )
        for label, members in groups.items()
    ]


def met(ok: bool) -> str:
    return "MET" if ok else "MISSED"
