"""One benchmark worker process: DDP (unless `config.ddp` is off), then each DiLoCo variant, over a
gloo process group.

Each of the `workers` processes runs with one intra-op thread and trains on its own batches (see
`_config.worker_schedule`). DDP wraps the model in `DistributedDataParallel`, whose backward pass
all-reduces (averages) the gradients, and calls the project's `train_step`. DiLoCo runs the
project's `inner_loop` for H steps from the global model, encodes the pseudo-gradient with the
codec (error feedback carried per worker), all-gathers the encoded bytes, decodes every peer's
update and applies the project's `outer_step`; every worker computes the same new global model. A
row that keeps its AdamW (`keep_adamw`) runs the same steps with one optimizer across rounds.
Rank 0 times each method between barriers, evaluates the held-out loss and writes the results.
With a peer (`config.peer`), torchft's DiLoCo trains last (`_peer_torchft`).
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import safetensors.torch
import torch
import torch.distributed as dist
from _config import (
    BenchConfig,
    CodecChoice,
    PreparedSource,
    load_data,
    load_params,
    new_model,
    worker_schedule,
)
from _exchange import all_gather_payloads
from torch.nn.parallel import DistributedDataParallel

from distrai.codec import get_codec, ring_allreduce_bytes_per_param, wire_bytes
from distrai.train.data import TrainingData
from distrai.train.evaluate import evaluate
from distrai.train.inner import float_params, inner_loop, pseudo_gradient, run_steps
from distrai.train.loss import causal_lm_loss
from distrai.train.model import count_parameters
from distrai.train.optimizer import make_inner_optimizer, set_lr
from distrai.train.outer import Contribution, OuterState, outer_step
from distrai.train.step import train_step
from distrai.wire.tensors import encode_tensors

RESULTS_FILE = "results.json"
TEACHER_FILE = "teacher.safetensors"


@dataclass(frozen=True)
class Traffic:
    """Bytes one worker sent per parameter over the run: payload tensors, and as safetensors files."""

    payload: float
    file: float


def run_rank(
    rank: int, config: BenchConfig, workdir: str, port: int, prepared: PreparedSource | None
) -> None:
    """Entry point of worker `rank` (started by `torch.multiprocessing.spawn`); real text is read
    from `prepared`'s store into a shard cache of the worker's own."""
    os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ["MASTER_PORT"] = str(port)
    torch.set_num_threads(1)
    dist.init_process_group("gloo", rank=rank, world_size=config.workers)
    try:
        tokenizer, data = load_data(config, prepared, Path(workdir) / f"cache-{rank}")
        schedule = worker_schedule(config, data, rank)
        rows = []
        if config.ddp:
            model = new_model(config, tokenizer)
            traffic, seconds = _timed(lambda: _train_ddp(model, config, data, schedule))
            rows.append(_row(rank, "DDP (all-reduce every step)", 1, model, data, traffic, seconds))
            if rank == 0:
                safetensors.torch.save_file(float_params(model), str(Path(workdir) / TEACHER_FILE))
        for choice in config.codecs:
            model = new_model(config, tokenizer)
            traffic, seconds = _timed(lambda m=model, c=choice: _train_diloco(m, config, data, schedule, c))
            rows.append(_row(rank, choice.label, choice.inner_steps, model, data, traffic, seconds))
        if config.peer is not None:
            rows.append(_peer_row(rank, config, new_model(config, tokenizer), data, schedule))
        if rank == 0:
            (Path(workdir) / RESULTS_FILE).write_text(json.dumps({"rows": rows}))
    finally:
        dist.destroy_process_group()


def _peer_row(
    rank: int, config: BenchConfig, model: torch.nn.Module, data: TrainingData, schedule: list[list[int]]
) -> dict[str, object]:
    """The peer's row (`_peer_torchft`), marked with the peer's name and version."""
    import _peer_torchft as peer

    def work() -> Traffic:
        sent = peer.train_peer(model, config, data, schedule)
        return Traffic(payload=sent, file=sent)

    traffic, seconds = _timed(work)
    h = peer.fp32_choice(config).inner_steps
    return {**_row(rank, peer.LABEL, h, model, data, traffic, seconds), "peer": peer.version()}


def _timed(work: Callable[[], Traffic]) -> tuple[Traffic, float]:
    dist.barrier()
    start = time.perf_counter()
    traffic = work()
    dist.barrier()
    return traffic, time.perf_counter() - start


def _row(
    rank: int,
    label: str,
    inner_steps: int,
    model: torch.nn.Module,
    data: TrainingData,
    traffic: Traffic,
    seconds: float,
) -> dict[str, object]:
    loss = evaluate(model, data.heldout, cpu_threads=1) if rank == 0 else float("nan")
    dist.barrier()
    return {
        "method": label,
        "inner_steps": inner_steps,
        "heldout_loss": loss,
        "bytes_per_param": traffic.payload,
        "file_bytes_per_param": traffic.file,
        "seconds": seconds,
    }


def _train_ddp(
    model: torch.nn.Module, config: BenchConfig, data: TrainingData, schedule: list[list[int]]
) -> Traffic:
    """Train with all-reduced gradients; traffic by the ring all-reduce formula."""
    wrapped = DistributedDataParallel(model)
    settings = config.optimizer_config()
    optimizer = make_inner_optimizer(model, settings)
    for step, indices in enumerate(schedule):
        set_lr(optimizer, settings.lr_at(step))
        train_step(wrapped, optimizer, data.batch(indices), loss_fn=causal_lm_loss, cpu_threads=1)
    sent = ring_allreduce_bytes_per_param(config.steps, config.workers)
    return Traffic(payload=sent, file=sent)


def _train_diloco(
    model: torch.nn.Module,
    config: BenchConfig,
    data: TrainingData,
    schedule: list[list[int]],
    choice: CodecChoice,
) -> Traffic:
    """Train steps / H outer rounds; the model ends holding the final global parameters. Pipelined
    (`choice.pipelined`), round r trains from the model before round r − 1's outer step and its
    pseudo-gradient is applied to the model after it, one round late, as pipelined windows do. With
    `choice.keep_adamw` the worker's one AdamW runs the same steps (`run_steps`, the core of
    `inner_loop`) at the global step's learning rate, its state carried from round to round."""
    codec = get_codec(choice.name, **choice.options)
    kept = make_inner_optimizer(model, config.optimizer_config()) if choice.keep_adamw else None
    shapes = {name: tuple(p.shape) for name, p in model.named_parameters()}
    global_params = previous = float_params(model)
    state = OuterState(momentum={})
    residual = None
    payload_bytes = file_bytes = 0
    h = choice.inner_steps
    for window in range(config.steps // h):
        base = previous if choice.pipelined else global_params
        load_params(model, base)
        steps = schedule[window * h : (window + 1) * h]
        if kept is None:
            delta = inner_loop(
                model,
                lambda t, s=steps: data.batch(s[t]),
                causal_lm_loss,
                config.inner_config(h),
                keep_states=False,
            ).pseudo_gradient
        else:
            batches = (data.batch(indices) for indices in steps)
            run_steps(model, kept, batches, causal_lm_loss, config.inner_config(h), window * h)
            delta = pseudo_gradient(base, float_params(model))
        encoded = codec.encode(delta, residual)
        residual = encoded.residual
        payload_bytes += wire_bytes(encoded.payload)
        file_bytes += len(encode_tensors(encoded.payload, encoded.metadata))
        contributions = [
            Contribution(
                key=f"worker-{peer}", pseudo_gradient=codec.decode(p, encoded.metadata, shapes), weight=1.0
            )
            for peer, p in enumerate(all_gather_payloads(encoded.payload, codec, shapes))
        ]
        outcome = outer_step(global_params, contributions, state, choice.outer)
        previous, global_params, state = global_params, outcome.params, outcome.state
    load_params(model, global_params)
    n = count_parameters(model)
    return Traffic(payload=payload_bytes / n, file=file_bytes / n)
