"""One rank of bench/gpu.py's data-parallel run, started by torchrun: trains the fast config's
steps on its share of each batch under `DistributedDataParallel` (NCCL on GPUs, gloo on CPU), times
them, and rank 0 writes the end parameters and the tokens per second to OUT.

    torchrun --standalone --nproc-per-node N bench/_gpu_ranks.py OUT PRESET ROWS SEQ_LEN MICRO_BATCHES STEPS DEVICE
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

import torch
from _gpu_loops import FAST, batches, build
from safetensors.torch import save_file

from distrai.train.determinism import configure_determinism
from distrai.train.loss import causal_lm_loss
from distrai.train.parallel import DataParallel, join, launched, leave
from distrai.train.step import StepConfig, step_with


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def main(
    out: Path, preset: str, rows: int, seq_len: int, micro_batches: int, steps: int, requested: str
) -> None:
    launch = launched()
    if launch is None:
        raise SystemExit("run under torchrun with more than one process")
    device = launch.device(requested)
    configure_determinism(device)
    join(launch, device)
    try:
        model, optimizer = build(FAST, preset, device)
        parallel = DataParallel(launch.rank, launch.world, device, model)
        step = StepConfig(
            micro_batches=micro_batches, cpu_threads=None, autocast=FAST.autocast, ranks=launch.world
        )
        work = batches(model.config.vocab_size, rows, seq_len, steps)
        step_with(step, model, optimizer, work[0], causal_lm_loss, parallel=parallel)
        sync(device)
        start = time.perf_counter()
        for batch in work[1:]:
            step_with(step, model, optimizer, batch, causal_lm_loss, parallel=parallel)
        sync(device)
        seconds = time.perf_counter() - start
        if parallel.leader:
            params = {name: p.detach().float().cpu().contiguous() for name, p in model.named_parameters()}
            save_file(params, str(out / "params.safetensors"))
            timed = (steps - 1) * rows * seq_len
            (out / "result.json").write_text(
                json.dumps({"tokens_per_s": timed / seconds, "world": launch.world})
            )
    finally:
        leave()


if __name__ == "__main__":
    out, preset, rows, seq_len, micro, steps, device = sys.argv[1:8]
    main(Path(out), preset, int(rows), int(seq_len), int(micro), int(steps), device)
