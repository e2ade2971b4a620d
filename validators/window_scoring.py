"""A window's scores, once every check has run and the updates are measured: one share per piece
of work, then each score: the tokens the miner verifiably trained times the quality of its update.

1. Measurements (`usefulness.py`, shared among the validators by `shared_scoring.py`): each update
   alone on G_w, sequence by sequence, on a sample of the miner's own trained sequences and on the
   window's reserve, both drawn by the window's challenge seed: the mark of its own data.
2. Duplicates (`duplicates.py`): updates that are one piece of work under several hotkeys keep one
   share, the one that bears the mark of its own data best.
3. Scores (`scoring.py`): each passing miner scores its tokens times its quality, a gate on how many
   standard errors its mark stands above zero (0 up to 2, 1 from 3); every other miner scores 0. In a window whose marks cannot be measured yet (early in a run, when an
   update's generic gain swamps what it memorised) every passing update has quality 1, and one that
   does not even lower the loss of its own sequences fails `useful`. Once marks are measured, an
   honest update alone may raise the loss (a long inner run drifts from the base), and the mark,
   not the drop, says whether it is the miner's own work. A passing miner whose update nobody
   measured in time is not scored (`unmeasured`): its moving average is left as it was.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from distrai.protocol.runtime import Runtime
from distrai.wire.verdicts import PASS, Check, Number
from distrai.wire.window_documents import Measurement
from validators.checks import MinerVerdict
from validators.duplicates import flag_duplicates
from validators.scoring import marks_judged, quality, tokens_trained


def score_window(
    runtime: Runtime,
    verdicts: Sequence[MinerVerdict],
    measurements: Mapping[str, Measurement],
    commit_blocks: Mapping[str, int],
) -> None:
    """Set every verdict's `score` (and the `useful` and `duplicate` verdicts where they apply) from
    the window's measurements (miner → what its update did)."""
    for v in verdicts:
        if v.passed and v.hotkey in measurements:
            v.numbers.update(measurements[v.hotkey].model_dump())
    scoring, train = runtime.config.scoring, runtime.config.train
    flag_duplicates(verdicts, commit_blocks, scoring.duplicate_cosine, f"{runtime.run_id}/duplicates")
    measured = [v for v in verdicts if v.passed and Number.MARK in v.numbers]
    judged = marks_judged([v.numbers[Number.MARK_Z] for v in measured])
    for v in verdicts:
        if v.passed and Number.MARK not in v.numbers:
            v.unmeasured = True
        elif v.passed and not judged and not v.numbers[Number.DROP_TRAINED] > 0:
            v.verdicts[Check.USEFUL] = "the update does not lower the loss of the sequences it was trained on"
        if not v.passed or v.unmeasured:
            v.score = 0.0
            continue
        v.verdicts[Check.USEFUL] = PASS
        assert v.manifest is not None, "a passed verdict holds its manifest"
        tokens = tokens_trained(v.manifest.steps, train.batch_size, runtime.config.data.seq_len)
        factor = quality(v.numbers[Number.MARK_Z], judged)
        v.numbers.update(
            {Number.TOKENS: float(tokens), Number.MARK_JUDGED: float(judged), Number.QUALITY: factor}
        )
        v.score = tokens * factor
