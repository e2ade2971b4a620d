"""One miner on N processes (`torchrun --nproc-per-node N neurons/miner.py …`): data parallel.

Every process holds the whole model; rank 0 (the leader) is the miner, with the one hotkey, chain
connection, store and manifest. The other ranks (followers) only train: at each window the leader
sends the window's base parameters, then for every inner step the step's index and its whole batch;
each rank trains its own rows of it under `DistributedDataParallel`, whose backward pass
all-reduces the gradients, so every rank takes the same optimizer step and holds the same state
(`step.py`). The leader alone captures boundary states, encodes and uploads. One command tensor
per step carries [kind, step, rows, columns]; the batch is a few hundred kilobytes (32 × 2048
int64 tokens: 512 KiB), small beside the gradient all-reduce (4 B/param: 620 MB at 150M).

On CPU the processes talk over gloo, so the same code runs in CI; on GPUs over NCCL, one GPU per
rank (`cuda:LOCAL_RANK`).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from contextlib import nullcontext
from dataclasses import dataclass, field
from datetime import timedelta

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel

WINDOW, STEP, SHUTDOWN = 1, 2, 3
"""Commands from the leader: a window starts (its base parameters follow), a step (its batch
follows), the miner stops."""

IDLE_TIMEOUT = timedelta(hours=6)
"""How long a follower waits for the leader's next command: the leader sleeps between windows and
may wait several windows for a base model it cannot reach yet."""


@dataclass(frozen=True)
class Command:
    kind: int
    step: int = 0
    shape: tuple[int, int] = (0, 0)


@dataclass
class DataParallel:
    """This process's place among the miner's ranks, and the model wrapped for the all-reduce."""

    rank: int
    world: int
    device: torch.device
    model: torch.nn.Module
    _ddp: DistributedDataParallel | None = field(default=None, repr=False)

    @property
    def leader(self) -> bool:
        return self.rank == 0

    @property
    def ddp(self) -> DistributedDataParallel:
        """The model under `DistributedDataParallel`, made when first needed: its construction is
        collective, and it happens at the first window on every rank."""
        if self._ddp is None:
            ids = [self.device.index] if self.device.type == "cuda" else None
            self._ddp = DistributedDataParallel(self.model, device_ids=ids, forward_sync_buffers=False)
        return self._ddp

    def accumulate(
        self, chunks: Sequence[torch.Tensor], forward: Callable[[torch.nn.Module, torch.Tensor], torch.Tensor]
    ) -> list[torch.Tensor]:
        """Forward and backward of this rank's chunks, the all-reduce riding on the last backward;
        returns every rank's chunk losses in rank order (so each rank reports the same mean)."""
        losses = []
        for i, chunk in enumerate(chunks):
            last = i == len(chunks) - 1
            with nullcontext() if last else self.ddp.no_sync():
                losses.append(forward(self.ddp, chunk))
        local = torch.stack(losses)
        gathered = [torch.empty_like(local) for _ in range(self.world)]
        dist.all_gather(gathered, local)
        return list(torch.cat(gathered))

    # -- the leader's commands ------------------------------------------------------------------

    def start_window(self) -> None:
        """Leader: a window starts from the model's current parameters; every rank takes them."""
        self._send(Command(WINDOW))
        self.share_parameters()

    def start_step(self, step: int, batch: torch.Tensor) -> None:
        """Leader: inner step `step` trains on `batch`, the whole batch of every rank."""
        rows, columns = batch.shape
        self._send(Command(STEP, step, (rows, columns)))
        dist.broadcast(batch.to(self.device), src=0)

    def shutdown(self) -> None:
        """Leader: the miner stops; the followers return."""
        self._send(Command(SHUTDOWN))

    # -- the followers' side --------------------------------------------------------------------

    def next_command(self) -> Command:
        """Follower: wait for the leader's next command."""
        header = torch.zeros(4, dtype=torch.int64, device=self.device)
        dist.broadcast(header, src=0)
        kind, step, rows, columns = (int(v) for v in header.tolist())
        return Command(kind, step, (rows, columns))

    def receive_batch(self, command: Command) -> torch.Tensor:
        """Follower: the batch of a STEP command."""
        batch = torch.empty(command.shape, dtype=torch.int64, device=self.device)
        dist.broadcast(batch, src=0)
        return batch

    def share_parameters(self) -> None:
        """Every rank: take rank 0's parameters."""
        with torch.no_grad():
            for p in self.model.parameters():
                dist.broadcast(p.data, src=0)

    def _send(self, command: Command) -> None:
        header = torch.tensor(
            [command.kind, command.step, *command.shape], dtype=torch.int64, device=self.device
        )
        dist.broadcast(header, src=0)


def smallest(value: int | None, device: torch.device | str) -> int | None:
    """Every rank, first thing after joining: the smallest of the ranks' `value`s (their memory
    budgets, so all plan the same split); None when any rank has none."""
    held = torch.tensor([-1 if value is None else value], dtype=torch.int64, device=device)
    dist.all_reduce(held, op=dist.ReduceOp.MIN)
    least = int(held.item())
    return None if least < 0 else least


def all_started(started: bool, device: torch.device | str) -> bool:
    """Every rank, once it has built what it trains with or failed to: whether every rank did. A
    rank that failed stops them all, the leader included, instead of leaving it waiting."""
    flag = torch.tensor([1 if started else 0], dtype=torch.int64, device=device)
    dist.all_reduce(flag, op=dist.ReduceOp.MIN)
    return bool(flag.item())


@dataclass(frozen=True)
class Launch:
    """What torchrun told this process."""

    rank: int
    world: int
    local_rank: int

    def device(self, requested: str) -> torch.device:
        """`cuda` becomes this rank's GPU (`cuda:LOCAL_RANK`); a CPU stays the CPU."""
        device = torch.device(requested)
        if device.type == "cuda":
            return torch.device("cuda", self.local_rank)
        return device


def launched() -> Launch | None:
    """This process's ranks when torchrun started more than one, else None."""
    world = int(os.environ.get("WORLD_SIZE", "1"))
    if world <= 1:
        return None
    return Launch(int(os.environ["RANK"]), world, int(os.environ.get("LOCAL_RANK", os.environ["RANK"])))


def join(launch: Launch, device: torch.device) -> None:
    """Join the miner's process group (NCCL on GPUs, gloo on CPU); collective, every rank calls it."""
    if device.type == "cuda":
        torch.cuda.set_device(device)
    dist.init_process_group(
        "nccl" if device.type == "cuda" else "gloo",
        rank=launch.rank,
        world_size=launch.world,
        timeout=IDLE_TIMEOUT,
    )


def leave() -> None:
    if dist.is_initialized():
        dist.destroy_process_group()
