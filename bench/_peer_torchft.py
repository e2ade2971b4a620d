"""The peer: torchft's DiLoCo (`torchft.local_sgd.DiLoCo`, torchft 0.2.0) on the benchmark's data.

`bench/convergence.py --peer torchft` adds one row, "torchft DiLoCo (peer)", trained by another
team's DiLoCo as that team designed it, so that the project's DiLoCo fp32 row can be read against
an independent implementation on exactly the same model, data and batches.

Wiring, as torchft intends on one machine: rank 0 starts a `LighthouseServer` on 127.0.0.1 (its
quorum needs every worker: `min_replicas` = workers) and tells the others its address over the
benchmark's gloo group. Each worker process is one replica group of one process, with a TCPStore of
its own, a `ProcessGroupGloo` and a `Manager` (synchronous quorum, `min_replica_size` = workers);
`DiLoCo` hooks the inner optimizer's `step`, and every `sync_every` steps computes the
pseudo-gradient (the last global parameters minus the local ones), averages it across the replicas
with the manager's all-reduce (fp32, no quantization), restores the global parameters and applies
the outer optimizer. `init_sync` is a `Manager` argument in 0.2.0 (not `DiLoCo`'s): left True, the
quorum at manager step 0 (DiLoCo's first, after the first H inner steps) makes every replica but one
heal, loading the registered state (the model and the inner optimizer, given to the manager for
recovery) from a peer through the checkpoint transport, which would overwrite the trained workers.
Every worker starts from the same initial model, so `init_sync=False`. A run in which any round did
not commit (the manager's step stops short of steps / H) raises instead of reporting a row.

The recipe, as torchft's DiLoCo has it: ONE inner AdamW over the whole run, its moments kept across
rounds, with the same hyperparameters as the project's inner optimizer (`config.optimizer_config()`:
lr, betas, eps, weight decay) and the same step (the project's `train_step`: grad-norm clip 1.0, one
thread); the linear warm-up once, at the first global steps; outer `torch.optim.SGD` with the fp32
row's learning rate, momentum and Nesterov flag; `sync_every` = the fp32 row's H. The project's
`inner_loop` instead starts each round with a fresh AdamW and restarts the warm-up, and its
`outer_step` clips every worker's update to the median norm before averaging (torchft does not).
`project_recipe=True` (for a check by hand, not the benchmark) clears the AdamW state and restarts
the warm-up at every round, which leaves the median-norm clip as the only difference in recipe.

Bytes: each round every worker all-reduces its fp32 pseudo-gradient, counted by the ring
all-reduce formula as DDP's gradients are, 2·(N−1)/N · 4 bytes per parameter per round (not a
measurement of what gloo sent); the quorum and commit messages to the lighthouse and the managers
carry no parameters and are not counted.

torchft is an optional dependency (`pip install -e .[bench]`); it is imported only when the peer
runs.
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import logging
import os
from datetime import timedelta
from urllib.parse import urlsplit

import torch
import torch.distributed as dist
from _config import BenchConfig, CodecChoice

from distrai.codec import ring_allreduce_bytes_per_param
from distrai.train.data import TrainingData
from distrai.train.loss import causal_lm_loss
from distrai.train.optimizer import make_inner_optimizer, set_lr
from distrai.train.step import train_step

PEER = "torchft"
LABEL = "torchft DiLoCo (peer)"
INSTALL = "pip install -e .[bench]"
TIMEOUT = timedelta(minutes=30)
"""Quorum, collective and commit timeout: a round of the full benchmark takes minutes on 2 cores."""


def fp32_choice(config: BenchConfig) -> CodecChoice:
    """The project's uncompressed DiLoCo row, whose H and outer optimizer the peer takes."""
    return next(choice for choice in config.codecs if choice.name == "none")


