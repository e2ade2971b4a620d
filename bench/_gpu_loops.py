"""The loops bench/gpu.py times and replays: the project's inner loop (`run_steps`, the step every
miner and validator runs) in the previous and the fast GPU config, and with the atomic-free kernels
and a padded vocabulary (`distrai.train.kernels`), eager and compiled, without and with the pull toward
the window's base that the GPU config sets (the base on the device, or in host memory as a card
without room for it keeps it), the same step with the model under `torch.compile`, and a bare
PyTorch loop with the fast config's settings, plain and compiled; and the target, the compiled bare
loop with a PyTorch user's fastest settings (no deterministic algorithms, TF32, cuDNN autotuning),
which bench/gpu.py runs in the same process beside the others (`settings_of`).

Each loop is a function (model, optimizer, batch) -> None over one whole batch, so the timing and
the replay code treat them alike."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, replace

import torch
from _word_vocab import word_tokenizer
from transformers import PreTrainedTokenizerFast

from distrai.data.byte_tokenizer import byte_tokenizer
from distrai.train.inner import InnerConfig, own_anchor, run_steps
from distrai.train.kernels import PaddedHead, one_hot_causal_lm_loss
from distrai.train.loss import causal_lm_loss
from distrai.train.model import ModelSpec, load_model
from distrai.train.optimizer import InnerOptimizerConfig, make_inner_optimizer
from distrai.train.step import Anchor, StepConfig

Step = Callable[[torch.nn.Module, torch.optim.Optimizer, torch.Tensor], None]
SETTINGS = ("deterministic", "fastest", "inductor")


@dataclass(frozen=True)
class Loop:
    """One way to train: the model's dtype and attention, the AdamW implementation, autocast, and
    whether the project's step or a bare loop runs, compiled or not."""

    name: str
    dtype: str
    attention: str
    adamw: str
    autocast: str | None
    project: bool
    compiled: bool = False
    anchor: str | None = None
    """where the window's base lies for the step's pull toward it: "device", "host" or None (no pull)"""
    settings: str = "deterministic"
    """deterministic: the project's switches (`configure_determinism`); fastest: a PyTorch user's
    fastest settings (no deterministic algorithms, TF32, cuDNN autotuning); inductor: the project's
    switches but deterministic algorithms off and inductor's own deterministic mode on (no on-device
    benchmarking that changes numerics), so a compiled graph keeps every kernel it can emit"""
    kernels: str = "aten"
    """the model's embedding and the loss: "aten" or "atomic_free" (`distrai.train.kernels`)"""
    pad_vocab_to: int = 1
    """the model's embedding and output layer rows, rounded up to a multiple of this"""

    def __post_init__(self) -> None:
        if self.settings not in SETTINGS:
            raise ValueError(f"unknown settings {self.settings!r}; choose one of {SETTINGS}")


PREVIOUS = Loop(
    "project, previous config: bf16 params, eager, AdamW", "bfloat16", "eager", "single", None, True
)
FAST = Loop(
    "project, fast config: fp32 master, bf16 autocast, SDPA, fused AdamW",
    "float32",
    "sdpa",
    "fused",
    "bfloat16",
    True,
)
FAST_COMPILED = Loop(
    "project, fast config, model under torch.compile", "float32", "sdpa", "fused", "bfloat16", True, True
)
ANCHORED = Loop(
    "project, fast config, pulled toward the base on the device (the GPU config's step)",
    "float32",
    "sdpa",
    "fused",
    "bfloat16",
    True,
    anchor="device",
)
HOST_BASE = Loop(
    "project, fast config, pulled toward the base in host memory",
    "float32",
    "sdpa",
    "fused",
    "bfloat16",
    True,
    anchor="host",
)
BARE = Loop("bare loop, the fast config's settings", "float32", "sdpa", "fused", "bfloat16", False)
BARE_COMPILED = Loop("bare loop under torch.compile", "float32", "sdpa", "fused", "bfloat16", False, True)
BEST = Loop(
    "target: bare loop under torch.compile, no deterministic algorithms",
    "float32",
    "sdpa",
    "fused",
    "bfloat16",
    False,
    True,
    settings="fastest",
)
"""The issue's best-practice loop: what a PyTorch user's fastest settings give, replays or not."""
KERNELS = Loop(
    "GPU config's step, atomic-free kernels, vocabulary padded to 64",
    "float32",
    "sdpa",
    "fused",
    "bfloat16",
    True,
    anchor="device",
    kernels="atomic_free",
    pad_vocab_to=64,
)
KERNELS_COMPILED = replace(
    KERNELS,
    name="GPU config's step, atomic-free kernels, padded to 64, under torch.compile, deterministic algorithms",
    compiled=True,
)
KERNELS_INDUCTOR = replace(
    KERNELS_COMPILED,
    name="the same without deterministic algorithms (inductor's deterministic mode)",
    settings="inductor",
)
THROUGHPUT = (PREVIOUS, FAST, ANCHORED, HOST_BASE, FAST_COMPILED, KERNELS_COMPILED, BARE, BARE_COMPILED, BEST)
SHIPPED = ANCHORED
"""The GPU config's step (`gpu-subnet.toml`: fast config, base_anchor 0.01, no compile)."""
PROFILED = {
    SHIPPED: "GPU config's step",
    BARE_COMPILED: "compiled, deterministic",
    KERNELS_COMPILED: "compiled, atomic-free",
    BEST: "target",
}
"""The loops `bench/gpu.py --profile` profiles, by the short names its table gives them."""

