"""How much one update helps: apply it alone to G_w and measure the loss on the miner's assigned
data and on data nobody was assigned (after Templar's Gauntlet)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch

from distrai.globalmodel import GlobalModel
from distrai.runtime import Runtime
from distrai.train.assignment import assigned_sample, unassigned_indices
from distrai.train.evaluate import evaluate


@dataclass(frozen=True)
class Usefulness:
    base_assigned: float
    base_unassigned: float
    after_assigned: float
    after_unassigned: float

    @property
    def drop_assigned(self) -> float:
        """Relative loss drop on the miner's own data."""
        return (self.base_assigned - self.after_assigned) / self.base_assigned

    @property
    def drop_unassigned(self) -> float:
        return (self.base_unassigned - self.after_unassigned) / self.base_unassigned


def sample_sequences(
    runtime: Runtime, window: int, hotkey: str, miners: Sequence[str], trained_steps: int
) -> tuple[torch.Tensor, torch.Tensor]:
    """A fixed sample of the miner's assigned sequences (of the `trained_steps` it trained, from as few
    shards as hold them) and as many from the window's reserve."""
    cfg, data = runtime.config, runtime.data
    assigned = assigned_sample(
        runtime.run_id,
        window,
        hotkey,
        cfg.scoring.usefulness_sequences,
        trained_steps,
        cfg.train.batch_size,
        data.n_train,
        miners,
        data.unit,
    )
    reserve = unassigned_indices(
        runtime.run_id, window, len(assigned), data.n_train, miners, salt=hotkey, unit=data.unit
    )
    return data.batch(assigned), data.batch(reserve)


def measure(
    runtime: Runtime,
    model: GlobalModel,
    update: dict[str, torch.Tensor],
    own: torch.Tensor,
    other: torch.Tensor,
) -> Usefulness:
    """Losses of G_w and of G_w − Δ (the update applied alone, at outer learning rate 1)."""
    threads = runtime.config.train.cpu_threads
    runtime.load_params(model.params)
    base_own = evaluate(runtime.model, own, loss_fn=runtime.loss_fn, cpu_threads=threads)
    base_other = evaluate(runtime.model, other, loss_fn=runtime.loss_fn, cpu_threads=threads)
    runtime.load_params({name: model.params[name] - update[name] for name in model.params})
    after_own = evaluate(runtime.model, own, loss_fn=runtime.loss_fn, cpu_threads=threads)
    after_other = evaluate(runtime.model, other, loss_fn=runtime.loss_fn, cpu_threads=threads)
    runtime.load_params(model.params)
    return Usefulness(base_own, base_other, after_own, after_other)