def bytes_per_param(config: BenchConfig) -> float:
    """Bytes one worker sends per parameter over the run: a ring all-reduce of an fp32
    pseudo-gradient every round."""
    return ring_allreduce_bytes_per_param(config.steps // fp32_choice(config).inner_steps, config.workers)


def missing() -> str | None:
    """Why the peer cannot run here (torchft is not installed), or None; looks without importing."""
    if importlib.util.find_spec(PEER) is None:
        return f"--peer {PEER} needs torchft, which is not installed here; install it with `{INSTALL}`"
    return None


def version() -> str:
    """The peer as a row records it: "torchft <installed version>"."""
    return f"{PEER} {importlib.metadata.version(PEER)}"


def _lighthouse(rank: int, workers: int) -> tuple[object | None, str]:
    """Rank 0 starts the lighthouse; every rank gets its address (over the default gloo group)."""
    from torchft.coordination import LighthouseServer

    server = LighthouseServer(bind="127.0.0.1:0", min_replicas=workers) if rank == 0 else None
    address = [None if server is None else f"http://127.0.0.1:{urlsplit(server.address()).port}"]
    dist.broadcast_object_list(address, src=0)
    return server, str(address[0])


def train_peer(
    model: torch.nn.Module,
    config: BenchConfig,
    data: TrainingData,
    schedule: list[list[int]],
    *,
    project_recipe: bool = False,
) -> float:
    """Train `model` (this worker's replica; every worker starts from the same one) with torchft's
    DiLoCo on `schedule`; the model ends holding the final global parameters. Returns the bytes
    sent per parameter. Called by every benchmark worker, inside its gloo process group."""
    os.environ.setdefault("RUST_LOG", "warn")
    logging.getLogger("torchft").setLevel(logging.ERROR)
    from torchft.local_sgd import DiLoCo
    from torchft.manager import Manager
    from torchft.process_group import ProcessGroupGloo

    rank, workers = dist.get_rank(), dist.get_world_size()
    choice = fp32_choice(config)
    h, rounds = choice.inner_steps, config.steps // choice.inner_steps
    settings = config.optimizer_config()
    inner = make_inner_optimizer(model, settings)

    def state_dict() -> dict[str, object]:
        return {"model": model.state_dict(), "optim": inner.state_dict()}

    def load_state_dict(state: dict[str, object]) -> None:
        model.load_state_dict(state["model"])  # type: ignore[arg-type]
        inner.load_state_dict(state["optim"])  # type: ignore[arg-type]

    outer = torch.optim.SGD(
        model.parameters(), lr=choice.outer.lr, momentum=choice.outer.momentum, nesterov=choice.outer.nesterov
    )
    lighthouse, address = _lighthouse(rank, workers)
    store = dist.TCPStore("127.0.0.1", 0, is_master=True, wait_for_workers=False)
    manager = Manager(
        pg=ProcessGroupGloo(timeout=TIMEOUT),
        load_state_dict=load_state_dict,
        state_dict=state_dict,
        min_replica_size=workers,
        use_async_quorum=False,
        init_sync=False,
        rank=0,
        world_size=1,
        store_addr="127.0.0.1",
        store_port=store.port,
        lighthouse_addr=address,
        replica_id=f"worker-{rank}",
        hostname="127.0.0.1",
        timeout=TIMEOUT,
        quorum_timeout=TIMEOUT,
        connect_timeout=timedelta(minutes=1),
    )
    try:
        with DiLoCo(manager, [model], inner, outer, sync_every=h):
            for step, indices in enumerate(schedule):
                if project_recipe and step % h == 0:
                    inner.state.clear()
                set_lr(inner, settings.lr_at(step % h if project_recipe else step))
                train_step(model, inner, data.batch(indices), loss_fn=causal_lm_loss, cpu_threads=1)
        if manager.current_step() != rounds:
            raise RuntimeError(f"torchft committed {manager.current_step()} of {rounds} rounds")
    finally:
        # the quorum's process group meets in one worker's store: keep every store until all are done
        dist.barrier()
        manager.shutdown(wait=False)
        dist.barrier()
        if lighthouse is not None:
            lighthouse.shutdown()  # type: ignore[attr-defined]
    return bytes_per_param(config)
