"""One rank of bench/gpu.py's data-parallel run, started by torchrun: trains the fast config's
steps on its share of each batch under `DistributedDataParallel` (mode ddp) or with the model, its
gradients and AdamW's state sharded over the ranks (mode fsdp: FSDP2, `FullyShardedParallel`),
over NCCL on GPUs or gloo on CPU; times them, and rank 0 writes the end parameters, every step's
loss, the tokens per second and (on a GPU) its peak memory to OUT/<mode>.

    torchrun --standalone --nproc-per-node N bench/_gpu_ranks.py OUT PRESET ROWS SEQ_LEN MICRO_BATCHES STEPS DEVICE MODES VOCAB

MODES is one mode or several, comma-separated (ddp,fsdp): the same processes and process group run
each in turn from a model built anew, its objects gone before the next starts, so one launch does
what one per mode did without starting torchrun and importing torch in every rank again (about 10
CPU-s of `bench/gpu.py --quick` on a CPU). VOCAB 0 is the byte tokenizer's.
"""

from __future__ import annotations

import gc
import json
import sys
import time
from pathlib import Path

import torch
from _gpu_loops import FAST, LR, batches, build, sync
from safetensors.torch import save_file
from torch.distributed.tensor import DTensor

from distrai.train.determinism import configure_determinism
from distrai.train.loss import causal_lm_loss
from distrai.train.memory import GIB
from distrai.train.optimizer import InnerOptimizerConfig, make_inner_optimizer
from distrai.train.parallel import DataParallel, FullyShardedParallel, Launch, join, launched, leave
from distrai.train.step import StepConfig, step_with


def train(
    launch: Launch,
    out: Path,
    preset: str,
    rows: int,
    seq_len: int,
    micro_batches: int,
    steps: int,
    requested: str,
    mode: str,
    vocab: int | None,
) -> None:
    """This rank's steps in one mode (its objects are gone when it returns, before the process group
    is and before the next mode's are made)."""
    device = launch.device(requested)
    if device.type == "cuda":  # each mode's peak memory its own
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats(device)
    model, optimizer = build(FAST, preset, device, vocab)
    sharded = mode == "fsdp"
    parallel = (FullyShardedParallel if sharded else DataParallel)(launch.rank, launch.world, device, model)
    if isinstance(parallel, FullyShardedParallel):
        parallel.shard()  # new parameters (the ranks' shards): the optimizer follows them
        optimizer = make_inner_optimizer(model, InnerOptimizerConfig(lr=LR, implementation=FAST.adamw))
    step = StepConfig(
        micro_batches=micro_batches,
        cpu_threads=None,
        autocast=FAST.autocast,
        ranks=launch.world,
        sharded=sharded,
    )
    work = batches(model.config.vocab_size, rows, seq_len, steps)
    losses = [step_with(step, model, optimizer, work[0], causal_lm_loss, parallel=parallel).loss]
    sync(device)
    start = time.perf_counter()
    for batch in work[1:]:
        losses.append(step_with(step, model, optimizer, batch, causal_lm_loss, parallel=parallel).loss)
    sync(device)
    seconds = time.perf_counter() - start
    params = {name: whole(p).detach().float().cpu().contiguous() for name, p in model.named_parameters()}
    if parallel.leader:
        out.mkdir(parents=True, exist_ok=True)
        save_file(params, str(out / "params.safetensors"))
        timed = (steps - 1) * rows * seq_len
        peak = torch.cuda.max_memory_allocated(device) / GIB if device.type == "cuda" else None
        record = {"tokens_per_s": timed / seconds, "world": launch.world, "losses": losses, "peak_gib": peak}
        (out / "result.json").write_text(json.dumps(record))


def whole(tensor: torch.Tensor) -> torch.Tensor:
    """A parameter whole on every rank: gathered from the ranks' shards when they are sharded."""
    return tensor.full_tensor() if isinstance(tensor, DTensor) else tensor


def main(
    out: Path,
    preset: str,
    rows: int,
    seq_len: int,
    micro_batches: int,
    steps: int,
    requested: str,
    modes: list[str],
    vocab: int | None,
) -> None:
    launch = launched()
    if launch is None:
        raise SystemExit("run under torchrun with more than one process")
    device = launch.device(requested)
    configure_determinism(device)
    join(launch, device)
    try:
        for mode in modes:
            train(launch, out / mode, preset, rows, seq_len, micro_batches, steps, requested, mode, vocab)
            gc.collect()  # a wrapper held in a reference cycle goes now, not beside the next mode's
    finally:
        leave()


if __name__ == "__main__":
    out, preset, rows, seq_len, micro, steps, device, modes, vocab = sys.argv[1:10]
    main(
        Path(out),
        preset,
        int(rows),
        int(seq_len),
        int(micro),
        int(steps),
        device,
        modes.split(","),
        int(vocab) or None,
    )
