"""From a miner's per-window verdicts to its score, the moving average, and weights on chain.

Pay follows verified work: a window score is the tokens the miner's manifest commits to having
trained (steps × batch × sequence length: what a challenge can check by replay), for an update that
passes every check, `useful` included (the update alone lowers the loss of the sequences of its last
segment: clear non-work fails it). There is no cap at the window's median: a miner twice as fast
earns twice as much, and the same compute earns the same under one hotkey or many. Every check is a
gate in front of the score (a miner that fails one scores 0), never a share of it, so presence and
well-formedness alone earn nothing. What keeps a claim honest is that it is paid only once it has
been open to challenge (`validators.pay`, `validators.deterrence`). Pure functions: the validator's
loop gathers the numbers, these turn them into scores.
"""

from __future__ import annotations

from collections.abc import Sequence

from distrai.chain.base import Metagraph
from distrai.protocol.run import ScoringConfig
from validators.validator_state import ValidatorState


def tokens_trained(steps: int, batch_size: int, seq_len: int) -> int:
    """The tokens a manifest of `steps` inner steps commits to having trained."""
    return steps * batch_size * seq_len


def weights_from_averages(
    averages: Sequence[float],
    *,
    burn_share: float,
    owner_uid: int | None,
    exclude: Sequence[int] = (),
    workers: Sequence[int] = (),
    worker_share: float = 0.0,
) -> list[float]:
    """Normalized weights: `worker_share` split evenly over the `workers` (validators that did their
    share of the window's measurements), `burn_share` to the owner's uid, the rest to the averages
    (minus excluded uids).

    With nothing to pay the miners, their part goes to the owner's uid (burned), or, without one, it
    is not set; with nothing at all to pay, every weight is 0 and the caller skips setting weights.
    """
    excluded = set(exclude)
    kept = [0.0 if uid in excluded else max(0.0, a) for uid, a in enumerate(averages)]
    total = sum(kept)
    weights = [0.0] * len(averages)
    paid_workers = sorted({u for u in workers if 0 <= u < len(weights)}) if worker_share > 0 else []
    to_workers = worker_share if paid_workers else 0.0
    burn = burn_share if owner_uid is not None else 0.0
    if total > 0:
        payable = 1.0 - burn - to_workers
        weights = [payable * (k / total) for k in kept]  # the share first: payable * k underflows for tiny k
    for uid in paid_workers:
        weights[uid] += to_workers / len(paid_workers)
    if owner_uid is not None and 0 <= owner_uid < len(weights):
        weights[owner_uid] += burn if total > 0 else 1.0 - to_workers
    return weights


def state_weights(
    state: ValidatorState, mg: Metagraph, me: str, owner_hotkey: str | None, scoring: ScoringConfig
) -> list[float]:
    """The weights validator `me` sets from its `state` (`weights_from_averages`): the owner's
    burn share, miners held for a withheld reveal left out, and the other validators the state pays
    as workers given their share."""
    owner_uid = mg.uid_of(owner_hotkey) if owner_hotkey else None
    workers = [uid for hk in state.workers if hk != me and (uid := mg.uid_of(hk)) is not None]
    held = [uid for hk in state.suspended if (uid := mg.uid_of(hk)) is not None]
    return weights_from_averages(
        state.averages,
        burn_share=scoring.burn_share,
        owner_uid=owner_uid,
        exclude=held,
        workers=workers,
        worker_share=scoring.validator_share,
    )
