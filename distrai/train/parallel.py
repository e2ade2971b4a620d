"""One miner on N processes (`torchrun --nproc-per-node N neurons/miner.py …`): data parallel.

Every process holds the whole model; rank 0 (the leader) is the miner, with the one hotkey, chain
connection, store and manifest. The other ranks (followers) only train: at each window the leader
sends the window's base parameters, then for every inner step the step's index and its whole batch;
each rank trains its own rows of it under `DistributedDataParallel`, whose backward pass
all-reduces the gradients, so every rank takes the same optimizer step and holds the same state
(`step.py`). The all-reduce adds the ranks' gradients in rank order (`rank_ordered_all_reduce`, a
DDP communication hook), not in the order of gloo's ring or NCCL's algorithms, so one process
replaying the miner's split repeats it bit for bit on any number of ranks. The leader alone
captures boundary states, encodes and uploads. One command tensor per step carries [kind, step, rows, columns]; the batch is a few hundred kilobytes (32 × 2048
int64 tokens: 512 KiB), small beside the gradient all-reduce (4 B/param: 620 MB at 150M).

With `FullyShardedParallel` the ranks shard the model instead (FSDP2, `fully_shard`): each holds
1/N of every parameter, of its gradient, of AdamW's moments and of the window's base; a decoder
layer's parameters are gathered only while it runs, and its gradients are reduced and scattered to
their shards after its backward. It is chosen when the training state does not fit one device but
fits sharded over the miner's ranks (`memory.py`), or asked for (`--miner.shard`). The replay in
one process still follows it bit for bit, for any number of ranks, because two sums are made to
run in one fixed order: each rank's gradient shard adds the ranks' scaled gradients in rank order
(`RankOrderedReduceScatter`, which replaces the collective's own order), and the gradient norm of
the clip is put together rank by rank from every rank's shard (`step.py`). Loading a window's
base and capturing a boundary state are collective: the leader says so (LOAD, STATE), and every
parameter and optimizer tensor goes to or comes from the leader's CPU one at a time, so no rank
ever holds more than one whole tensor beside its shards.

On CPU the processes talk over gloo, so the same code runs in CI; on GPUs over NCCL, one GPU per
rank (`cuda:LOCAL_RANK`).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from contextlib import nullcontext, suppress
from dataclasses import dataclass, field
from datetime import timedelta

import torch
import torch.distributed as dist
from torch.distributed.fsdp import FSDPModule, fully_shard

# the interface `FSDPModule.set_custom_reduce_scatter` takes; torch exports it from no public module
from torch.distributed.fsdp._fully_shard._fsdp_api import ReduceScatter
from torch.distributed.tensor import DTensor
from torch.nn.parallel import DistributedDataParallel

from distrai.train.launch import Launch, launched  # noqa: F401 (`parallel.launched` for the ranks)
from distrai.train.train_state import PARAM_PREFIX, TrainState, capture_state, state_entries

all_gather_single = getattr(dist, "all_gather_single", None) or dist.all_gather_into_tensor
"""One all-gather into one tensor: torch 2.13 names it `all_gather_single` and deprecates the older
name, `all_gather_into_tensor`, which is all an older torch may have."""

WINDOW, STEP, SHUTDOWN, LOAD, STATE = 1, 2, 3, 4, 5
"""Commands from the leader: a window starts (its base parameters follow, unless sharded), a step
(its batch follows), the miner stops; sharded ranks only: parameters follow (LOAD), gather the
training state after this step (STATE)."""

LEAVE_TIMEOUT = timedelta(minutes=1)
"""How long a rank that is done waits for the others before leaving the process group."""

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

    sharded = False
    """whether the ranks shard the model (`FullyShardedParallel`)"""

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
            self._ddp.register_comm_hook(None, rank_ordered_all_reduce)
        return self._ddp

    def load(self, params: Mapping[str, torch.Tensor] | None) -> None:
        """Only sharded ranks take parameters this way (`FullyShardedParallel.load`)."""
        raise RuntimeError("the model is not sharded: load the parameters into it directly")

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
        return self.every_rank(torch.stack(losses))

    def every_rank(self, local: torch.Tensor) -> list[torch.Tensor]:
        """Every rank's `local` (a 1-D tensor), concatenated in rank order on every rank."""
        gathered = [torch.empty_like(local) for _ in range(self.world)]
        dist.all_gather(gathered, local)
        return list(torch.cat(gathered))

    def capture(self, optimizer: torch.optim.Optimizer, step: int) -> TrainState | None:
        """Leader: the training state after `step` inner steps, on the CPU (every rank holds all of
        it here)."""
        return capture_state(self.model, optimizer, step)

    # -- the leader's commands ------------------------------------------------------------------

    def start_window(self) -> None:
        """Leader: a window starts from the model's current parameters; every rank takes them."""
        self._send(Command(WINDOW))
        self.share_parameters()

    def join_window(self) -> None:
        """Follower: a window starts; take the leader's parameters."""
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


