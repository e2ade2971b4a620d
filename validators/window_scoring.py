"""A window's scores, once every check has run and the updates are measured: one share per piece
of work, then each score: the tokens the miner's manifest commits to, for an update that does work.

1. Measurements (`usefulness.py`, shared among the validators by `shared_scoring.py`): each update
   alone on G_w, sequence by sequence, on a sample of the miner's own trained sequences and on the
   window's reserve, both drawn by the window's challenge seed: the mark of its own data.
2. Duplicates (`duplicates.py`): updates that are one piece of work under several hotkeys keep one
   share, the one whose replay passed here or whose mark of its own data stands out.
3. Scores (`scoring.py`): each passing miner scores its tokens, once its update passes `useful`: it
   lowers the loss of the sequences of its last segment, which an update that did the work does and
   a zero, a noise or a harmful update does not. The mark does not decide pay: at the GPU config its
   size is unknown and, where it was measured, its noise docked honest miners (docs/incentives.md).
   The score is at most the tokens the update's gain on the reserve vouches for, against the
   window's other passing updates (`scoring.vouched_tokens`): honest work clears that floor, an
   update scaled far down does not. What keeps a claim honest is the challenge and pay that
   matures (`validators.pay`). A passing miner whose update nobody measured in time is not scored
   (`unmeasured`): it is left pending without a score, and its moving average is left as it was
   when the window matures.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from distrai.protocol.runtime import Runtime
from distrai.wire.verdicts import PASS, Check, Number
from distrai.wire.window_documents import Measurement
from validators.checks import MinerVerdict
from validators.duplicates import flag_duplicates
from validators.scoring import tokens_trained, vouched_tokens


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
    for v in verdicts:
        if v.passed and Number.MARK not in v.numbers:
            v.unmeasured = True
        elif v.passed and not v.numbers[Number.DROP_TRAINED] > 0:
            v.fail(
                Check.USEFUL,
                "the update does not lower the loss of the sequences of its last segment",
                fraud=False,
            )
        if not v.passed or v.unmeasured:
            v.score = 0.0
            continue
        v.verdicts[Check.USEFUL] = PASS
        assert v.manifest is not None, "a passed verdict holds its manifest"
        tokens = tokens_trained(v.manifest.steps, train.batch_size, runtime.config.data.seq_len)
        v.numbers[Number.TOKENS] = float(tokens)
    scored = [v for v in verdicts if v.passed and not v.unmeasured]
    vouched = vouched_tokens(
        {v.hotkey: v.numbers[Number.TOKENS] for v in scored},
        {v.hotkey: v.numbers[Number.DROP_UNSEEN] for v in scored},
        floor=scoring.gain_floor,
        exponent=scoring.gain_exponent,
    )
    for v in scored:
        v.numbers[Number.VOUCHED] = vouched[v.hotkey]
        v.score = vouched[v.hotkey]
