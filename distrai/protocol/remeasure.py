"""The re-measurement: a follower evaluates an aggregate's result on a sample of the run's held-out
split and refuses one that raises the loss over its base by more than the run's tolerance
(`follow.heldout_tolerance`). It needs no stake and no other validator: it holds when the aggregator
holds most of the stake and every report that counts is its own.

- **The sample.** `follow.heldout_sequences` held-out sequences, drawn from the hash of the block at
  the window's aggregate deadline. The aggregate is anchored before that block exists, so nobody can
  fit an aggregate to the sample; no miner trains on the held-out split.
- **Every node the same decision.** The loss is taken in float32 on a model of the node's own (the
  working model is left alone), in eval mode, without autocast, `COMPARED_BATCH` sequences per forward
  and the run's `train.cpu_threads` on a CPU, under the process's deterministic settings
  (`distrai.train.determinism`). Nodes of one replay class get the same bits and so the same
  decision; nodes whose numerics differ can disagree only on a result whose rise lies within their
  difference of the tolerance (docs/protocol.md, "Following an aggregate").
"""

from __future__ import annotations

import dataclasses
import hashlib
import math
from collections.abc import Mapping, Sequence

import torch

from distrai.protocol.globalmodel import Contradiction
from distrai.protocol.runtime import Runtime, model_spec
from distrai.train.evaluate import COMPARED_BATCH, evaluate
from distrai.train.model import load_model

SAMPLE_TAG = b"distrai/heldout-sample/1"


def sample_seed(block_hash_at_aggregate_deadline: str, run_id: str, window: int) -> bytes:
    """The seed of window `window`'s held-out sample: nobody knows it before the aggregate deadline."""
    h = hashlib.sha256(SAMPLE_TAG)
    for part in (
        block_hash_at_aggregate_deadline.lower().encode(),
        run_id.encode(),
        window.to_bytes(8, "big"),
    ):
        h.update(len(part).to_bytes(8, "big"))
        h.update(part)
    return h.digest()


def heldout_sample(seed: bytes, population: int, count: int) -> list[int]:
    """`count` distinct indices of the `population` held-out sequences (all of them when there are
    no more), ascending: index i of the draw is sha256(seed, i) mod population, repeats skipped."""
    if population < 1 or count < 1:
        raise ValueError(
            f"a held-out sample needs a population and a count of at least 1, got {population}, {count}"
        )
    if count >= population:
        return list(range(population))
    chosen: set[int] = set()
    draw = 0
    while len(chosen) < count:
        digest = hashlib.sha256(seed + draw.to_bytes(8, "big")).digest()
        chosen.add(int.from_bytes(digest, "big") % population)
        draw += 1
    return sorted(chosen)


def loss_rise(before: float, after: float) -> float:
    """How much `after` raises the loss over `before`, as a share of `before` (negative: it lowers it)."""
    if not before > 0:
        raise ValueError(f"the base's held-out loss must be above zero, got {before}")
    return (after - before) / before


def check_not_worse(before: float, after: float, tolerance: float) -> None:
    """Raise `SyncError` when the result's loss `after` is not finite or exceeds the base's `before` by
    more than `tolerance` of it."""
    if not math.isfinite(after):
        raise Contradiction(
            f"its result's loss on the window's held-out sample is {after}, its base's {before:.4f}"
        )
    rise = loss_rise(before, after)
    if rise > tolerance:
        raise Contradiction(
            f"its result raises the loss on the window's held-out sample from {before:.4f} to {after:.4f} "
            f"({rise:+.2%}), more than the run's tolerance of {tolerance:.2%}"
        )


class HeldoutJudge:
    """Held-out losses of global models, on a float32 copy of the run's model kept for this alone."""

    def __init__(self, runtime: Runtime):
        self.runtime = runtime
        self._model: torch.nn.Module | None = None

    def model(self) -> torch.nn.Module:
        if self._model is None:
            spec = dataclasses.replace(model_spec(self.runtime.config.model), dtype="float32")
            self._model = load_model(spec, tokenizer=self.runtime.tokenizer, device=self.runtime.device)
        return self._model

    def loss(self, params: Mapping[str, torch.Tensor], indices: Sequence[int]) -> float:
        """Mean next-token loss of the model with `params` on the held-out sequences at `indices`."""
        model = self.model()
        with torch.no_grad():
            for name, p in model.named_parameters():
                p.copy_(params[name])
        sequences = self.runtime.data.heldout[list(indices)]
        with torch.autocast(self.runtime.device.type, enabled=False):
            return evaluate(
                model,
                sequences,
                loss_fn=self.runtime.loss_fn,
                batch_size=COMPARED_BATCH,
                cpu_threads=self.runtime.config.train.cpu_threads,
            )