def shard_rows(tensor: torch.Tensor, rank: int, world: int) -> torch.Tensor:
    """The rows of `tensor` that rank `rank` of `world` holds under `fully_shard`: its dimension 0
    cut by `torch.chunk`, empty for a rank past the last chunk."""
    chunks = torch.chunk(tensor, world, dim=0)
    return chunks[rank] if rank < len(chunks) else tensor.new_empty((0, *tensor.shape[1:]))


def add_in_rank_order(pieces: torch.Tensor, out: torch.Tensor) -> torch.Tensor:
    """Row r of `pieces` [world, n] is rank r's; into `out` [n]: each scaled by 1/world, added rank 0
    first, as a one-process replay adds the ranks' gradients (`step._accumulate_ranks`)."""
    world = pieces.shape[0]
    torch.mul(pieces[0], 1.0 / world, out=out)
    for piece in pieces[1:]:
        out.add_(piece.mul_(1.0 / world))
    return out


# no annotations: DDP checks a hook's against the objects themselves, and this module's are strings
def rank_ordered_all_reduce(group, bucket):  # (ProcessGroup | None, GradBucket) -> Future[Tensor]
    """`DistributedDataParallel`'s gradient all-reduce with the sum in rank order, so a one-process
    replay repeats it on any number of ranks (gloo's ring and NCCL's algorithms add in orders of their
    own): an all-to-all gives each rank every rank's piece of its share of the bucket, it adds them
    in rank order (`add_in_rank_order`), and an all-gather hands every rank the whole sum. The bytes
    each rank sends are a ring all-reduce's, 2 (N − 1)/N of the bucket."""
    group = group or dist.group.WORLD
    world = dist.get_world_size(group)
    flat = bucket.buffer()
    size = flat.numel()
    padded = torch.nn.functional.pad(flat, (0, -size % world)) if size % world else flat
    received = torch.empty_like(padded)
    dist.all_to_all_single(received, padded, group=group)
    pieces = received.view(world, -1)
    mine = add_in_rank_order(pieces, torch.empty_like(pieces[0]))
    summed = torch.empty_like(padded)
    all_gather_single(summed, mine, group=group)
    done: torch.futures.Future[torch.Tensor] = torch.futures.Future()
    done.set_result(summed[:size])
    return done


class RankOrderedReduceScatter(ReduceScatter):
    """FSDP2's gradient reduce-scatter with the sum in rank order: every rank sends each rank its
    piece of the gradients (an all-to-all, the same bytes a ring reduce-scatter moves) and adds the
    pieces it receives as a one-process replay adds the ranks' gradients: each scaled by
    1/world, rank 0's first (`step._accumulate_ranks`). FSDP2 itself then divides by nothing
    (`FullyShardedParallel.shard`)."""

    def allocate(
        self, size: Sequence[int | torch.SymInt], *, dtype: torch.dtype, device: torch.device
    ) -> torch.Tensor:
        return torch.empty(*size, dtype=dtype, device=device)

    def __call__(
        self,
        output_tensor: torch.Tensor,
        input_tensor: torch.Tensor,
        group: dist.ProcessGroup,
        op: object,
        async_op: bool = False,
    ) -> None:
        if op != dist.ReduceOp.SUM:
            raise ValueError(f"the rank-ordered reduce-scatter only sums, not {op}")
        received = torch.empty_like(input_tensor)
        dist.all_to_all_single(received, input_tensor, group=group)
        add_in_rank_order(received.view(group.size(), -1), output_tensor)


