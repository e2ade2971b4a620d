"""The validator's state on disk: written atomically, resumed exactly, aligned with the metagraph."""

from __future__ import annotations

import json
import logging
import os
import tempfile
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field

from distrai.node.metrics import Metrics, last_record
from distrai.node.metrics_records import ValidatorWindowRecord
from validators.pay import Pending

log = logging.getLogger("distrai.validator")


class Suspension(BaseModel):
    """A miner barred for withholding what it committed to in `window` (`validators.withheld`): paid
    nothing and its scores held from maturing (`validators.pay`) until this validator's own re-read one
    window later settles it; the bar it had before is given back if the withheld objects are there
    and sound."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    window: int
    banned_until: int
    """the bar before this one (-1: none)"""


class OwnAggregate(BaseModel):
    """What this validator's own aggregate of `window` took and reached: kept with the state so the
    next window can compare it with the aggregate the network followed, across a restart too."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    window: int
    result_hash: str
    accepted: list[str]
    """the accepted updates' hotkeys, sorted"""


class ValidatorState(BaseModel):
    """Scores and averages per uid (index = uid), the last window done, and bans by hotkey."""

    model_config = ConfigDict(extra="forbid")

    run_id: str
    window: int = -1
    """The last window whose scores are folded into `averages`; -1 before the first."""
    hotkeys: list[str] = Field(default_factory=list)
    averages: list[float] = Field(default_factory=list)
    """The moving average of each uid's matured scores: what the weights follow."""
    pending: Pending = Field(default_factory=dict)
    """Hotkey → its window scores not yet matured (`validators.pay`)."""
    last_scores: list[float] = Field(default_factory=list)
    banned_until: dict[str, int] = Field(default_factory=dict)
    """Hotkey → the first window in which it may score again."""
    residuals: dict[str, str] = Field(default_factory=dict)
    """Hotkey → the residual_out_hash of its last manifest: the next must carry it in."""
    last_weights_block: int = -1
    workers: list[str] = Field(default_factory=list)
    """The validators that did their share of the last window's measurements (paid by weights)."""
    suspended: dict[str, Suspension] = Field(default_factory=dict)
    """Hotkey → its bar for a withheld reveal, until this validator reads the reveal again."""
    refuted_until: dict[str, int] = Field(default_factory=dict)
    """Validator hotkey → the first window in which its measurements are taken, and it is paid as a
    worker, again here after one was refuted (`validators.shared_scoring`)."""
    own_aggregate: OwnAggregate | None = None
    """The last aggregate this validator published (`validators.aggregating.leader_agreement`)."""
    record: ValidatorWindowRecord | None = None
    """The metrics record of `window`, saved with the scores it describes: a validator stopped after
    the save and before the record reached its metrics file writes it there when it starts again."""

    def aligned(self, hotkeys: list[str]) -> ValidatorState:
        """This state for the metagraph's current hotkeys (index = uid).

        A uid whose hotkey changed (a new registration took the slot) starts from zero, with nothing
        pending; the arrays grow or shrink with the metagraph; bans stay with their hotkeys.
        """
        averages, scores = [], []
        for uid, hotkey in enumerate(hotkeys):
            same = uid < len(self.hotkeys) and self.hotkeys[uid] == hotkey
            averages.append(self.averages[uid] if same else 0.0)
            scores.append(self.last_scores[uid] if same else 0.0)
        kept = {hk for uid, hk in enumerate(hotkeys) if uid < len(self.hotkeys) and self.hotkeys[uid] == hk}
        return self.model_copy(
            update={
                "hotkeys": list(hotkeys),
                "averages": averages,
                "last_scores": scores,
                "pending": {hk: entries for hk, entries in self.pending.items() if hk in kept},
            }
        )

    def is_banned(self, hotkey: str, window: int) -> bool:
        return self.banned_until.get(hotkey, -1) > window

    def distrusted(self, window: int) -> set[str]:
        """The validators whose measurements of `window` this one does not take: refuted before."""
        return {hotkey for hotkey, until in self.refuted_until.items() if until > window}


def save_state(state: ValidatorState, path: Path) -> None:
    """Write by temp file, fsync and rename: a crash leaves the old state or the new, never half."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w") as f:
            f.write(state.model_dump_json(indent=1))
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def load_state(path: Path, run_id: str) -> ValidatorState:
    """The saved state, or a fresh one if none exists; a state of another run is refused."""
    if not path.exists():
        return ValidatorState(run_id=run_id)
    try:
        state = ValidatorState.model_validate(json.loads(path.read_text()))
    except (ValueError, json.JSONDecodeError) as exc:
        raise ValueError(f"validator state {path} is unreadable: {exc}") from exc
    if state.run_id != run_id:
        raise ValueError(f"validator state {path} belongs to run {state.run_id[:12]}…, not {run_id[:12]}…")
    return state


def write_saved_record(state: ValidatorState, metrics: Metrics) -> None:
    """Write the last window's metrics record, saved with `state`, when the metrics file does not
    have it: the validator stopped after saving its state and before writing the record."""
    record = state.record
    if record is None:
        return
    last = last_record(metrics.path)
    if last is not None and last.window >= state.window:
        return
    metrics.log(state.window, record)
    log.warning(
        "window %d: its metrics record was saved with the state but not written (the validator "
        "stopped between the two); written now",
        state.window,
    )
