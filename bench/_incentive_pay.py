"""What the miners of the bench's windows were paid, from their window scores, by the project's own
rule: each window's scores wait `maturity_windows` windows and then enter the moving averages
(`validators.pay`), and the weights follow the averages (`scoring.weights_from_averages`); a miner's
pay is the sum of its weights over the windows, its pay per token that over the tokens its manifests
claimed in the windows whose scores matured. Pure functions."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from _incentive_windows import Miner, WindowRecord

from validators.pay import add_window, mature
from validators.scoring import weights_from_averages

TOLERANCE = 0.10
"""pay per token within ±10% of one another; split pay within ±10% of one hotkey's"""
DOCKED_TARGET = 0.01
"""honest miner-windows whose passing update the `useful` gate fails: at most 1%"""


def chain_pay(
    records: Sequence[WindowRecord], hotkeys: Sequence[str], alpha: float, maturity: int
) -> dict[str, float]:
    """Each miner's weights summed over the windows, its scores maturing `maturity` windows late."""
    averages = dict.fromkeys(hotkeys, 0.0)
    pending: dict = {}
    paid = dict.fromkeys(hotkeys, 0.0)
    for record in records:
        pending = add_window(pending, record.window, {hk: record.miners[hk].score for hk in hotkeys})
        averages, pending = mature(averages, pending, record.window - maturity, alpha)
        weights = weights_from_averages([averages[hk] for hk in hotkeys], burn_share=0.0, owner_uid=None)
        for hk, weight in zip(hotkeys, weights, strict=True):
            paid[hk] += weight
    return paid


@dataclass(frozen=True)
class MinerPay:
    miner: Miner
    tokens: int
    """claimed in the windows whose scores matured"""
    pay: float
    """its weights summed over the windows"""
    qualities: list[float]
    """its pay per token, window by window: score / tokens claimed (1 passed, 0 failed)"""
    marks_z: list[float]
    drops: list[float]
    """the loss drop of its last segment's sequences, window by window"""

    @property
    def pay_per_token(self) -> float:
        return self.pay / self.tokens if self.tokens else math.nan

    @property
    def unpaid_windows(self) -> int:
        return sum(q == 0 for q in self.qualities)


def miner_pay(
    records: Sequence[WindowRecord], miners: Sequence[Miner], alpha: float, maturity: int
) -> dict[str, MinerPay]:
    """Label → what the miner was paid over `records`."""
    hotkeys = [m.hotkey for m in miners]
    paid = chain_pay(records, hotkeys, alpha, maturity)
    matured = records[: max(0, len(records) - maturity)]
    return {
        m.label: MinerPay(
            miner=m,
            tokens=sum(r.miners[m.hotkey].tokens for r in matured),
            pay=paid[m.hotkey],
            qualities=[r.miners[m.hotkey].pay_per_token for r in records],
            marks_z=[r.miners[m.hotkey].numbers.get("mark_z", math.nan) for r in records],
            drops=[r.miners[m.hotkey].numbers.get("drop_trained", math.nan) for r in records],
        )
        for m in miners
    }


def spread(values: Sequence[float]) -> float:
    """max / min − 1: how far apart the values are (infinite when one is 0 or not a number)."""
    if any(not v > 0 for v in values):
        return math.inf
    return max(values) / min(values) - 1


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