@dataclass
class FullyShardedParallel(DataParallel):
    """The miner's ranks sharding the model, its gradients, AdamW's state and the window's base
    (FSDP2); see the module's docstring."""

    sharded = True

    def __post_init__(self) -> None:
        if self.world < 2:
            raise ValueError(f"sharding needs at least 2 ranks, got {self.world}")

    def shard(self) -> None:
        """Every rank, once, before the first window: shard each decoder layer (the transformers
        model's `_no_split_modules`) and the rest of the model. The model's parameters become the
        ranks' shards, so an optimizer must be made after this."""
        layers = set(getattr(self.model, "_no_split_modules", None) or ())
        groups = [m for m in self.model.modules() if type(m).__name__ in layers]
        if not groups:
            raise ValueError(f"{type(self.model).__name__} names no decoder layers to shard")
        for module in groups:
            fully_shard(module)
        fully_shard(self.model)
        for module in self.model.modules():
            if isinstance(module, FSDPModule):
                module.set_custom_reduce_scatter(RankOrderedReduceScatter())
                module.set_force_sum_reduction_for_comms(True)
                module.set_gradient_divide_factor(1.0)

    def accumulate(
        self, chunks: Sequence[torch.Tensor], forward: Callable[[torch.nn.Module, torch.Tensor], torch.Tensor]
    ) -> list[torch.Tensor]:
        """Forward and backward of this rank's chunks; the gradients accumulate whole on each rank and
        are reduced to their shards after the last chunk's backward."""
        if not isinstance(self.model, FSDPModule):
            raise RuntimeError("the model is not sharded yet: call shard() on every rank first")
        losses = []
        for i, chunk in enumerate(chunks):
            self.model.set_requires_gradient_sync(i == len(chunks) - 1)
            losses.append(forward(self.model, chunk))
        return self.every_rank(torch.stack(losses))

    def start_window(self) -> None:
        """Leader: a window starts from the parameters the ranks hold (`load` put them there)."""
        self._send(Command(WINDOW))

    def join_window(self) -> None:
        """Follower: a window starts (its parameters came with LOAD)."""

    def load(self, params: Mapping[str, torch.Tensor] | None) -> None:
        """Every rank, the leader with `params` (whole tensors by parameter name) and first saying
        so: each parameter goes whole from the leader to every rank, which keeps its shard."""
        if params is not None:
            for name, p in self.model.named_parameters():
                if name not in params or params[name].shape != p.shape:
                    found = tuple(params[name].shape) if name in params else "nothing"
                    raise ValueError(
                        f"parameter {name} is {tuple(p.shape)}, the parameters to load hold {found}"
                    )
            self._send(Command(LOAD))
        with torch.no_grad():
            for name, p in self.model.named_parameters():
                whole = (
                    torch.empty(p.shape, dtype=p.dtype, device=self.device)
                    if params is None
                    else params[name].to(self.device, p.dtype, copy=True)
                )
                dist.broadcast(whole, src=0)
                local_part(p).copy_(shard_rows(whole, self.rank, self.world))

    def capture(self, optimizer: torch.optim.Optimizer, step: int) -> TrainState | None:
        """Every rank, the leader first saying so: each tensor of the state gathered whole, one at a
        time, in `state_entries`' order; the leader keeps them on its CPU and returns the state, the
        followers return None."""
        if self.leader:
            self._send(Command(STATE, step))
        params: dict[str, torch.Tensor] = {}
        optim: dict[str, torch.Tensor] = {}
        for section, key, value in state_entries(self.model, optimizer):
            whole = value.detach()
            if isinstance(whole, DTensor):
                whole = whole.full_tensor()
            if self.leader:
                (params if section == PARAM_PREFIX else optim)[key] = whole.to("cpu", copy=True)
        return TrainState(params=params, optimizer=optim, step=step) if self.leader else None


def local_part(tensor: torch.Tensor) -> torch.Tensor:
    """This rank's shard of a sharded tensor (the tensor itself when it is not sharded)."""
    return tensor.to_local() if isinstance(tensor, DTensor) else tensor


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


_LAST_BARRIER: list[dist.Work] = []
"""The barrier `leave` waited on, held until the interpreter ends (see `leave`)."""


def leave() -> None:
    """Every rank, last: wait for the others (at most `LEAVE_TIMEOUT`; a rank that failed does not
    come), then leave the process group.

    A gloo worker thread drops its hold on a collective just after completing it, and a thread that
    drops the last hold on a tensor made in Python takes the interpreter's lock to free it: after
    the interpreter began to finalize, that aborts the process ("terminate called without an active
    exception"; seen on sharded ranks, whose process group and threads torch's DTensor caches keep
    alive until then), and while the main thread destroys the group it deadlocks. The barrier holds
    every collective still held by a worker when it starts, and this module holds the barrier, so
    the last hold on all of them is Python's, released on the main thread."""
    if not dist.is_initialized():
        return
    barrier = dist.barrier(async_op=True)
    _LAST_BARRIER[:] = [barrier]
    with suppress(RuntimeError):  # a rank that failed or stopped elsewhere: leave without it
        barrier.wait(timeout=LEAVE_TIMEOUT)
    dist.destroy_process_group()
