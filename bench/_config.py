"""The benchmark's configuration, and what every method shares: model, data and batch schedule.

The data is a choice (`BenchConfig.corpus`): the templated built-in corpus under the byte tokenizer
(built in memory by every process; fast, what the tests run), or real text (`_corpus.py`) prepared
into shards in a file store, which every process opens from there (`PreparedSource`) as a node opens
a run's prepared data, fetching and checking the shards its batches reach.

All four methods (DDP, DiLoCo fp32 / int8 / top-k) start from the same initial model and consume
exactly the same batches, in the same order (`worker_schedule`). DDP runs those steps one after
another with all-reduced gradients; a DiLoCo row runs them as R = steps / H windows of H inner steps.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from pathlib import Path

import torch
from _corpus import Corpus, PreparedText, prepare_corpus
from rich.console import Console
from transformers import PreTrainedModel, PreTrainedTokenizerBase

from distrai.data.access import DataAccess, open_prepared
from distrai.protocol.run import load_run_config, shipped_config_path
from distrai.store import open_store
from distrai.train.assignment import batch_indices
from distrai.train.data import DataSpec, TrainingData, build_token_data
from distrai.train.inner import InnerConfig
from distrai.train.model import ModelSpec, load_model, load_tokenizer
from distrai.train.optimizer import InnerOptimizerConfig
from distrai.train.outer import OuterConfig
from distrai.train.step import StepConfig

RUN_ID = "bench-convergence"
CORPORA = ("templated", "real")
PEERS = ("torchft",)


@dataclass(frozen=True)
class CodecChoice:
    """One DiLoCo row: a label, the codec (name and options) its workers upload with, the number
    of inner steps H per round, and the outer optimizer."""

    label: str
    name: str
    options: dict[str, object] = field(default_factory=dict)
    inner_steps: int = 200
    outer: OuterConfig = field(default_factory=OuterConfig)
    pipelined: bool = False
    """window w trains from the model before window w − 1's outer step, as pipelined windows do"""
    sweep: bool = False
    """a row of the sweep around the shipped combination (its own table), not of the main table"""
    keep_adamw: bool = False
    """each worker keeps one inner AdamW across rounds, its learning rate at the global step (its warm-up
    once), as torchft's DiLoCo does, instead of the project's `inner_loop` (a fresh AdamW every round)"""


SPARSELOCO_OUTER = OuterConfig(lr=4.0, momentum=0.0, nesterov=False)
"""Outer SGD without momentum for top-k (as in SparseLoCo, where error feedback stands in for
momentum); the learning rate was chosen by the sweep recorded in docs/benchmarks.md."""


REAL_TEXT_TOPK = CodecChoice(
    "DiLoCo + top-k", "topk", {"chunk": 4096, "k": 128}, 50, OuterConfig(lr=2.5, momentum=0.0, nesterov=False)
)
"""Top-k on real text: k and the outer learning rate chosen by the sweep recorded in docs/benchmarks.md
(on training-split sequences that no worker trains on), the best loss found that meets the traffic
target."""


SHIPPED_CONFIG = "gpu-subnet"
"""The run config whose recipe the shipped-combination row trains (`shipped_choice`)."""

SWEEP_OUTER = ((0.7, 1.5, 2.5), (0.0, 0.3, 0.6))
"""The sweep's outer learning rates and Nesterov momenta, every pair, pipelined as shipped."""

SWEEP_DECAYS = (0.0, 0.9, 0.95, 1.0)
"""The sweep's error-feedback decays, at the shipped outer step (0: no error feedback)."""


def shipped_choice(inner_steps: int) -> CodecChoice:
    """The DiLoCo row as `SHIPPED_CONFIG` ships it: its codec with its options (top-k with error
    feedback), its outer step (Nesterov, clipped to the median norm) and its pipelined windows (the
    outer step lands one window late), at the benchmark's H."""
    run = load_run_config(shipped_config_path(SHIPPED_CONFIG))
    outer = OuterConfig(**run.outer.model_dump())
    return CodecChoice(
        "DiLoCo as shipped",
        run.codec.name,
        dict(run.codec.options),
        inner_steps,
        outer,
        run.windows.pipelined,
    )


