"""A window's scores, once every check has run: the usefulness of each passed update, one share
per piece of work, then each score against what an honest update brought this window.

1. Usefulness (`usefulness.py`): the update alone on G_w, its relative loss drop on the miner's
   assigned data and on the window's reserve. An update that does not lower the loss on its own
   data fails `useful`.
2. Duplicates (`duplicates.py`): updates that are one piece of work under several hotkeys keep
   one share, the one that fits its own assigned data best.
3. Scores (`scoring.py`): the reference is the median drop of the miners still passing; each
   passing miner scores its drop over the reference, capped at 1; every other miner scores 0.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from distrai.globalmodel import GlobalModel
from distrai.runtime import Runtime
from validators.checks import PASS, MinerVerdict
from validators.duplicates import flag_duplicates
from validators.scoring import reference_drop, usefulness_score
from validators.usefulness import measure, sample_sequences


def score_window(
    runtime: Runtime,
    model: GlobalModel,
    window: int,
    verdicts: Sequence[MinerVerdict],
    miners: list[str],
    commit_blocks: Mapping[str, int],
) -> None:
    """Set every verdict's `score` (and the `useful` and `duplicate` verdicts where they apply)."""
    for v in verdicts:
        if v.passed:
            measure_usefulness(runtime, model, window, v, miners)
    scoring = runtime.config.scoring
    flag_duplicates(verdicts, commit_blocks, scoring.duplicate_cosine, f"{runtime.run_id}/duplicates")
    reference = reference_drop([v.numbers["drop_assigned"] for v in verdicts if v.passed])
    for v in verdicts:
        if not v.passed:
            v.score = 0.0
            continue
        v.verdicts["useful"] = PASS
        v.numbers["reference_drop"] = reference
        v.score = usefulness_score(v.numbers["drop_assigned"], v.numbers["drop_unassigned"], reference)


def measure_usefulness(
    runtime: Runtime, model: GlobalModel, window: int, verdict: MinerVerdict, miners: list[str]
) -> None:
    """The update alone on G_w: its loss drops on the miner's assigned data and on the reserve."""
    own, other = sample_sequences(runtime, window, verdict.hotkey, miners, verdict.manifest.steps)
    result = measure(runtime, model, verdict.update, own, other)
    verdict.numbers.update(
        loss_before=result.base_assigned,
        loss_after=result.after_assigned,
        drop_assigned=result.drop_assigned,
        drop_unassigned=result.drop_unassigned,
    )
    if not result.drop_assigned > 0:
        verdict.verdicts["useful"] = "the update does not lower the loss on its own data"
