"""What a validator has noted about a window it has not finished checking, kept on disk.

Two facts must be taken at their moment and cannot be taken again later: the miners registered
when the window starts (their data assignment depends on the list) and what the miners' stores
held at the reveal deadline (`inventory.py`). On pipelined windows the validator checks window w
during window w + 1, so it notes window w + 1's miners while it waits, and a validator killed
after the reveal deadline resumes with the listing it took in time instead of a late one.
One JSON file per window under `<work dir>/pending/`, written atomically and removed once the
window's scores are folded into the saved state.
"""

from __future__ import annotations

import json
from pathlib import Path

from pydantic import BaseModel, ConfigDict, ValidationError

from distrai.protocol.windows import WindowConfig, aggregate_deadline, reveal_deadline, window_of
from validators.inventory import Inventory


class PendingWindow(BaseModel):
    model_config = ConfigDict(extra="forbid")

    window: int
    miners: list[str]
    """the hotkeys registered at the window's roster block (`distrai.protocol.windows.roster_block`)"""
    noted_block: int
    inventory_block: int | None = None
    present: dict[str, list[str]] | None = None
    """store URL → keys it held at the reveal deadline"""
    unreachable: list[str] = []
    late: dict[str, int] = {}
    """store URL → the block of a listing taken after the deadline, the store not answering then"""
    probe_failed: dict[str, int] = {}
    """store URL → the last block of the reveal phase at which it did not answer this validator's
    probe (`validators.reveal_probe`)"""

    def inventory(self) -> Inventory | None:
        if self.inventory_block is None or self.present is None:
            return None
        return Inventory(
            self.inventory_block,
            {url: frozenset(keys) for url, keys in self.present.items()},
            frozenset(self.unreachable),
            dict(self.late),
        )

    def with_inventory(self, inventory: Inventory) -> PendingWindow:
        return self.model_copy(
            update={
                "inventory_block": inventory.block,
                "present": {url: sorted(keys) for url, keys in inventory.present.items()},
                "unreachable": sorted(inventory.unreachable),
                "late": dict(inventory.late),
            }
        )


class PendingWindows:
    def __init__(self, folder: Path):
        self.folder = folder

    def path(self, window: int) -> Path:
        return self.folder / f"w{window}.json"

    def load(self, window: int) -> PendingWindow | None:
        """The notes on `window`, or None when there are none (or they are unreadable)."""
        try:
            return PendingWindow.model_validate(json.loads(self.path(window).read_text()))
        except (OSError, ValueError, ValidationError):
            return None

    def save(self, pending: PendingWindow) -> None:
        self.folder.mkdir(parents=True, exist_ok=True)
        tmp = self.path(pending.window).with_suffix(".tmp")
        tmp.write_text(pending.model_dump_json())
        tmp.replace(self.path(pending.window))

    def clear_through(self, window: int) -> None:
        """Remove the notes on `window` and every earlier one."""
        for path in self.folder.glob("w*.json") if self.folder.exists() else []:
            number = path.stem[1:]
            if number.isdigit() and int(number) <= window:
                path.unlink(missing_ok=True)


def next_to_check(notes: PendingWindows, windows: WindowConfig, block: int, last_checked: int) -> int:
    """The oldest window after `last_checked` whose reveals can still be listed in time at `block`,
    or whose listing was taken before a restart (in `notes`) and whose aggregate is still due."""
    current = window_of(windows, block)
    first = max(last_checked + 1, current - 1, 0)
    for w in range(first, current + 2):
        pending = notes.load(w)
        listed = pending is not None and pending.inventory() is not None
        if block < reveal_deadline(windows, w) or (listed and block < aggregate_deadline(windows, w)):
            return w
    return max(first, current + 1)