def sweep_choices(shipped: CodecChoice) -> tuple[CodecChoice, ...]:
    """The sweep around `shipped`: every outer learning rate and momentum of `SWEEP_OUTER`, then every
    decay of `SWEEP_DECAYS`, then the shipped step without the delay (sequential windows); the shipped
    combination itself is not repeated."""
    lrs, momenta = SWEEP_OUTER
    outer = [
        replace(
            shipped, label=f"outer lr {lr}, momentum {m}", outer=replace(shipped.outer, lr=lr, momentum=m)
        )
        for lr in lrs
        for m in momenta
    ]
    decays = [
        replace(
            shipped,
            label=f"error-feedback decay {d:g}" if d else "no error feedback (decay 0)",
            options={**shipped.options, "decay": d},
        )
        for d in SWEEP_DECAYS
    ]
    sequential = replace(shipped, label="no delay (sequential windows)", pipelined=False)
    rows = [replace(c, sweep=True) for c in (*outer, *decays, sequential)]
    return tuple(
        c
        for c in rows
        if (c.outer, c.options, c.pipelined) != (shipped.outer, shipped.options, shipped.pipelined)
    )


@dataclass(frozen=True)
class BenchConfig:
    """Everything that sets the benchmark's numbers."""

    corpus: str = "templated"
    preset: str = "tiny"
    seq_len: int = 64
    batch_size: int = 8
    workers: int = 4
    steps: int = 800
    data_window: int = 200
    segment_steps: int = 25
    lr: float = 1e-3
    weight_decay: float = 0.1
    warmup_steps: int = 20
    codecs: tuple[CodecChoice, ...] = (
        CodecChoice("DiLoCo fp32", "none"),
        CodecChoice("DiLoCo + int8", "int8", {"chunk": 4096}),
        CodecChoice("DiLoCo + top-k", "topk", {"chunk": 4096, "k": 64}, 50, SPARSELOCO_OUTER),
    )
    documents: int = 4000
    """templated corpus: documents generated"""
    heldout_fraction: float = 0.05
    corpus_bytes: int = 6_000_000
    """real text: the most bytes of standard-library files read"""
    vocab_size: int = 4096
    """real text: tokens of the BPE tokenizer, EOS included"""
    shard_sequences: int = 256
    """real text: sequences per prepared shard, the data assignment's unit"""
    heldout_sequences: int = 1024
    """real text: the held-out split's cap, in sequences"""
    distill_steps: int = 400
    throughput_steps: int = 100
    throughput_segments: tuple[int, ...] = (25, 10, 5)
    throughput_repeats: int = 3
    peer: str | None = None
    """another implementation to train beside the project's methods (`PEERS`), or None"""
    ddp: bool = True
    """train DDP first (the reference row, and the distillation's teacher); False: the DiLoCo rows alone
    (bench/inner_recipe.py)"""

    def __post_init__(self) -> None:
        if self.corpus not in CORPORA:
            raise ValueError(f"unknown corpus {self.corpus!r}; choose one of {CORPORA}")
        if self.peer not in (None, *PEERS):
            raise ValueError(f"unknown peer {self.peer!r}; choose one of {PEERS}")
        if self.workers < 2:
            raise ValueError(f"the benchmark needs at least 2 workers, got {self.workers}")
        for name in ("steps", "data_window", "batch_size", "distill_steps", "throughput_repeats"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be at least 1, got {getattr(self, name)}")
        for choice in self.codecs:
            if choice.inner_steps < 1 or self.steps % choice.inner_steps:
                raise ValueError(
                    f"{choice.label}: H = {choice.inner_steps} does not divide the {self.steps} steps per worker"
                )
            self.inner_config(choice.inner_steps)
        for segment in self.throughput_segments:
            self.inner_config(self.throughput_steps, segment)

    @property
    def tokens(self) -> int:
        """The token budget of every method: workers × steps × batch × sequence length."""
        return self.workers * self.steps * self.batch_size * self.seq_len

    def model_spec(self, init_seed: int = 0) -> ModelSpec:
        return ModelSpec(preset=self.preset, init_seed=init_seed)

    def optimizer_config(self) -> InnerOptimizerConfig:
        return InnerOptimizerConfig(
            lr=self.lr, weight_decay=self.weight_decay, warmup_steps=self.warmup_steps
        )

    def inner_config(self, inner_steps: int, segment_steps: int | None = None) -> InnerConfig:
        """The inner loop of a window of `inner_steps` steps, with a boundary every `segment_steps`
        (default: the benchmark's, or the whole window if that is shorter)."""
        segment = min(self.segment_steps, inner_steps) if segment_steps is None else segment_steps
        return InnerConfig(
            inner_steps=inner_steps,
            segment_steps=segment,
            optimizer=self.optimizer_config(),
            step=StepConfig(cpu_threads=1),
            sketch_seed=RUN_ID,
        )

    def data_spec(self) -> DataSpec:
        return DataSpec(
            seq_len=self.seq_len, builtin_documents=self.documents, heldout_fraction=self.heldout_fraction
        )


def for_corpus(corpus: str, sweep: bool = False) -> BenchConfig:
    """The benchmark's settings on `corpus`. Real text keeps the model preset, steps, H, learning
    rates and the fp32 and int8 rows, but halves the batch, so that the run fits a shared 2-core
    machine: the preset sized to a 4,096-token vocabulary has 2.5 times the parameters and a step at
    batch 8 costs about twice the byte-level one's (97 against 49 ms on one thread here), at batch 4
    about the same; its top-k row is `REAL_TEXT_TOPK`, and it adds the shipped combination
    (`shipped_choice`) at the same H, with `sweep` the sweep around it (`sweep_choices`). It skips the
    throughput runs (a property of the loop, measured on the templated corpus)."""
    default = BenchConfig()
    if corpus == "templated":
        return default
    fp32, int8, _ = default.codecs
    shipped = shipped_choice(REAL_TEXT_TOPK.inner_steps)
    codecs = (fp32, int8, REAL_TEXT_TOPK, shipped, *(sweep_choices(shipped) if sweep else ()))
    return replace(default, corpus=corpus, batch_size=4, codecs=codecs, throughput_segments=())


def quick(config: BenchConfig) -> BenchConfig:
    """A seconds-long version of `config` that runs every code path (for the smoke test): tiny sizes
    and 2 workers, so that starting the worker processes stays cheap."""
    return replace(
        config,
        workers=2,
        seq_len=32,
        batch_size=4,
        steps=8,
        data_window=4,
        segment_steps=2,
        warmup_steps=2,
        codecs=tuple(
            replace(c, inner_steps=4 if c.inner_steps >= config.data_window else 2) for c in config.codecs
        ),
        documents=200,
        heldout_fraction=0.1,
        distill_steps=3,
        throughput_steps=4,
        throughput_segments=(2,) if config.throughput_segments else (),
        throughput_repeats=2,
        corpus_bytes=120_000,
        vocab_size=384,
        shard_sequences=8,
        heldout_sequences=32,
    )


def worker_names(config: BenchConfig) -> list[str]:
    return [f"worker-{w}" for w in range(config.workers)]


@dataclass(frozen=True)
class PreparedSource:
    """Where real text was prepared: a store and the manifest's hash (what a run config names)."""

    store: str
    manifest: str


def prepare_text(config: BenchConfig, corpus: Corpus, folder: Path, console: Console) -> PreparedText:
    """Train the tokenizer on `corpus` and prepare it into `folder` at the shapes `config` trains on."""
    console.print(f"training the tokenizer and preparing {len(corpus.files)} files ({corpus.sha256}) …")
    return prepare_corpus(
        corpus,
        folder,
        config.vocab_size,
        config.heldout_fraction,
        shard_tokens=config.shard_sequences * config.seq_len,
        heldout_max_tokens=config.heldout_sequences * config.seq_len,
    )


def load_data(
    config: BenchConfig, prepared: PreparedSource | None = None, cache_dir: Path | None = None
) -> tuple[PreTrainedTokenizerBase, TrainingData]:
    """The tokenizer and data of `config.corpus`: the templated corpus, built here, or the prepared
    real text, opened from its store with shards cached in `cache_dir` (one folder per process)."""
    if config.corpus == "templated":
        tokenizer = load_tokenizer(config.model_spec(), "byte")
        return tokenizer, build_token_data(config.data_spec(), tokenizer)
    if prepared is None or cache_dir is None:
        raise ValueError("real text is read from prepared shards: give their store and a cache folder")
    access = DataAccess(open_store(prepared.store), cache_dir)
    data, tokenizer = open_prepared(access, prepared.manifest, config.seq_len)
    return tokenizer, data


def new_model(config: BenchConfig, tokenizer: PreTrainedTokenizerBase, init_seed: int = 0) -> PreTrainedModel:
    return load_model(config.model_spec(init_seed), tokenizer=tokenizer)


def worker_schedule(config: BenchConfig, data: TrainingData, worker: int) -> list[list[int]]:
    """Training-sequence indices of `worker`'s batch at each global step 0 … steps − 1: the data
    assignment of hotkey `worker-w` at step t mod W of window t div W (W = `data_window`), in the
    data's units (a prepared shard, or one sequence), the same batches whatever a method's H."""
    miners = worker_names(config)
    return [
        batch_indices(
            RUN_ID,
            step // config.data_window,
            miners[worker],
            step % config.data_window,
            config.batch_size,
            data.n_train,
            miners,
            data.unit,
        )
        for step in range(config.steps)
    ]


def load_params(model: torch.nn.Module, params: dict[str, torch.Tensor]) -> None:
    """Copy named float32 parameters into the model."""
    with torch.no_grad():
        for name, param in model.named_parameters():
            param.copy_(params[name])
