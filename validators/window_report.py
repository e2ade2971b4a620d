"""The body of a validator's signed report of a window (`WindowReport`): every miner's verdicts,
numbers, score and where its pay stands, the aggregates refused, the findings, measurements and
receipts re-checked, and the validators paid as workers. Pure: the validator signs and publishes it."""

from __future__ import annotations

from dataclasses import dataclass

from distrai.protocol.runtime import Runtime
from distrai.wire.window_documents import MinerEntry, PayStanding, Recheck, Refusal, WindowReport
from validators.checks import MinerVerdict
from validators.pay import matures_at, pending_total
from validators.receipts import ReplayAudit
from validators.shared_scoring import Pooled
from validators.validator_state import ValidatorState


@dataclass(frozen=True)
class Found:
    """What a validator found in a window: its verdicts, the aggregates it refused to follow, its
    re-checks of the other validators' findings, the window's measurements as pooled, and its audit
    of their replays."""

    verdicts: list[MinerVerdict]
    refused: list[Refusal]
    rechecks: list[Recheck]
    pooled: Pooled
    audit: ReplayAudit


def pay_standing(state: ValidatorState, hotkey: str, maturity_windows: int) -> PayStanding | None:
    """Where `hotkey`'s pay stands in `state` (None: not in the metagraph it was folded with)."""
    if hotkey not in state.hotkeys:
        return None
    return PayStanding(
        average=state.averages[state.hotkeys.index(hotkey)],
        pending=pending_total(state.pending, hotkey),
        matures_at=matures_at(state.pending, hotkey, maturity_windows),
        held=hotkey in state.suspended,
    )


def window_report(
    runtime: Runtime, validator: str, w: int, observed_block: int, found: Found, state: ValidatorState
) -> WindowReport:
    """The report of window w by `validator`, whose `state` has the window folded in."""
    maturity = runtime.config.scoring.maturity_windows
    return WindowReport(
        run_id=runtime.run_id,
        window=w,
        validator=validator,
        observed_block=observed_block,
        miners={
            v.hotkey: MinerEntry(
                uid=v.uid,
                verdicts=v.verdicts,
                numbers=v.numbers,
                score=v.score,
                reason=v.reason,
                pay=pay_standing(state, v.hotkey, maturity),
            )
            for v in found.verdicts
        },
        refused=found.refused,
        rechecks=found.rechecks,
        measured_by=found.pooled.measured_by,
        measurement_rechecks=found.pooled.rechecks,
        workers=state.workers,
        receipt_rechecks=found.audit.rechecks,
    )
