"""Forms of the input embedding and the loss whose backward writes without atomics or scatter, and a
vocabulary padded to an aligned size: what lets a compiled step stay whole under deterministic
algorithms (the run config's `model.kernels` and `model.pad_vocab_to`; off by default until measured
on a GPU, docs/gpu.md).

Why. Under `torch.use_deterministic_algorithms` inductor cannot emit the atomic adds that an
embedding's backward (`index_put` with accumulation) and a gathered loss's backward (`scatter_add`)
lower to, so it leaves them to PyTorch's eager deterministic kernels (sort, then segment sums): the
compiled graph breaks into pieces around them and the step ran slower than eager at 257M parameters
(docs/gpu.md). Neither backward needs a scatter:

- The input embedding (`AtomicFreeEmbedding`): the forward is the usual row gather; the backward is
  a matmul, onehot(ids)ᵀ · grad, the one-hot matrix built by comparing ids with 0 … V−1. Each row of
  the weight's gradient sums the gradients of the tokens with that id, in the matmul's fixed order.
  Under autocast the matmul runs in the autocast dtype (bf16): the per-token gradients and the sum
  are rounded to bf16, as autocast rounds every linear layer's weight gradient; without autocast it
  runs in the weight's dtype. It costs 2·V·N·d FLOPs for N tokens (6% of a 150m step's at GPT-2's
  vocabulary: 2·50,304·d against the model's 6·257M per token) and a [N, V] one-hot matrix while it
  runs (1.6 GB in bf16 for 16,384 tokens at 50,304 rows). A `padding_idx` row gets no gradient, as
  in `torch.nn.Embedding`.
- The loss (`one_hot_cross_entropy`): −Σ_v [v = target]·log_softmax(logits)_v instead of a gather.
  The forward sums one value and exact zeros, and the backward selects elementwise, so in eager it
  gives the gather's bits exactly; compiled, it fuses into the log-softmax's kernels. In eager it
  holds a [N, V] float32 tensor more than the gather does: a form for compiled steps.
- The padded vocabulary (`PaddedHead`, `padded_vocab`): the embedding and output layer get
  ⌈V / m⌉·m rows (50,257 → 50,304 for m = 64), so the output layer's matmul has aligned rows (what
  inductor's pad-mm would do, which deterministic algorithms turn off), and the output layer cuts its
  logits back to the tokenizer's V before any loss sees them. The extra rows are ids no tokenizer
  produces: their embeddings are never looked up and their logits never reach a loss, so they get no
  gradient, and AdamW's weight decay and the pull toward the window's base only shrink them. They are
  parameters all the same: the model's shapes, its seeded initial weights (drawn for the larger
  tables), every state hash and the update's size (2·47·1,024 = 96,256 more parameters at 150m)
  differ from an unpadded model's, so a padded run is another run (its run id differs with the field).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, cast

import torch
import torch.nn.functional as F

from distrai.train.loss import causal_lm_rows, next_token_logits

if TYPE_CHECKING:
    from transformers import PreTrainedModel

KERNELS = ("aten", "atomic_free")
"""aten: PyTorch's embedding and a gathered loss; atomic_free: the forms above."""


class _OneHotEmbeddingGrad(torch.autograd.Function):
    """Row gather forward; onehot(ids)ᵀ · grad backward (see the module)."""

    @staticmethod
    def forward(ctx, ids: torch.Tensor, weight: torch.Tensor, padding_idx: int | None) -> torch.Tensor:
        ctx.save_for_backward(ids)
        ctx.rows, ctx.weight_dtype, ctx.padding_idx = weight.shape[0], weight.dtype, padding_idx
        device = weight.device.type
        ctx.compute_dtype = (
            torch.get_autocast_dtype(device) if torch.is_autocast_enabled(device) else weight.dtype
        )
        return F.embedding(ids, weight)

    @staticmethod
    def backward(ctx, grad: torch.Tensor):
        (ids,) = ctx.saved_tensors
        return (
            None,
            one_hot_rows_grad(ids, grad, ctx.rows, ctx.compute_dtype, ctx.padding_idx).to(ctx.weight_dtype),
            None,
        )


def one_hot_rows_grad(
    ids: torch.Tensor, grad: torch.Tensor, rows: int, dtype: torch.dtype, padding_idx: int | None = None
) -> torch.Tensor:
    """The gradient of a [rows, d] embedding table from the gradient `grad` [..., d] of its lookup of
    `ids` [...]: onehot(ids)ᵀ · grad in `dtype`, the `padding_idx` row zero."""
    flat = ids.reshape(-1)
    vocabulary = torch.arange(rows, device=ids.device)
    hot = flat.unsqueeze(1) == vocabulary
    if padding_idx is not None:
        hot = hot & (vocabulary != padding_idx)
    return hot.to(dtype).t() @ grad.reshape(flat.shape[0], -1).to(dtype)


