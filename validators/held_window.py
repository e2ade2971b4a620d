"""What a validator keeps of the window it checked last: the window as its checks read it, its
verdicts and the miners' stores as they stood at the reveal deadline. The next window re-checks the
other validators' findings (`validators.findings`) and receipts (`validators.receipts`) of it against
this, and reads again what a miner withheld (`validators.withheld`)."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from validators.checks import MinerVerdict
from validators.inventory import Reader
from validators.window import WindowBasis


@dataclass(frozen=True)
class HeldWindow:
    """What a validator keeps of the window it checked last, to re-check the others' findings of it."""

    basis: WindowBasis
    """the window as every check of it read it"""
    verdicts: dict[str, MinerVerdict]
    """miner → this validator's verdict, without the decoded update (a dense copy of the model per
    miner is too much to keep for a window; a re-check decodes the one it needs again)"""
    readers: dict[str, Reader]
    """miner → its store as it stood at the reveal deadline"""

    @property
    def window(self) -> int:
        return self.basis.number


def held_window(basis: WindowBasis, verdicts: list[MinerVerdict], readers: dict[str, Reader]) -> HeldWindow:
    """What to keep of a window just checked; the verdicts lose their decoded updates and blobs."""
    kept = {v.hotkey: dataclasses.replace(v, blob=None, checked=None, decoded=None) for v in verdicts}
    return HeldWindow(basis, kept, readers)