STEPS = (SHIPPED, KERNELS, KERNELS_COMPILED, KERNELS_INDUCTOR, BEST)
"""`bench/gpu.py --step-table`: the GPU config's step beside its atomic-free forms and the target."""

REFERENCE = Loop("reference: fp32, eager, AdamW", "float32", "eager", "single", None, True)
PIECES = (
    REFERENCE,
    Loop("SDPA", "float32", "sdpa", "single", None, True),
    Loop("foreach AdamW", "float32", "eager", "foreach", None, True),
    Loop("fused AdamW", "float32", "eager", "fused", None, True),
    Loop("bf16 autocast over fp32 master weights", "float32", "eager", "single", "bfloat16", True),
    Loop("bf16 parameters", "bfloat16", "eager", "single", None, True),
    FAST,
    FAST_COMPILED,
    BEST,
)
"""The target among them: whether its kernels, once compiled, repeat bit for bit without deterministic
algorithms is what kernels compiled once per run and published would need."""
EVERY_LOOP = PIECES + tuple(loop for loop in (*THROUGHPUT, *STEPS) if loop not in PIECES)
"""Every loop, in a fixed order: `bench/gpu.py --end-hash` names one by its index here."""
LR = 4e-4
ANCHOR_STRENGTH = 0.01
"""the GPU config's `base_anchor`"""


@contextmanager
def settings_of(loop: Loop) -> Iterator[None]:
    """Run the body under `loop`'s settings: the fastest turn deterministic algorithms off and TF32
    and cuDNN autotuning on; inductor's turn deterministic algorithms off and inductor's deterministic
    mode on; then every switch goes back. Compiled graphs are dropped on the way in and out, so no loop
    runs kernels compiled under another's settings.

    Going back includes the matmul's `fp32_precision` (torch 2.9 on): turning TF32 on and off again
    leaves it "ieee" where it was "none", the same precision under another name, and inductor's graph
    cache keys on the name, so every later loop would miss the graphs the earlier loops compiled in
    this process and compile them again (about 10 CPU-s of `--quick`)."""
    if loop.settings == "deterministic":
        yield
        return
    matmul, cudnn = torch.backends.cuda.matmul, torch.backends.cudnn
    saved = (
        torch.are_deterministic_algorithms_enabled(),
        matmul.allow_tf32,
        cudnn.allow_tf32,
        cudnn.benchmark,
        cudnn.deterministic,
        torch._inductor.config.deterministic,
    )
    precision = getattr(matmul, "fp32_precision", None)
    torch._dynamo.reset()
    torch.use_deterministic_algorithms(False)
    if loop.settings == "fastest":
        matmul.allow_tf32 = cudnn.allow_tf32 = cudnn.benchmark = True
        cudnn.deterministic = False
    else:
        torch._inductor.config.deterministic = True
    try:
        yield
    finally:
        torch._dynamo.reset()
        torch.use_deterministic_algorithms(saved[0])
        matmul.allow_tf32, cudnn.allow_tf32, cudnn.benchmark, cudnn.deterministic = saved[1:5]
        if precision is not None:
            matmul.fp32_precision = precision
        torch._inductor.config.deterministic = saved[5]


def sized_tokenizer(vocab: int | None) -> PreTrainedTokenizerFast:
    """The byte tokenizer (`vocab` None), or a word-level one of `vocab` tokens: the model's shape is
    what a run's tokenizer sets (50,257 for the GPU config's GPT-2 BPE), the batches are random ids."""
    return byte_tokenizer() if vocab is None else word_tokenizer(vocab)


