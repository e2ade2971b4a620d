"""What one update did: apply it alone to G_w and measure the loss, sequence by sequence, on two
samples drawn by the window's challenge seed, which nobody knew while training.

- the miner's own: sequences of those it trained on in the last segment its manifest claims (the
  last k steps, whatever its length, so every miner is measured alike), drawn uniformly over the
  segment's batches (`assignment.trained_sample`);
- the window's reserve, which no miner was assigned (`assignment.unassigned_indices`), the same
  sequences for every miner of the window.

Training leaves a mark: an update lowers the loss of the sequences it was trained on more than
that of sequences it never saw, and most for those it saw last. The mark is the difference of the
two mean relative drops, with its standard error from the per-sequence drops. Work published under
a hotkey that did not train it (a copy of another miner's update, however re-encoded or disguised,
or an update of an earlier window) meets that hotkey's sequences as unseen and shows no mark.
Because the seed picks the sequences after the commit deadline, a miner cannot fit the score to a
subset of its last segment's data. What came before the last segment is checked by replay.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

import torch

from distrai.protocol.globalmodel import GlobalModel
from distrai.protocol.runtime import Runtime
from distrai.train.assignment import reserve_size, trained_sample, unassigned_indices
from distrai.train.evaluate import sequence_losses
from validators.window import WindowBasis


@dataclass(frozen=True)
class Drops:
    """Relative loss drops, sequence by sequence: (before − after) / before."""

    values: torch.Tensor

    @classmethod
    def between(cls, before: torch.Tensor, after: torch.Tensor) -> Drops:
        return cls(((before - after) / before).to(torch.float64))

    @property
    def mean(self) -> float:
        return float(self.values.mean())

    @property
    def variance_of_mean(self) -> float:
        n = self.values.numel()
        return float(self.values.var()) / n if n > 1 else math.inf


@dataclass(frozen=True)
class Usefulness:
    trained: Drops
    """on the sequences the miner trained on"""
    unseen: Drops
    """on the window's reserve"""

    @property
    def mark(self) -> float:
        """How much more the update lowers the loss of its own sequences than of unseen ones."""
        return self.trained.mean - self.unseen.mean

    @property
    def mark_z(self) -> float:
        """The mark over its standard error."""
        error = math.sqrt(self.trained.variance_of_mean + self.unseen.variance_of_mean)
        return 0.0 if error == 0.0 or not math.isfinite(error) else self.mark / error


@dataclass(frozen=True)
class Samples:
    """The window's reserve sample and G_w's losses on it, shared by every miner of the window."""

    seed: bytes
    unseen: torch.Tensor
    unseen_before: torch.Tensor


def window_samples(
    runtime: Runtime, model: GlobalModel, window: int, seed: bytes, miners: Sequence[str]
) -> Samples:
    """The reserve sample of the window, drawn by `seed`, and G_w's losses on it."""
    data = runtime.data
    count = min(
        runtime.config.scoring.usefulness_sequences, reserve_size(data.n_train, len(miners), data.unit)
    )
    reserve = data.batch(
        unassigned_indices(runtime.run_id, window, count, data.n_train, miners, seed.hex(), data.unit)
    )
    runtime.load_params(model.params)
    return Samples(seed, reserve, _losses(runtime, reserve))


def measure(
    basis: WindowBasis, samples: Samples, hotkey: str, steps: int, update: dict[str, torch.Tensor]
) -> Usefulness:
    """The update alone on G_w (at outer learning rate 1), on the miner's sample and the reserve's."""
    runtime, model, window, miners = basis.runtime, basis.base, basis.number, basis.miners
    cfg, data = runtime.config, runtime.data
    own = data.batch(
        trained_sample(
            runtime.run_id,
            window,
            samples.seed,
            hotkey,
            cfg.scoring.usefulness_sequences,
            range(max(0, steps - cfg.train.segment_steps), steps),
            cfg.train.batch_size,
            data.n_train,
            miners,
            data.unit,
        )
    )
    runtime.load_params(model.params)
    own_before = _losses(runtime, own)
    runtime.load_params({name: model.params[name] - update[name] for name in model.params})
    own_after = _losses(runtime, own)
    unseen_after = _losses(runtime, samples.unseen)
    runtime.load_params(model.params)
    return Usefulness(
        Drops.between(own_before, own_after), Drops.between(samples.unseen_before, unseen_after)
    )


def _losses(runtime: Runtime, sequences: torch.Tensor) -> torch.Tensor:
    return sequence_losses(
        runtime.model, sequences, loss_fn=runtime.loss_fn, cpu_threads=runtime.config.train.cpu_threads
    )


def measure_updates(
    basis: WindowBasis,
    seed: bytes,
    updates: Mapping[str, tuple[int, dict[str, torch.Tensor]]],
    keep_going: Callable[[], bool] = lambda: True,
) -> dict[str, Usefulness]:
    """Each of `updates` (hotkey → the steps its manifest claims and its decoded update) measured
    on the window's base, with the samples `seed` draws, in hotkey order while `keep_going()` says so."""
    if not updates:
        return {}
    samples = window_samples(basis.runtime, basis.base, basis.number, seed, basis.miners)
    measured = {}
    for hotkey, (steps, update) in sorted(updates.items()):
        if not keep_going():
            break
        measured[hotkey] = measure(basis, samples, hotkey, steps, update)
    return measured
