"""Replay classes: which replays of a segment can be bit-exact, and what tolerance the others get.

A segment replays bit for bit when the replaying node runs the same kernels on the same hardware
as the miner did: same device model, torch, CUDA, parameter dtype, autocast, attention kernel,
AdamW implementation, compilation and the embedding's and loss's kernels (a validator always replays with the miner's split over ranks and
micro-batches, and its sharding, which the manifest records). Measured on 150M
parameters (`../shared/measurements/gpu-2026-11-23.md`): bit-exact on one GPU model with
deterministic algorithms, SDPA included; H100 against H200 in bfloat16 0.0095 (eager) to 0.0113
(SDPA); fp32 bit-exact even across the two. So a miner's manifest records its `ReplayClass`, and a
validator compares:

- bit for bit when its own class is the miner's (`Tolerance.exact`);
- else within the run config's row for the two devices (`ClassTolerance`), when the rest of the
  two classes agree;
- else within the run's default tolerance, which the run config requires to be at least every
  row's: a miner on hardware no row names is never held to a tighter bound than one on common
  hardware (docs/protocol.md, "Replay classes").
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

import torch

from distrai.train.kernels import kernels_of
from distrai.train.step import StepConfig
from distrai.wire.window_documents import ReplayClass


class ClassRow(Protocol):
    """One row of the run config's tolerance table (`distrai.protocol.run.ClassTolerance`)."""

    devices: tuple[str, str]
    replay: float
    loss: float
    measured: str


@dataclass(frozen=True)
class Tolerance:
    replay: float
    loss: float
    why: str

    @property
    def exact(self) -> bool:
        return self.replay == 0.0


def device_name(device: torch.device) -> str:
    """The device model: the GPU's name, or the CPU with the instruction set its kernels use."""
    if device.type == "cuda":
        return torch.cuda.get_device_name(device)
    return f"{device.type} ({torch.backends.cpu.get_cpu_capability()})"


def replay_class_of(
    model: torch.nn.Module,
    device: torch.device,
    step: StepConfig,
    adamw: str = "single",
    compiled: bool = False,
) -> ReplayClass:
    """The replay class of training `model` on `device` with this process's torch, with `step`'s
    split and autocast, the `adamw` implementation, the model under `torch.compile` or not, and the
    kernels its embedding runs (`kernels.kernels_of`: the run's loss follows the same setting)."""
    dtype = next(model.parameters()).dtype
    return ReplayClass(
        device=device_name(device),
        torch=torch.__version__,
        cuda=torch.version.cuda if device.type == "cuda" else None,
        dtype=str(dtype).removeprefix("torch."),
        attention=str(getattr(model.config, "_attn_implementation", "unknown")),
        micro_batches=step.micro_batches,
        ranks=step.ranks,
        sharded=step.sharded,
        autocast=step.autocast,
        adamw=adamw,
        compiled=compiled,
        kernels=kernels_of(model),
    )


def tolerance_for(
    miner: ReplayClass | None, validator: ReplayClass, table: Sequence[ClassRow], default: Tolerance
) -> Tolerance:
    """How a validator of class `validator` compares its replay of a miner of class `miner` (None:
    the manifest names none). The validator replays with the miner's split (ranks, micro-batches and
    sharding), so the split never separates the two classes: a miner's ranks add their gradients in
    rank order, which one process repeats (`parallel.rank_ordered_all_reduce`,
    `parallel.RankOrderedReduceScatter`)."""
    if miner is None:
        return default
    split = {"micro_batches": miner.micro_batches, "ranks": miner.ranks, "sharded": miner.sharded}
    mine = validator.model_copy(update=split)
    if mine == miner:
        return Tolerance(0.0, 0.0, f"bit-exact: the same replay class ({miner.device})")
    if mine.model_copy(update={"device": miner.device}) == miner:
        pair = {miner.device, validator.device}
        for row in table:
            if set(row.devices) == pair:
                return Tolerance(
                    row.replay, row.loss, f"{miner.device} against {validator.device}: {row.measured}"
                )
    return default
