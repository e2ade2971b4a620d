"""Fitting the run's step in a device's memory: more micro-batches, then activation checkpointing.

A training process holds, per parameter, the weights, their gradients, AdamW's two moments and the
window's base (the anchor, `step.py`): 5 copies in the parameters' dtype, 20 B/param in fp32
(the codec residual and boundary states live in host memory). When those do not fit, the base can
stay in host memory instead (`base_on_host`): 4 copies, plus one parameter's worth of device memory
that each step's pull copies the base through, one parameter at a time. The pull then reads the
same numbers, so the bits are the same; the price is 4 B/param over the host link every step
(4.9 GB at 1.23B parameters, about 0.2 s at PCIe 4.0 x16's ~25 GB/s, against a 1b step of several
seconds on a 24 GB card), less than recomputing activations (a third more compute), so the plan
tries it before checkpointing. On top come what the backward pass reads. Per token and decoder layer, counted from what autograd saves in transformers' Llama layer:

    (4·p + 10·c)·hidden + 4·c·intermediate   bytes,

p the bytes of the residual stream (the parameters' dtype), c of the compute dtype (bf16 under
autocast): the two RMSNorms (their input and normalized output, p each), the projections' inputs
cast to c, q and k before and after the rotary embedding, SDPA's output, and the MLP's gate, up,
activation and product (c · intermediate each). Eager attention also keeps the softmaxed scores,
heads · seq_len · c per token; SDPA recomputes them. The logits cost about (c + 8)·vocab per token
(the logits, their fp32 upcast in the loss and its gradient). Under autocast the matmuls also keep
their weights cast to c for the backward: c·params.

With activation checkpointing (transformers' `activation_checkpointing_enable`, every decoder layer)
a layer keeps only its input (p·hidden per token) and the backward recomputes one layer at a time,
so the peak is every layer's input plus one layer's activations and cast weights (the step's
autocast does not cache casts, `step.py`, so none outlive their layer). Recomputation runs the
same kernels on the same inputs, so a checkpointed step gives the same bits as a plain one
(measured on CPU: tests/test_train_memory.py); the choice is recorded in the manifest but does not
change the replay class, which is what lets a validator with a smaller card replay a miner's split.

When even the finest split with checkpointing does not fit, a miner on N ranks shards (FSDP2,
`parallel.FullyShardedParallel`): each rank then holds 1/N of the five copies, plus what is whole
for a while: the model's parameters outside the decoder layers (embeddings, final norm, output
layer) through the step, and their gradients before they are reduced; the layer that runs and the
one gathered ahead of it; in its backward, the layer's whole gradients, the reduce-scatter's copy of
them and the pieces the other ranks send (`RankOrderedReduceScatter`):

    per rank:  5·params·p / N  +  p·(2·outside + 5·layer)  +  activations.

A miner shards only when nothing else fits (or when asked, `--miner.shard`), since sharded ranks
gather every layer twice per micro-batch. A validator replays in one process, so it needs the whole state
(or a larger device, or the CPU) whatever the miner's ranks did.

These are estimates from the model's shape; `bench/gpu.py` prints them beside the peak memory a GPU
measures, so they can be checked and corrected where a GPU is lent.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING

import torch

if TYPE_CHECKING:
    from transformers import PreTrainedModel

GIB = 1 << 30
HEADROOM = 0.9
"""The share of a device's memory the plan may fill; the rest is for the CUDA context, cuBLAS
workspaces, NCCL buffers and the allocator's fragmentation."""

STATE_COPIES = 5
"""Weights, gradients, AdamW's two moments and the anchor's base."""

HOST_BASE_COPIES = 4
"""The same without the base, which stays in host memory."""

DTYPE_BYTES = {torch.float32: 4, torch.bfloat16: 2, torch.float16: 2}


@dataclass(frozen=True)
class ModelShape:
    """What the estimate reads from a model: its size and the dtypes it trains in."""

    params: int
    layers: int
    hidden: int
    intermediate: int
    heads: int
    vocab: int
    param_bytes: int
    compute_bytes: int
    eager_attention: bool
    layer_params: int = 0
    """parameters of the largest decoder layer (what sharded ranks gather at a time)"""
    largest_param: int = 0
    """elements of the largest parameter (what a base in host memory is copied through at a time)"""

    @classmethod
    def of(cls, model: PreTrainedModel, autocast: str | None) -> ModelShape:
        config = model.config
        dtype = next(model.parameters()).dtype
        param_bytes = DTYPE_BYTES[dtype]
        names = set(getattr(model, "_no_split_modules", None) or ())
        return cls(
            layer_params=max(
                (
                    sum(p.numel() for p in m.parameters())
                    for m in model.modules()
                    if type(m).__name__ in names
                ),
                default=0,
            ),
            params=sum(p.numel() for p in model.parameters()),
            largest_param=max(p.numel() for p in model.parameters()),
            layers=config.num_hidden_layers,
            hidden=config.hidden_size,
            intermediate=config.intermediate_size,
            heads=config.num_attention_heads,
            vocab=config.vocab_size,
            param_bytes=param_bytes,
            compute_bytes=2 if autocast is not None else param_bytes,
            eager_attention=getattr(config, "_attn_implementation", "eager") == "eager",
        )

    def state_bytes(self, ranks: int = 1, base_on_host: bool = False) -> int:
        """The five copies' bytes on one device (`base_on_host`: four, and the largest parameter's
        bytes to copy the base through); with `ranks` > 1, one rank's shard of the five plus what
        sharded ranks hold whole for a while (the module's docstring)."""
        if base_on_host and ranks > 1:
            raise ValueError("sharded ranks hold their shard of the base on the device")
        if base_on_host:
            return (HOST_BASE_COPIES * self.params + self.largest_param) * self.param_bytes
        if ranks == 1:
            return STATE_COPIES * self.params * self.param_bytes
        outside = self.params - self.layers * self.layer_params
        whole = self.param_bytes * (2 * outside + 5 * self.layer_params)
        return STATE_COPIES * math.ceil(self.params / ranks) * self.param_bytes + whole

    def activation_bytes(self, rows: int, seq_len: int, checkpointing: bool) -> int:
        """What the backward of `rows` sequences of `seq_len` tokens reads at its peak: activations
        and the weights cast for the matmuls."""
        p, c = self.param_bytes, self.compute_bytes
        layer = (4 * p + 10 * c) * self.hidden + 4 * c * self.intermediate
        if self.eager_attention:
            layer += self.heads * seq_len * c
        kept = self.layers * (p * self.hidden if checkpointing else layer)
        recomputed = layer if checkpointing else 0
        per_token = kept + recomputed + (c + 8) * self.vocab + p * self.hidden
        cast = c * self.params if c != p else 0
        if checkpointing:
            cast //= self.layers
        return rows * seq_len * per_token + cast


