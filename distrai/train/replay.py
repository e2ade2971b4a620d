"""The validator's side of a segment: restore the revealed start state into a fresh inner
optimizer, run the same steps on the same batches through the same `run_steps`, and compare
with the revealed end state.

On CPU with equal `determinism.fingerprint`s the comparison is bit equality (`states_equal`, or
equal `state_hash`). Otherwise use `replay_distance`, the distance between the replayed and the
claimed end relative to the segment's own movement, against a calibrated tolerance.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import torch

from distrai.train.inner import InnerConfig, base_anchor, run_steps
from distrai.train.loss import LossFn
from distrai.train.optimizer import make_inner_optimizer
from distrai.train.train_state import TrainState, capture_state, restore_state


@dataclass(frozen=True)
class Replay:
    """The state a replay reached and the losses it measured on the way."""

    end: TrainState
    losses: list[float]


def replay_segment(
    model: torch.nn.Module,
    start: TrainState,
    batches: Sequence[torch.Tensor],
    loss_fn: LossFn,
    config: InnerConfig,
    base: Mapping[str, torch.Tensor] | None = None,
) -> Replay:
    """Run `batches` as inner steps start.step, start.step + 1, … from `start`; the model ends
    holding the replayed parameters. `base` is the window's base (G_w), which every step is
    anchored to when the run sets `base_anchor`: the validator's own G_w, never the miner's claim."""
    optimizer = make_inner_optimizer(model, config.optimizer)
    restore_state(model, optimizer, start)
    anchor = None if base is None else base_anchor(model, base, config)
    results = run_steps(model, optimizer, batches, loss_fn, config, start.step, anchor)
    return Replay(
        end=capture_state(model, optimizer, start.step + len(batches)), losses=[r.loss for r in results]
    )


def replay_distance(start: TrainState, claimed_end: TrainState, replayed_end: TrainState) -> float:
    """‖θ_replayed − θ_claimed‖ / ‖θ_claimed − θ_start‖ over all parameters, in float64
    (0 when they agree; infinite when the claimed segment did not move but the replay differs)."""
    names = sorted(start.params)
    if sorted(claimed_end.params) != names or sorted(replayed_end.params) != names:
        raise ValueError("the three states do not name the same parameters")
    gap = 0.0
    movement = 0.0
    for name in names:
        claimed = claimed_end.params[name].double()
        gap += float((replayed_end.params[name].double() - claimed).pow(2).sum())
        movement += float((claimed - start.params[name].double()).pow(2).sum())
    if gap == 0.0:
        return 0.0
    return math.inf if movement == 0.0 else math.sqrt(gap / movement)
