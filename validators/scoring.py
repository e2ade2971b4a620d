"""From a miner's per-window verdicts to its score, the moving average, and weights on chain.

Pay follows verified work: a window score is the tokens the miner's manifest commits to having
trained (steps × batch × sequence length: what a challenge can check by replay), for an update that
passes every check, `useful` included (the update alone lowers the loss of the sequences of its last
segment: clear non-work fails it), up to the tokens its measured gain vouches for (`vouched_tokens`:
an update that delivers far less than the window's work of its size, such as an honest update scaled
down, is paid as the smaller work its gain shows). There is no cap at the window's median: a miner
twice as fast earns twice as much, and the same compute earns the same under one hotkey or many.
Every check is a gate in front of the score (a miner that fails one scores 0), never a share of it,
so presence and well-formedness alone earn nothing. What keeps a claim honest is that it is paid only
once it has been open to challenge (`validators.pay`, `validators.deterrence`). Pure functions: the
validator's loop gathers the numbers, these turn them into scores.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Mapping, Sequence

from distrai.chain.base import Metagraph
from distrai.protocol.run import ScoringConfig
from validators.validator_state import ValidatorState


def tokens_trained(steps: int, batch_size: int, seq_len: int) -> int:
    """The tokens a manifest of `steps` inner steps commits to having trained."""
    return steps * batch_size * seq_len


def vouched_tokens(
    claims: Mapping[str, float], gains: Mapping[str, float], *, floor: float, exponent: float
) -> dict[str, float]:
    """The tokens each passing update's measured gain vouches for (hotkey → tokens; its claim when the
    gain clears the floor, less when it does not).

    `claims` are the tokens each manifest commits to, `gains` each update's relative loss drop on the
    window's reserve (sequences no miner was assigned, drawn after the commit deadline). Gain grows
    with work more slowly than linearly, about as tokens ** `exponent`, so the window's yardstick is
    m, the median of gain / claim ** exponent over the window's passing updates: what the window's
    work delivers per unit of work of its size. An update vouches for the claim whose typical gain
    is `floor` of its own, (gain / (floor · m)) ** (1 / exponent) tokens, and is paid at most that:

    - honest work of any size clears the floor (it delivers about m · claim ** exponent, and `floor`
      leaves room for the spread between miners), so it is paid its claim;
    - an honest update scaled by s delivers about s of its gain and vouches for about
      (s / floor) ** (1 / exponent) of its claim: at s = 1e-4 (floor 0.25, exponent 0.3) 5e-12 of it;
    - an update whose gain is 0 or less vouches for nothing.

    An update alone is its own yardstick and clears it. Without a yardstick (no positive median: most
    updates lower the reserve's loss by nothing) or with `floor` 0, every claim stands. The rule reads the other miners only through the
    median, so moving m takes half the window's updates (docs/protocol.md, "Scores")."""
    if floor <= 0 or not claims:
        return dict(claims)
    per_work = [gains[hk] / claims[hk] ** exponent for hk in claims if claims[hk] > 0]
    yardstick = statistics.median(per_work) if per_work else 0.0
    if not yardstick > 0 or not math.isfinite(yardstick):
        return dict(claims)
    return {hk: _vouched(claim, gains[hk], floor * yardstick, exponent) for hk, claim in claims.items()}


def _vouched(claim: float, gain: float, bar: float, exponent: float) -> float:
    """`claim` when `gain` reaches `bar` · claim ** exponent, else the claim whose bar `gain` is."""
    if not gain > 0:
        return 0.0
    if gain >= bar * claim**exponent:
        return claim
    return (gain / bar) ** (1.0 / exponent)


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