@dataclass(frozen=True)
class MemoryPlan:
    """How a step's batch runs in a memory budget."""

    micro_batches: int
    checkpointing: bool
    need: int
    budget: int
    sharded_over: int = 1
    """the ranks the state is sharded over (1: every rank holds all of it)"""
    base_on_host: bool = False
    """the window's base stays in host memory and each step copies it in (same bits)"""

    @property
    def sharded(self) -> bool:
        return self.sharded_over > 1

    def describe(self) -> str:
        how = "with activation checkpointing" if self.checkpointing else "without activation checkpointing"
        where = f", the state sharded over {self.sharded_over} ranks" if self.sharded else ""
        if self.base_on_host:
            where += ", the window's base in host memory"
        return (
            f"{self.micro_batches} micro-batch(es) {how}{where}: an estimated {self.need / GIB:.1f} GiB "
            f"of a {self.budget / GIB:.1f} GiB budget"
        )


class DoesNotFit(ValueError):
    """The step cannot fit the budget at any split; the message names what it would need."""


def plan_memory(
    shape: ModelShape,
    rows: int,
    seq_len: int,
    micro_batches: int,
    budget: int,
    split_further: bool = True,
    ranks: int = 1,
    shard: bool = False,
) -> MemoryPlan:
    """The plan for a rank's `rows` sequences: the run's `micro_batches` if they fit, else (with
    `split_further`) the fewest multiples of them that divide `rows` and fit; with the base on the
    device, then in host memory; without checkpointing first, then with. When none fits and the
    miner runs `ranks` > 1 processes, the same again with the state sharded over them (the base
    sharded on the device); `shard` asks for sharding whatever fits. A validator replays a miner's
    split, so it may only keep the base in host memory and add checkpointing
    (`split_further=False`). Raises `DoesNotFit` naming the least the step needs."""
    if rows < 1 or seq_len < 1 or micro_batches < 1 or rows % micro_batches:
        raise ValueError(f"{rows} rows do not split into {micro_batches} micro-batches")
    if budget < 1:
        raise ValueError(f"the memory budget must be positive, got {budget} bytes")
    if shard and ranks < 2:
        raise ValueError(f"sharding the state needs at least 2 ranks, got {ranks}")
    splits = [m for m in range(micro_batches, rows + 1, micro_batches) if rows % m == 0]
    if not split_further:
        splits = [micro_batches]
    shardings = [ranks] if shard else [1, ranks] if ranks > 1 else [1]
    candidates = (
        (over, checkpointing, on_host, m)
        for over in shardings
        for checkpointing in (False, True)
        for on_host in ((False, True) if over == 1 else (False,))
        for m in splits
    )
    for over, checkpointing, on_host, m in candidates:
        need = shape.state_bytes(over, on_host) + shape.activation_bytes(rows // m, seq_len, checkpointing)
        if need <= budget:
            return MemoryPlan(m, checkpointing, need, budget, over, on_host)
    activations = shape.activation_bytes(rows // splits[-1], seq_len, True)
    state = shape.state_bytes(base_on_host=True)
    least = state + activations
    sharded = ""
    if ranks > 1:
        sharded = (
            f"; sharded over {ranks} ranks, {(shape.state_bytes(ranks) + activations) / GIB:.1f} GiB "
            f"per rank ({shape.state_bytes(ranks) / GIB:.1f} GiB of it the state)"
        )
    raise DoesNotFit(
        f"the step needs at least {least / GIB:.1f} GiB ({state / GIB:.1f} GiB for "
        f"{shape.params:,} parameters' weights, gradients and AdamW moments at "
        f"{shape.param_bytes} B each, the window's base kept in host memory, and "
        f"{activations / GIB:.2f} GiB of activations "
        f"for {rows // splits[-1]} sequence(s) of {seq_len} tokens with activation checkpointing)"
        f"{sharded}; the budget is {budget / GIB:.1f} GiB"
    )


def device_budget(device: torch.device) -> int | None:
    """`HEADROOM` of a GPU's memory; None on a CPU (host memory is not planned)."""
    if device.type != "cuda":
        return None
    return int(HEADROOM * torch.cuda.get_device_properties(device).total_memory)


def set_checkpointing(model: PreTrainedModel, on: bool) -> None:
    """Turn transformers' activation checkpointing of every decoder layer on or off."""
    if on:
        model.activation_checkpointing_enable(activation_checkpointing_kwargs={"use_reentrant": False})
    elif model.is_activation_checkpointing:
        model.activation_checkpointing_disable()