def build(
    loop: Loop, preset: str, device: torch.device, vocab: int | None = None
) -> tuple[torch.nn.Module, torch.optim.Optimizer]:
    spec = ModelSpec(
        preset=preset,
        dtype=loop.dtype,
        attention=loop.attention,
        kernels=loop.kernels,
        pad_vocab_to=loop.pad_vocab_to,
    )
    model = load_model(spec, tokenizer=sized_tokenizer(vocab), device=str(device))
    if loop.compiled:
        model.compile()
    return model, optimizer_of(loop, model)


def optimizer_of(loop: Loop, model: torch.nn.Module) -> torch.optim.Optimizer:
    """A fresh inner optimizer of `loop`'s AdamW implementation (no state)."""
    return make_inner_optimizer(model, InnerOptimizerConfig(lr=LR, implementation=loop.adamw))


def token_vocab(model: torch.nn.Module) -> int:
    """The tokenizer's vocabulary the model's logits cover (below a padded output layer's rows)."""
    head = model.get_output_embeddings()
    return head.vocab if isinstance(head, PaddedHead) else model.config.vocab_size


def step_of(loop: Loop, micro_batches: int) -> Step:
    if not loop.project:
        return lambda model, optimizer, batch: bare_step(
            model, optimizer, batch, micro_batches, loop.autocast
        )
    config = InnerConfig(
        inner_steps=1,
        segment_steps=1,
        optimizer=InnerOptimizerConfig(lr=LR, implementation=loop.adamw),
        step=StepConfig(micro_batches=micro_batches, cpu_threads=None, autocast=loop.autocast),
        base_anchor=ANCHOR_STRENGTH if loop.anchor else 0.0,
        base_on_host=loop.anchor == "host",
    )
    anchors: dict[int, Anchor | None] = {}
    loss = one_hot_causal_lm_loss if loop.kernels == "atomic_free" else causal_lm_loss

    def project_step(model: torch.nn.Module, optimizer: torch.optim.Optimizer, batch: torch.Tensor) -> None:
        if id(model) not in anchors:  # the base is the model a loop starts from, as in a window
            anchors[id(model)] = own_anchor(model, config)
        run_steps(model, optimizer, [batch], loss, config, 0, anchors[id(model)])

    return project_step


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def step_seconds(
    step: Step,
    model: torch.nn.Module,
    optimizer: torch.optim.Optimizer,
    work: list[torch.Tensor],
    device: torch.device,
    warmup: int,
) -> list[float]:
    """Run `step` on each batch of `work`; the wall seconds of each step after the first `warmup`,
    the device synchronized around each."""
    times = []
    for i, batch in enumerate(work):
        sync(device)
        began = time.perf_counter()
        step(model, optimizer, batch)
        sync(device)
        if i >= warmup:
            times.append(time.perf_counter() - began)
    return times


def batches(vocab: int, rows: int, seq_len: int, count: int, seed: int = 0) -> list[torch.Tensor]:
    """`count` batches of random token ids from a seeded generator: every process draws the same."""
    generator = torch.Generator().manual_seed(seed)
    return [torch.randint(vocab, (rows, seq_len), generator=generator) for _ in range(count)]


def bare_step(
    model: torch.nn.Module,
    optimizer: torch.optim.Optimizer,
    batch: torch.Tensor,
    micro_batches: int,
    autocast: str | None,
) -> None:
    """What a PyTorch user writes: accumulate, clip, step; no thread pinning, no checks."""
    device = next(model.parameters()).device
    optimizer.zero_grad(set_to_none=True)
    for chunk in batch.to(device, non_blocking=True).split(batch.shape[0] // micro_batches):
        with torch.autocast(device.type, dtype=torch.bfloat16, enabled=autocast is not None):
            logits = model(input_ids=chunk).logits
        loss = torch.nn.functional.cross_entropy(
            logits[:, :-1].float().reshape(-1, logits.shape[-1]), chunk[:, 1:].reshape(-1)
        )
        (loss / micro_batches).backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    optimizer.step()


def flops_per_token(params: int, layers: int, seq_len: int, hidden: int) -> int:
    """Training FLOPs per token: 6N for the weights, 6·L·T·d for causal attention (forward and backward)."""
    return 6 * params + 6 * layers * seq_len * hidden
