"""What makes a training step reproducible, and what does not.

A validator replays a miner's steps and compares the result, so the step must be a pure function
of (model state, optimizer state, batch). This module holds the switches that make it so.

CPU. Same start state + same batches + same settings gives bit-identical parameters and optimizer
state. The settings that matter, all found by experiment on torch 2.13 / MKL:

- The intra-op thread count. ATen splits an elementwise op into one chunk per thread; inside
  a chunk, whole vector lanes run a vectorized kernel (for SiLU and exp, a SLEEF approximation)
  and the leftover tail runs the scalar libm function. The two round differently in the last
  bit, and where the chunk edges fall depends on the thread count (measured on a 1M-parameter
  Llama step: 1, 2 and 4 threads agreed, 3 did not, first in the MLP's SiLU). So the step pins
  the thread count (`pinned_threads`) to the step config's `cpu_threads`, whatever the caller
  set, and a replay must use the miner's value.
- The CPU's vector ISA. AVX2 and AVX512 kernels give different bits, and so can MKL's GEMM paths.
  Two machines agree bit for bit when both run with the same `ATEN_CPU_CAPABILITY` and
  `MKL_CBWR` (set before torch is imported). With `ATEN_CPU_CAPABILITY=default` the scalar and
  vector paths agree and the thread count stops mattering. `fingerprint` records all of these,
  so a validator knows whether it can expect bit equality or must compare with a tolerance.
- Dropout and other randomness: none. Models are loaded with every dropout set to zero and the
  step draws no random numbers, so no RNG state needs replaying.

The step's kernel choices on CPU (tiny model, docs/gpu.md): eager and SDPA attention, single,
foreach and fused AdamW, with and without bf16 autocast each repeat bit for bit; foreach gives the
same bits as single, while fused AdamW, SDPA and autocast each give other bits than the reference,
so each is part of the replay class (`replay_class.py`). A miner on data-parallel gloo ranks and
one process replaying its split agree bit for bit at two and at four ranks: the ranks' all-reduce
adds in rank order (`parallel.rank_ordered_all_reduce`), as the replay does; with gloo's own ring,
four ranks ended 5.8e-5 from the replay (docs/gpu.md). A miner whose ranks shard the model (FSDP2)
is replayed bit for bit at two, three and four gloo ranks, losses included: its ranks add the
gradients in rank order and put the clip's norm together rank by rank, as the replay does
(`parallel.py`, `step.py`), where torch's own FSDP2 takes the clip's norm of the shards in another
order than the replay's over whole gradients.

CUDA. `configure_determinism` turns on `torch.use_deterministic_algorithms`, sets
`CUBLAS_WORKSPACE_CONFIG`, turns off cuDNN autotuning and TF32. Measured on H100 and H200 at 150M
parameters (../shared/measurements/gpu-2026-11-23.md): with those switches one GPU model repeats
itself bit for bit in fp32 and bf16, with eager attention and with SDPA (flash attention's
backward included); without deterministic algorithms SDPA does not (0.006–0.012 apart). H100 and
H200 agree bit for bit in fp32 with eager attention and differ by about 0.01 in bf16 (the GEMMs
pick other kernels), so across GPU models, library versions, and against CPU results replays are
compared within a calibrated tolerance. Measured on one H100 with torch 2.11 (docs/gpu.md, 257M
parameters): fused and foreach AdamW, bf16 autocast over fp32 master weights, SDPA, the project's
fast step (all of them together) and that step with the model under `torch.compile` each repeat bit
for bit from one start, and each gives other bits than the fp32 eager reference (foreach included,
where on a CPU it gives the reference's). The compiled step's repeat was measured within one
process, whose second compile may reuse the first's kernels; whether two processes (a miner and a
validator) compile the same kernels is not measured, so runs ship `train.compile = false`. The cost:
the deterministic switches slow the eager step by a few percent but the compiled one by 2.3x at
257M parameters and 1.5x at 1.2B (under deterministic algorithms inductor picks its reduction
kernels by heuristic rather than by benchmarking, and falls back to eager index_put and scatter;
which costs most is not yet profiled on a GPU: `bench/gpu.py --profile` splits a step's time by
kind of kernel), so a deterministic step runs at about half the tokens per second of
the compiled nondeterministic best-practice loop. `kernels.py` gives the embedding and the loss
backward passes without scatter (`model.kernels = "atomic_free"`), so a compiled step has no eager
fallback left (on a CPU; on a GPU `bench/gpu.py --step-table` measures it). Not yet measured on
GPUs: data-parallel and sharded ranks over NCCL (their sums are rank-ordered by construction, as
over gloo); `bench/gpu.py --ranks 2 4` measures both on a machine with that many GPUs.

`configure_determinism` also stops deterministic mode from filling every new tensor's memory (NaN
for floats): the fills guard against a kernel that reads memory it never wrote, which no kernel of
the step does (such a step would not repeat), and they cost time on every allocation.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager

import torch

CUBLAS_WORKSPACE = ":4096:8"


@contextmanager
def pinned_threads(threads: int | None) -> Iterator[None]:
    """Run the body with exactly `threads` intra-op threads (None: leave the caller's setting)."""
    if threads is None:
        yield
        return
    if threads < 1:
        raise ValueError(f"cpu_threads must be at least 1, got {threads}")
    previous = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        yield
    finally:
        torch.set_num_threads(previous)


def configure_determinism(device: torch.device | str) -> None:
    """Process-wide switches for reproducible steps; call once at start-up, before CUDA is used."""
    device = torch.device(device)
    if device.type == "cuda":
        configured = os.environ.get("CUBLAS_WORKSPACE_CONFIG")
        if configured is None:
            if torch.cuda.is_initialized():
                raise RuntimeError(
                    "CUBLAS_WORKSPACE_CONFIG must be set before CUDA is initialized; "
                    f"export CUBLAS_WORKSPACE_CONFIG={CUBLAS_WORKSPACE} or call configure_determinism first"
                )
            os.environ["CUBLAS_WORKSPACE_CONFIG"] = CUBLAS_WORKSPACE
        torch.backends.cudnn.deterministic = True
        torch.backends.cudnn.benchmark = False
        torch.backends.cuda.matmul.allow_tf32 = False
        torch.backends.cudnn.allow_tf32 = False
    torch.use_deterministic_algorithms(True)
    # No NaN fills of new tensors: the module's docstring says why.
    # The module swaps in a class with this property at import, which the stubs cannot see.
    torch.utils.deterministic.fill_uninitialized_memory = False  # type: ignore[attr-defined]


def fingerprint(device: torch.device | str) -> dict[str, str]:
    """The settings a bit-exact replay depends on; equal fingerprints are needed for equal bits."""
    device = torch.device(device)
    found = {
        "torch": torch.__version__,
        "device": device.type,
        "cpu_capability": torch.backends.cpu.get_cpu_capability(),
        "aten_cpu_capability_env": os.environ.get("ATEN_CPU_CAPABILITY", ""),
        "mkl_cbwr": os.environ.get("MKL_CBWR", ""),
        "deterministic_algorithms": str(torch.are_deterministic_algorithms_enabled()),
    }
    if device.type == "cuda":
        found["cuda"] = str(torch.version.cuda)
        found["cudnn"] = str(torch.backends.cudnn.version())
        found["gpu"] = torch.cuda.get_device_name(device)
        found["cublas_workspace"] = os.environ.get("CUBLAS_WORKSPACE_CONFIG", "")
    return found
