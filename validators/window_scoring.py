"""A window's scores, once every check has run: what each passed update did, one share per piece
of work, then each score: the tokens the miner verifiably trained times the quality of its update.

1. Usefulness (`usefulness.py`): the update alone on G_w, sequence by sequence, on a sample of the
   miner's own trained sequences and on the window's reserve, both drawn by the window's challenge
   seed: its mark of its own data.
2. Duplicates (`duplicates.py`): updates that are one piece of work under several hotkeys keep one
   share, the one that bears the mark of its own data best.
3. Scores (`scoring.py`): the window's typical mark among the miners that show one; each passing
   miner scores its tokens times its quality (full from `mark_share` of the typical mark); every
   other miner scores 0. In a window whose marks cannot be measured yet (early in a run, when an
   update's generic gain swamps what it memorised) every passing update has quality 1, and one that
   does not even lower the loss of its own sequences fails `useful`. Once marks are measured, an
   honest update alone may raise the loss (a long inner run drifts from the base), and the mark,
   not the drop, says whether it is the miner's own work.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from distrai.globalmodel import GlobalModel
from distrai.runtime import Runtime
from validators.checks import PASS, MinerVerdict
from validators.duplicates import flag_duplicates
from validators.scoring import mark_reference, quality, tokens_trained
from validators.usefulness import Samples, measure, window_samples


def score_window(
    runtime: Runtime,
    model: GlobalModel,
    window: int,
    verdicts: Sequence[MinerVerdict],
    miners: list[str],
    commit_blocks: Mapping[str, int],
    seed: bytes,
) -> None:
    """Set every verdict's `score` (and the `useful` and `duplicate` verdicts where they apply).
    `seed` is the window's challenge seed, which draws the sequences scored."""
    if any(v.passed for v in verdicts):
        samples = window_samples(runtime, model, window, seed, miners)
        for v in verdicts:
            if v.passed:
                measure_usefulness(runtime, model, window, samples, v, miners)
    scoring, train = runtime.config.scoring, runtime.config.train
    flag_duplicates(verdicts, commit_blocks, scoring.duplicate_cosine, f"{runtime.run_id}/duplicates")
    reference = mark_reference([(v.numbers["mark"], v.numbers["mark_z"]) for v in verdicts if v.passed])
    for v in verdicts:
        if v.passed and not reference.judged and not v.numbers["drop_trained"] > 0:
            v.verdicts["useful"] = "the update does not lower the loss of the sequences it was trained on"
        if not v.passed:
            v.score = 0.0
            continue
        v.verdicts["useful"] = PASS
        tokens = tokens_trained(v.manifest.steps, train.batch_size, runtime.config.data.seq_len)
        factor = quality(v.numbers["mark"], v.numbers["mark_z"], reference, scoring.mark_share)
        v.numbers.update(
            tokens=float(tokens),
            reference_mark=reference.value,
            mark_judged=float(reference.judged),
            quality=factor,
        )
        v.score = tokens * factor


def measure_usefulness(
    runtime: Runtime,
    model: GlobalModel,
    window: int,
    samples: Samples,
    verdict: MinerVerdict,
    miners: list[str],
) -> None:
    """The update alone on G_w: its loss drops on the miner's trained sequences and on the reserve."""
    result = measure(
        runtime, model, window, samples, verdict.hotkey, verdict.manifest.steps, verdict.update, miners
    )
    verdict.numbers.update(
        drop_trained=result.trained.mean,
        drop_unseen=result.unseen.mean,
        mark=result.mark,
        mark_z=result.mark_z,
    )
