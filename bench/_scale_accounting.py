"""What shared verification costs a validator, and moves per miner, for a run config at a subnet's
size: arithmetic from the config and the reveal sizes of `distrai.node.linkcheck`, no measurement.

- Replays: the window's seed challenges ⌈p · M⌉ of M miners, each replayed by r validators; the
  shares differ by at most one miner, so a validator replays at most ⌈⌈p · M⌉ · r / V⌉ miners, each
  s segments of k steps, and replays again `replay_rechecks` of the other validators' receipts (a run
  of at most s segments each, from its revealed start; `validators/receipts.py`). Its compute, as a
  share of one miner's window of h steps on the same GPU.
- Scoring: the validators share the usefulness measurements (`validators/shared_scoring.py`): the
  window's seed deals each update to `score_replicas` of them, so a validator measures at most
  ⌈M · score_replicas / V⌉ updates and re-measures `score_rechecks` of each other validator's
  (V − 1 of them; M updates at most in all),
  each 3 forward passes over `usefulness_sequences` sequences (`validators/usefulness.py`), and
  evaluates G_w on the window's reserve once; a forward pass costs about a third of a training
  step's FLOPs per token.
- Download per validator: every update, and the state and trajectory sample of each miner it replays
  or replays again.
- Traffic per miner: its update up and the accepted updates down (`aggregate_top_n` of them, from
  the aggregate), its reveal with probability p; the validators' downloads of its update (V of them)
  and of its reveal (r, with probability p). Against DDP: a ring all-reduce of the gradients in the
  model's dtype sends 2 · (W − 1)/W bytes of gradient per parameter per step.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from distrai.node import linkcheck
from distrai.protocol.run import RunConfig
from distrai.protocol.windows import challenge_count

FORWARD_SHARE_OF_STEP = 1 / 3
USEFULNESS_PASSES = 3
"""G_w and G_w − Δ on the miner's trained sequences, G_w − Δ on the window's reserve"""
RESERVE_PASSES = 1
"""G_w on the window's reserve, once per window"""


@dataclass(frozen=True)
class ScaleAccounting:
    miners: int
    validators: int
    steps_per_window: int
    """h: the inner steps a miner trains in a window on the GPU the accounting assumes"""
    params: int
    challenged: int
    replays_per_validator: int
    """the challenged miners it replays"""
    receipts_rechecked: float
    """the other validators' receipts it replays again, in expectation (`verification.replay_rechecks`)"""
    replay_steps: float
    replay_share: float
    """a validator's replayed steps over a miner's h"""
    measured_per_validator: int
    """the updates a validator measures: its share of the window's measurements and its re-checks"""
    scoring_share: float
    """a validator's usefulness evaluations, in training-step FLOPs, over a miner's window"""
    update_bytes: int
    reveal_bytes: int
    """a challenged miner's reveal beyond its update: its run's start state and the trajectory sample"""
    download_bytes: int
    """per validator per window: every update and the reveals it replays"""
    miner_traffic_bytes: float
    """per miner per window, expected, verification included"""
    ddp_bytes: float
    """per worker per window, a ring all-reduce of the gradients every step"""

    def seconds_at(self, bits_per_s: float) -> float:
        return self.download_bytes * 8 / bits_per_s

    @property
    def reduction(self) -> float:
        return self.ddp_bytes / self.miner_traffic_bytes

    @property
    def reveal_per_param(self) -> float:
        return self.reveal_bytes / self.params


def account(
    config: RunConfig, miners: int, validators: int, steps_per_window: int, params: int | None = None
) -> ScaleAccounting:
    """The accounting for `config` with `miners` miners and `validators` validators sharing the
    replays, each miner training `steps_per_window` steps; `params` defaults to the model's count."""
    n = linkcheck.parameter_count(config) if params is None else params
    v, train, scoring = config.verification, config.train, config.scoring
    challenged = challenge_count(v.challenge_miners, miners)
    replicas = min(v.replicas, validators)
    per_validator = math.ceil(challenged * replicas / validators)
    rechecked = v.replay_rechecks if validators > 1 else 0
    replay_steps = (per_validator + rechecked) * v.challenge_segments * train.segment_steps
    window_tokens = steps_per_window * train.batch_size * config.data.seq_len
    measured = min(miners, math.ceil(miners * min(scoring.score_replicas, validators) / validators))
    measured = min(miners, measured + scoring.score_rechecks * (validators - 1))
    passes = measured * USEFULNESS_PASSES + RESERVE_PASSES
    scoring_tokens = passes * scoring.usefulness_sequences * config.data.seq_len
    reveal = linkcheck.reveal_bytes(config, n, 1)
    beyond = reveal.total - reveal.update
    p = challenged / miners
    grad_bytes = linkcheck.DTYPE_BYTES[config.model.dtype]
    miner_traffic = reveal.update * (1 + scoring.aggregate_top_n + validators) + p * beyond * (1 + replicas)
    return ScaleAccounting(
        miners=miners,
        validators=validators,
        steps_per_window=steps_per_window,
        params=n,
        challenged=challenged,
        replays_per_validator=per_validator,
        receipts_rechecked=rechecked,
        replay_steps=replay_steps,
        replay_share=replay_steps / steps_per_window,
        measured_per_validator=measured,
        scoring_share=scoring_tokens * FORWARD_SHARE_OF_STEP / window_tokens,
        update_bytes=reveal.update,
        reveal_bytes=beyond,
        download_bytes=miners * reveal.update + (per_validator + rechecked) * beyond,
        miner_traffic_bytes=miner_traffic,
        ddp_bytes=2 * (miners - 1) / miners * grad_bytes * n * steps_per_window,
    )