class AtomicFreeEmbedding(torch.nn.Embedding):
    """`torch.nn.Embedding` whose backward is a one-hot matmul (see the module); the same parameter."""

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        if self.max_norm is not None or self.sparse or self.scale_grad_by_freq:
            raise ValueError(
                "the atomic-free embedding supports neither max_norm, sparse nor scale_grad_by_freq"
            )
        return _OneHotEmbeddingGrad.apply(ids, self.weight, self.padding_idx)

    @classmethod
    def of(cls, embedding: torch.nn.Embedding) -> AtomicFreeEmbedding:
        """The same table (the very parameter) behind the atomic-free backward."""
        return cls(
            embedding.num_embeddings,
            embedding.embedding_dim,
            padding_idx=embedding.padding_idx,
            _weight=embedding.weight,
        )


class PaddedHead(torch.nn.Linear):
    """An output layer of padded rows whose logits are cut back to the first `vocab` (the tokenizer's)."""

    def __init__(self, in_features: int, out_features: int, vocab: int, **kwargs):
        super().__init__(in_features, out_features, **kwargs)
        if not 0 < vocab <= out_features:
            raise ValueError(f"the vocabulary ({vocab}) must be at most the layer's {out_features} rows")
        self.vocab = vocab

    def forward(self, hidden: torch.Tensor) -> torch.Tensor:
        return super().forward(hidden)[..., : self.vocab]

    @classmethod
    def of(cls, head: torch.nn.Linear, vocab: int) -> PaddedHead:
        """`head`'s weight (the very parameter) behind a cut to `vocab` logits."""
        padded = cls(head.in_features, head.out_features, vocab, bias=head.bias is not None, device="meta")
        padded.weight = head.weight
        if head.bias is not None:
            padded.bias = head.bias
        return padded

    def extra_repr(self) -> str:
        return f"{super().extra_repr()}, vocab={self.vocab}"


def padded_vocab(vocab: int, multiple: int) -> int:
    """`vocab` rounded up to a multiple of `multiple`."""
    if vocab < 1 or multiple < 1:
        raise ValueError(f"vocabulary ({vocab}) and multiple ({multiple}) must be positive")
    return -(-vocab // multiple) * multiple


def one_hot_cross_entropy(logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """Per-token cross-entropy [..] of float logits [.., V] against targets [..], without a gather:
    −Σ_v [v = target]·log_softmax(logits)_v (see the module)."""
    log_probs = torch.log_softmax(logits, dim=-1)
    hot = targets.unsqueeze(-1) == torch.arange(logits.shape[-1], device=logits.device)
    return -torch.where(hot, log_probs, 0.0).sum(-1)


def use_kernels(model: PreTrainedModel, kernels: str) -> None:
    """Put `kernels`' embedding in `model` (in place: the parameter and its name stay)."""
    if kernels not in KERNELS:
        raise ValueError(f"unknown kernels {kernels!r}; choose one of {KERNELS}")
    # transformers types it as any Module; a causal LM's input embedding is an nn.Embedding.
    embedding = cast(torch.nn.Embedding, model.get_input_embeddings())
    if kernels == "atomic_free" and not isinstance(embedding, AtomicFreeEmbedding):
        model.set_input_embeddings(AtomicFreeEmbedding.of(embedding))


def kernels_of(model: torch.nn.Module) -> str:
    """Which kernels `model` runs (what its replay class records)."""
    get = getattr(model, "get_input_embeddings", None)
    return "atomic_free" if get is not None and isinstance(get(), AtomicFreeEmbedding) else "aten"


class OneHotCausalLMLoss:
    """`loss.causal_lm_loss` with `one_hot_cross_entropy`: the same value, a backward without scatter.
    Its per-sequence form (`rows`, for evaluations, which run no backward) is `loss.causal_lm_rows`:
    the gather's values, the same bits as the one-hot form's."""

    rows = staticmethod(causal_lm_rows)

    def __call__(self, model: torch.nn.Module, batch: torch.Tensor) -> torch.Tensor:
        return one_hot_cross_entropy(next_token_logits(model, batch), batch[:, 1:]).mean()


one_hot_causal_lm_loss = OneHotCausalLMLoss()
