"""Inner-loop tokens per second: the project's `inner_loop` versus a bare PyTorch loop.

Both train a fresh model on the same batches for the same number of steps, with one intra-op
thread. The bare loop is what one would write without the project: torch's default AdamW with
the same hyperparameters, `F.cross_entropy` on the logits, backward, gradient-norm clipping,
step. The project's loop adds what verification needs: the single-tensor AdamW, the scheduled
learning rate, a state hash and sketch at every segment boundary (every k steps), and the
parameter copies for the pseudo-gradient; it is measured at several k. The loops take turns,
repeat after repeat, after one untimed warm-up, so a slow spell on the shared machine hits all
of them alike.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from _config import BenchConfig, new_model
from transformers import PreTrainedTokenizerBase

from distrai.train.inner import inner_loop
from distrai.train.loss import causal_lm_loss

WARMUP_STEPS = 10


@dataclass(frozen=True)
class ThroughputResult:
    """Tokens per second of every repeat: the bare loop, and the project's loop by segment size k."""

    bare: list[float]
    inner: dict[int, list[float]]
    steps: int

    @property
    def bare_median(self) -> float:
        return statistics.median(self.bare)

    def inner_median(self, segment: int) -> float:
        return statistics.median(self.inner[segment])

    def ratio(self, segment: int) -> float:
        return self.inner_median(segment) / self.bare_median


def bare_loop(model: torch.nn.Module, batches: list[torch.Tensor], config: BenchConfig) -> None:
    """Plain forward / backward / clip / AdamW step over `batches`."""
    settings = config.optimizer_config()
    optimizer = torch.optim.AdamW(
        model.parameters(), lr=settings.lr, betas=settings.betas, weight_decay=settings.weight_decay
    )
    model.train()
    for batch in batches:
        optimizer.zero_grad(set_to_none=True)
        logits = model(input_ids=batch).logits[:, :-1]
        loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), batch[:, 1:].reshape(-1))
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()


def project_loop(segment: int) -> Callable[[torch.nn.Module, list[torch.Tensor], BenchConfig], None]:
    """The project's inner loop over `batches` as one window, with a boundary every `segment` steps."""

    def run(model: torch.nn.Module, batches: list[torch.Tensor], config: BenchConfig) -> None:
        settings = config.inner_config(len(batches), segment)
        inner_loop(model, lambda t: batches[t], causal_lm_loss, settings, keep_states=False)

    return run


def tokens_per_second(
    loop: Callable[[torch.nn.Module, list[torch.Tensor], BenchConfig], None],
    config: BenchConfig,
    tokenizer: PreTrainedTokenizerBase,
    batches: list[torch.Tensor],
) -> float:
    """Tokens per second of one run of `loop` from a fresh model (model building not timed)."""
    model = new_model(config, tokenizer)
    start = time.perf_counter()
    loop(model, batches, config)
    return sum(b.numel() for b in batches) / (time.perf_counter() - start)


def compare_throughput(
    config: BenchConfig, tokenizer: PreTrainedTokenizerBase, batches: list[torch.Tensor]
) -> ThroughputResult:
    """Tokens per second of every loop over `batches`, `config.throughput_repeats` times each."""
    bare: list[float] = []
    inner: dict[int, list[float]] = {k: [] for k in config.throughput_segments}
    previous = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        bare_loop(new_model(config, tokenizer), batches[:WARMUP_STEPS], config)
        for _ in range(config.throughput_repeats):
            bare.append(tokens_per_second(bare_loop, config, tokenizer, batches))
            for k in inner:
                inner[k].append(tokens_per_second(project_loop(k), config, tokenizer, batches))
    finally:
        torch.set_num_threads(previous)
    return ThroughputResult(bare=bare, inner=inner, steps=len(batches))
