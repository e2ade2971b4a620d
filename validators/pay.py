"""Pay that matures: a window's score is paid only once the window has been open to challenge.

A manifest claims steps, and most claims are never replayed: at the GPU config a miner is replayed
about one window in sixteen. So a window's score does not enter the moving average (which the
weights follow) when the window is checked, but `maturity_windows` windows later; until then it is
pending, and a catch (fraud found by this validator, or another validator's finding adopted here)
forfeits every pending score of the hotkey, as well as zeroing its average. A claim that is not the
miner's work is paid only if no challenge finds it out for that long, and re-registering does not
help: a fresh hotkey starts with nothing matured (docs/protocol.md, "Pay that matures").

A hotkey whose reveal was withheld (`validators.withheld`) is held, not forfeited: its scores stop
maturing and it is paid nothing until the validator's re-read one window later settles it, after
which they mature as if nothing had happened (the reveal was sound) or are forfeited (it was not).

Pure functions over the validator's state; the validator's loop applies them once a window.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping

from pydantic import BaseModel, ConfigDict, Field


class PendingScore(BaseModel):
    """One window's score of one hotkey, waiting to enter its moving average."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    window: int = Field(ge=0)
    score: float | None = Field(ge=0.0, allow_inf_nan=False)
    """the window's score, in tokens; None: the update passed but nobody measured it in time, so when it
    matures the average is left as it was"""


Pending = dict[str, list[PendingScore]]
"""hotkey → its scores not yet matured, oldest first"""


def add_window(pending: Pending, window: int, scores: Mapping[str, float | None]) -> Pending:
    """`pending` with window `window`'s score of every hotkey in `scores` added."""
    added = {hotkey: list(entries) for hotkey, entries in pending.items()}
    for hotkey, score in scores.items():
        added.setdefault(hotkey, []).append(PendingScore(window=window, score=score))
    return added


def forfeit(pending: Pending, hotkey: str) -> tuple[Pending, float]:
    """`pending` without `hotkey`'s scores, and how much they came to."""
    lost = sum(entry.score or 0.0 for entry in pending.get(hotkey, []))
    return {hk: entries for hk, entries in pending.items() if hk != hotkey}, lost


def mature(
    averages: Mapping[str, float],
    pending: Pending,
    through: int,
    alpha: float,
    held: Collection[str] = (),
) -> tuple[dict[str, float], Pending]:
    """Each hotkey's scores of windows up to `through` folded into its moving average, oldest first
    (average = alpha · score + (1 − alpha) · average; an unmeasured score leaves it as it was), except
    the `held` hotkeys', which wait. Returns the averages of every hotkey in `averages` and the
    scores still pending."""
    folded = dict(averages)
    left: Pending = {}
    for hotkey, entries in pending.items():
        if hotkey in held:
            left[hotkey] = list(entries)
            continue
        average = folded.get(hotkey, 0.0)
        for entry in entries:
            if entry.window <= through and entry.score is not None:
                average = alpha * entry.score + (1.0 - alpha) * average
        if hotkey in folded:
            folded[hotkey] = average
        waiting = [entry for entry in entries if entry.window > through]
        if waiting:
            left[hotkey] = waiting
    return folded, left


def pending_total(pending: Pending, hotkey: str) -> float:
    """The sum of `hotkey`'s scores not yet matured (unmeasured ones count 0)."""
    return sum(entry.score or 0.0 for entry in pending.get(hotkey, []))


def matures_at(pending: Pending, hotkey: str, maturity_windows: int) -> int | None:
    """The window whose check matures `hotkey`'s oldest pending score (None: nothing pending)."""
    entries = pending.get(hotkey)
    return entries[0].window + maturity_windows if entries else None
