"""Fitting the run's step in a device's memory: more micro-batches, then activation checkpointing.

A training process holds, per parameter, the weights, their gradients, AdamW's two moments and the
window's base (the anchor, `step.py`): 5 copies in the parameters' dtype, 20 B/param in fp32
(the codec residual and boundary states live in host memory). On top come what the backward pass
reads. Per token and decoder layer, counted from what autograd saves in transformers' Llama layer:

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

These are estimates from the model's shape; `bench/gpu.py` prints them beside the peak memory a GPU
measures, so they can be checked and corrected where a GPU is lent.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

GIB = 1 << 30
HEADROOM = 0.9
"""The share of a device's memory the plan may fill; the rest is for the CUDA context, cuBLAS
workspaces, NCCL buffers and the allocator's fragmentation."""

STATE_COPIES = 5
"""Weights, gradients, AdamW's two moments and the anchor's base."""

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

    @classmethod
    def of(cls, model: torch.nn.Module, autocast: str | None) -> ModelShape:
        config = model.config
        dtype = next(model.parameters()).dtype
        param_bytes = DTYPE_BYTES[dtype]
        return cls(
            params=sum(p.numel() for p in model.parameters()),
            layers=config.num_hidden_layers,
            hidden=config.hidden_size,
            intermediate=config.intermediate_size,
            heads=config.num_attention_heads,
            vocab=config.vocab_size,
            param_bytes=param_bytes,
            compute_bytes=2 if autocast is not None else param_bytes,
            eager_attention=getattr(config, "_attn_implementation", "eager") == "eager",
        )

    def state_bytes(self) -> int:
        return STATE_COPIES * self.params * self.param_bytes

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

    def describe(self) -> str:
        how = "with activation checkpointing" if self.checkpointing else "without activation checkpointing"
        return (
            f"{self.micro_batches} micro-batch(es) {how}: an estimated {self.need / GIB:.1f} GiB "
            f"of a {self.budget / GIB:.1f} GiB budget"
        )


class DoesNotFit(ValueError):
    """The step cannot fit the budget at any split; the message names what it would need."""


def plan_memory(
    shape: ModelShape, rows: int, seq_len: int, micro_batches: int, budget: int, split_further: bool = True
) -> MemoryPlan:
    """The plan for a rank's `rows` sequences: the run's `micro_batches` if they fit, else (with
    `split_further`) the fewest multiples of them that divide `rows` and fit; without checkpointing
    first, then with. A validator replays a miner's split, so it may only add checkpointing
    (`split_further=False`). Raises `DoesNotFit` naming the least the step needs."""
    if rows < 1 or seq_len < 1 or micro_batches < 1 or rows % micro_batches:
        raise ValueError(f"{rows} rows do not split into {micro_batches} micro-batches")
    if budget < 1:
        raise ValueError(f"the memory budget must be positive, got {budget} bytes")
    splits = [m for m in range(micro_batches, rows + 1, micro_batches) if rows % m == 0]
    if not split_further:
        splits = [micro_batches]
    for checkpointing in (False, True):
        for m in splits:
            need = shape.state_bytes() + shape.activation_bytes(rows // m, seq_len, checkpointing)
            if need <= budget:
                return MemoryPlan(m, checkpointing, need, budget)
    least = shape.state_bytes() + shape.activation_bytes(rows // splits[-1], seq_len, True)
    raise DoesNotFit(
        f"the step needs at least {least / GIB:.1f} GiB ({shape.state_bytes() / GIB:.1f} GiB for "
        f"{shape.params:,} parameters' weights, gradients, AdamW moments and base at "
        f"{shape.param_bytes} B each, and {(least - shape.state_bytes()) / GIB:.2f} GiB of activations "
        f"for {rows // splits[-1]} sequence(s) of {seq_len} tokens with activation checkpointing); "
        f"the budget is {budget / GIB:.1f} GiB"
    )


def device_budget(device: torch.device) -> int | None:
    """`HEADROOM` of a GPU's memory; None on a CPU (host memory is not planned)."""
    if device.type != "cuda":
        return None
    return int(HEADROOM * torch.cuda.get_device_properties(device).total_memory)


def set_checkpointing(model: torch.nn.Module, on: bool) -> None:
    """Turn transformers' activation checkpointing of every decoder layer on or off."""
    if on:
        model.activation_checkpointing_enable(activation_checkpointing_kwargs={"use_reentrant": False})
    elif model.is_activation_checkpointing:
        model.activation_checkpointing_disable()
