"""A window folded into a validator's state: its scores waiting to mature and the matured ones in the
moving averages, bars for fraud, holds for withheld reveals, and the validators distrusted or paid as
workers for the window's shared work. One pure function; the validator saves what it returns."""

from __future__ import annotations

import logging

from distrai.protocol.run import ScoringConfig
from validators.checks import MinerVerdict
from validators.pay import add_window, forfeit, mature
from validators.receipts import ReplayAudit
from validators.shared_scoring import REFUTED as MEASUREMENT_REFUTED
from validators.shared_scoring import Pooled
from validators.validator_state import Suspension, ValidatorState

log = logging.getLogger("distrai.validator")


def fold_window(
    state: ValidatorState,
    w: int,
    hotkeys: list[str],
    verdicts: list[MinerVerdict],
    adopted: list[str],
    pooled: Pooled,
    audit: ReplayAudit,
    scoring: ScoringConfig,
) -> ValidatorState:
    """`state` with window w folded in, for the metagraph's `hotkeys` (index = uid): the window's
    scores added to those waiting to mature, and those of window w − `maturity_windows` folded into
    the moving averages (`validators.pay`); a miner caught in fraud here, or by another validator's
    finding adopted here (`adopted`), forfeits every score not yet matured, has its average zeroed
    and is barred; one that withheld its reveal is held until the re-read. The window's workers are
    `pooled`'s whose replays of the window before `audit` found covered; a validator whose
    measurement or receipt was refuted here is distrusted for `ban_windows`
    (`validators.shared_scoring`, `validators.receipts`)."""
    state = state.aligned(hotkeys)
    scores: dict[str, float | None] = dict.fromkeys(hotkeys, 0.0)
    for v in verdicts:
        if v.uid < len(hotkeys) and hotkeys[v.uid] == v.hotkey:
            scores[v.hotkey] = None if v.unmeasured else v.score
    pending = add_window(state.pending, w, scores)
    averages = dict(zip(hotkeys, state.averages, strict=True))
    banned = dict(state.banned_until)
    suspended = dict(state.suspended)
    caught = [v for v in verdicts if v.fraud and v.uid < len(hotkeys) and hotkeys[v.uid] == v.hotkey]
    for v in caught:
        if v.withheld:
            suspended[v.hotkey] = Suspension(window=w, banned_until=banned.get(v.hotkey, -1))
        banned[v.hotkey] = w + 1 + scoring.ban_windows
        log.warning("window %d: uid %d barred until window %d: %s", w, v.uid, banned[v.hotkey], v.reason)
    for hotkey in [v.hotkey for v in caught if not v.withheld] + list(adopted):
        if hotkey in averages:
            pending, lost = forfeit(pending, hotkey)
            averages[hotkey] = 0.0
            if lost > 0:
                log.warning("window %d: %s forfeits %.0f of pay not yet matured", w, hotkey[:10], lost)
    averages, pending = mature(averages, pending, w - scoring.maturity_windows, scoring.ema_alpha, suspended)
    refuted_until, workers = distrust(state.refuted_until, w, pooled, audit, scoring.ban_windows)
    return state.model_copy(
        update={
            "window": w,
            "averages": [averages[hk] for hk in hotkeys],
            "pending": pending,
            "last_scores": [0.0 if scores[hk] is None else scores[hk] for hk in hotkeys],
            "banned_until": banned,
            "suspended": suspended,
            "workers": workers,
            "refuted_until": refuted_until,
        }
    )


def distrust(
    refuted_until: dict[str, int], w: int, pooled: Pooled, audit: ReplayAudit, ban_windows: int
) -> tuple[dict[str, int], list[str]]:
    """Validator → the first window its measurements are taken again here, with those whose
    measurement (`pooled`'s re-checks) or receipt (`audit`) was refuted in window w distrusted for
    `ban_windows`; and the window's workers: `pooled`'s whose replays `audit` found covered."""
    refuted_until = {hk: until for hk, until in refuted_until.items() if until > w}
    for validator in sorted({r.validator for r in pooled.rechecks if r.outcome == MEASUREMENT_REFUTED}):
        refuted_until[validator] = w + 1 + ban_windows
        log.warning(
            "window %d: validator %s's measurement refuted: its measurements are not taken, and it is "
            "paid no worker share, here until window %d",
            w,
            validator[:10],
            refuted_until[validator],
        )
    for validator in sorted(audit.refuted):
        refuted_until[validator] = w + 1 + ban_windows
        log.warning(
            "window %d: validator %s's receipt for a replay of window %s refuted: its measurements are not "
            "taken, and it is paid no worker share, here until window %d",
            w,
            validator[:10],
            audit.window,
            refuted_until[validator],
        )
    for validator in sorted(audit.uncovered & set(pooled.workers)):
        log.warning(
            "window %d: validator %s left replays of its share of window %s without a receipt or a finding: "
            "no worker share here this window",
            w,
            validator[:10],
            audit.window,
        )
    workers = [v for v in pooled.workers if v not in audit.uncovered and v not in audit.refuted]
    return refuted_until, workers
