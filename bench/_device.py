"""The benchmark's device mode: DDP against DiLoCo on one accelerator, at a budget where parity is fair.

DiLoCo reached DDP's loss with large per-worker batches, many outer rounds and a compute-optimal budget;
2 CPU cores afford none of these (the corpus sections of docs/benchmarks.md). Here one GPU trains:
- a preset's width with `layers` layers, sized to a byte-level BPE of `vocab_size` tokens (preset `small`'s
  width, 4 of its 8 layers, at 4,096 tokens: ~10.2M parameters; all 8 layers at 8,192 tokens, 20.5M,
  trained 4.2 tokens per parameter in the budget on an H200), built once, saved with `save_pretrained`
  and loaded from that folder for every method; on the real text of the running Python's installed
  sources (`_corpus.installed_corpus`: its standard library and site-packages, one document per file),
  documents held out whole;
- for about `tokens_per_param` tokens per parameter, cut to what fits the `run_seconds` the run has, at the pace a
  short calibration measures (the section says which bound held);
- DiLoCo started from DDP's model after `warm_start` of the steps, as the DiLoCo paper's main runs start
  from a pretrained checkpoint: every DiLoCo row trains the remaining steps from it, where DiLoCo is
  meant to work, and the same budget then holds about 1.5 times the steps of three cold starts;
- DDP as one large-batch process: each step runs the workers' batches as micro-batches of one
  `train_step` (gradient accumulation averages them, as DDP's all-reduce does);
- DiLoCo's workers one after another on the same device, each from the global model for H steps on
  its own batches (the same rows DDP's step t takes, worker by worker), then the project's
  `outer_step` (Nesterov) over their fp32 pseudo-gradients.

Every method starts from the same initial model, takes the same batches in the same order, with the
project's `train_step` (bf16 autocast over fp32 weights, SDPA, fused AdamW, grad-norm clip 1.0) and one
cosine learning-rate schedule over the global step (a linear warm-up, then cosine to
`final_lr_fraction`): DiLoCo's inner step s of round r runs at the schedule's step r·H + s. The
DiLoCo rows differ in the inner AdamW:
- `diloco`, the project's recipe: a fresh AdamW every round (every window, on the network), its
  first `round_warmup` steps warmed up again;
- `diloco-kept`: each worker keeps its AdamW across rounds (the peer's design, torchft's).
Deterministic algorithms are off and TF32 is on: this measures convergence, not replay.
"""

from __future__ import annotations

import copy
import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import torch
from _corpus import Corpus, read_documents, token_bytes, train_tokenizer
from transformers import LlamaForCausalLM, PreTrainedModel, PreTrainedTokenizerBase

from distrai.data.stream import is_heldout_document
from distrai.train.evaluate import evaluate
from distrai.train.inner import float_params, pseudo_gradient
from distrai.train.loss import causal_lm_loss
from distrai.train.model import ModelSpec, count_parameters, load_model, preset_config
from distrai.train.optimizer import InnerOptimizerConfig, make_inner_optimizer, set_lr
from distrai.train.outer import Contribution, OuterConfig, OuterState, outer_step
from distrai.train.step import train_step

METHODS = ("ddp", "diloco", "diloco-kept")
METHOD_LABELS = {
    "ddp": "DDP (gradients averaged every step)",
    "diloco": "DiLoCo fp32, fresh AdamW every round (the project's recipe)",
    "diloco-kept": "DiLoCo fp32, AdamW kept across rounds (the peer's design)",
}
SEED = 0
EVAL_RESERVE = 20.0
"""seconds kept for building and evaluating the methods' models"""
ROUND_OVERHEAD = 1.1
"""DiLoCo's rounds also move the parameters and run the outer step on the CPU: planned steps cost 10% more"""


@dataclass(frozen=True)
class DeviceConfig:
    """Everything that sets the device mode's numbers (its defaults: one H100 in under 8 minutes)."""

    device: str = "cuda"
    preset: str = "small"
    layers: int | None = 4
    """the preset's width with this many layers (None: the preset's own)"""
    vocab_size: int = 4096
    seq_len: int = 512
    workers: int = 4
    worker_batch: int = 64
    """sequences per worker step; DDP's step takes workers × worker_batch"""
    inner_steps: int = 50
    tokens_per_param: float = 20.0
    run_seconds: float = 440.0
    """the most the whole run may take: what tokenizing and calibration leave of it, less `EVAL_RESERVE`, is
    what the methods' training may take together at the calibrated pace (with `ROUND_OVERHEAD`)"""
    steps: int | None = None
    """steps per worker; None: from tokens_per_param, cut to what run_seconds leaves"""
    warm_start: float = 0.5
    """the share of the steps DDP trains before every DiLoCo row starts from its model (0: DiLoCo from the
    initial model)"""
    calibration_steps: int = 6
    lr: float = 2e-3
    final_lr_fraction: float = 0.1
    warmup_steps: int = 100
    round_warmup: int | None = None
    """fresh-AdamW rounds: warm-up steps at each round's start; None: 10% of H (as the corpus runs' 20 of 200)"""
    weight_decay: float = 0.1
    outer: OuterConfig = field(default_factory=OuterConfig)
    corpus_bytes: int = 160_000_000
    tokenizer_bytes: int = 24_000_000
    """text the tokenizer is trained on: the first training documents up to this many bytes"""
    heldout_fraction: float = 0.01
    heldout_sequences: int = 2048
    methods: tuple[str, ...] = METHODS

    def __post_init__(self) -> None:
        for name in (
            "workers",
            "worker_batch",
            "inner_steps",
            "seq_len",
            "calibration_steps",
            "heldout_sequences",
        ):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be at least 1, got {getattr(self, name)}")
        if self.workers < 2:
            raise ValueError(f"DiLoCo needs at least 2 workers, got {self.workers}")
        unknown = [m for m in self.methods if m not in METHODS]
        if unknown or not self.methods or self.methods[0] != "ddp":
            raise ValueError(f"methods must start with 'ddp' and come from {METHODS}, got {self.methods}")
        if self.steps is not None and (self.steps < self.inner_steps or self.steps % self.inner_steps):
            raise ValueError(f"steps {self.steps} must be a positive multiple of H = {self.inner_steps}")
        if not 0 <= self.warm_start < 1:
            raise ValueError(f"warm_start must be in [0, 1), got {self.warm_start}")
        if self.layers is not None and self.layers < 1:
            raise ValueError(f"layers must be at least 1, got {self.layers}")
        if not 0 <= self.final_lr_fraction <= 1:
            raise ValueError(f"final_lr_fraction must be in [0, 1], got {self.final_lr_fraction}")

    @property
    def round_warmup_steps(self) -> int:
        return max(1, self.inner_steps // 10) if self.round_warmup is None else self.round_warmup

    @property
    def tokens_per_step(self) -> int:
        """Tokens of one global step: every worker's batch."""
        return self.workers * self.worker_batch * self.seq_len

    def optimizer(self) -> InnerOptimizerConfig:
        return InnerOptimizerConfig(lr=self.lr, weight_decay=self.weight_decay, implementation=self.adamw)

    @property
    def adamw(self) -> str:
        return "fused" if self.device == "cuda" else "single"

    @property
    def autocast(self) -> str | None:
        return "bfloat16" if self.device == "cuda" else None

    @property
    def attention(self) -> str:
        return "sdpa" if self.device == "cuda" else "eager"


def quick_device(config: DeviceConfig) -> DeviceConfig:
    """A seconds-long version that runs every code path on `config.device` (for the smoke test)."""
    return DeviceConfig(
        device=config.device,
        preset="tiny",
        vocab_size=384,
        seq_len=32,
        workers=2,
        worker_batch=2,
        inner_steps=3,
        steps=6,
        calibration_steps=2,
        warmup_steps=2,
        round_warmup=1,
        corpus_bytes=150_000,
        tokenizer_bytes=150_000,
        heldout_fraction=0.1,
        heldout_sequences=16,
    )


def cosine_lr(config: DeviceConfig, step: int, steps: int) -> float:
    """The schedule's learning rate at global step `step` of `steps`: linear warm-up over
    `warmup_steps`, then cosine from lr down to lr · final_lr_fraction at the last step."""
    if step < config.warmup_steps:
        return config.lr * (step + 1) / config.warmup_steps
    span = max(1, steps - 1 - config.warmup_steps)
    progress = min(1.0, (step - config.warmup_steps) / span)
    floor = config.final_lr_fraction
    return config.lr * (floor + (1 - floor) * 0.5 * (1 + math.cos(math.pi * progress)))


@dataclass(frozen=True)
class Tokens:
    """The corpus tokenized: training rows [N, seq_len] and held-out rows, and the tokenizer."""

    tokenizer: PreTrainedTokenizerBase
    train: torch.Tensor
    heldout: torch.Tensor
    training_documents: int
    heldout_documents: int
    tokenizer_seconds: float
    tokenize_seconds: float


def tokenize_corpus(corpus: Corpus, config: DeviceConfig, folder: Path) -> Tokens:
    """Train the BPE on the first training documents up to `tokenizer_bytes`, tokenize every document
    (EOS after each), and cut each split's stream into rows of `seq_len` tokens."""
    documents = read_documents(corpus)
    training = [
        text for i, text in enumerate(documents) if not is_heldout_document(i, config.heldout_fraction)
    ]
    heldout = [text for i, text in enumerate(documents) if is_heldout_document(i, config.heldout_fraction)]
    sample, size = [], 0
    for text in training:
        if size >= config.tokenizer_bytes:
            break
        sample.append(text)
        size += len(text.encode())
    started = time.perf_counter()
    tokenizer = train_tokenizer(sample, config.vocab_size, folder)
    trained = time.perf_counter()
    train_rows = _rows(tokenizer, training, config.seq_len)
    heldout_rows = _rows(tokenizer, heldout, config.seq_len)[: config.heldout_sequences]
    if heldout_rows.shape[0] == 0:
        raise ValueError("the held-out documents fill no sequence: raise corpus_bytes or heldout_fraction")
    return Tokens(
        tokenizer,
        train_rows,
        heldout_rows,
        len(training),
        len(heldout),
        trained - started,
        time.perf_counter() - trained,
    )


def _rows(tokenizer: PreTrainedTokenizerBase, texts: list[str], seq_len: int) -> torch.Tensor:
    eos = tokenizer.eos_token_id
    ids = tokenizer(texts, add_special_tokens=False)["input_ids"]
    stream = torch.cat([torch.tensor([*document, eos], dtype=torch.long) for document in ids])
    rows = stream.numel() // seq_len
    return stream[: rows * seq_len].view(rows, seq_len)


class Batches:
    """Worker `k`'s batch at global step t: rows of a seeded permutation of the training rows (a new
    permutation each pass over them), the same whatever the method."""

    def __init__(self, rows: torch.Tensor, config: DeviceConfig, device: torch.device) -> None:
        self.rows = rows.to(device)
        self.config = config
        self._orders: dict[int, torch.Tensor] = {}

    def _order(self, epoch: int) -> torch.Tensor:
        if epoch not in self._orders:
            generator = torch.Generator().manual_seed(SEED + epoch)
            self._orders[epoch] = torch.randperm(self.rows.shape[0], generator=generator)
        return self._orders[epoch]

    def worker(self, step: int, worker: int) -> torch.Tensor:
        c = self.config
        first = (step * c.workers + worker) * c.worker_batch
        n = self.rows.shape[0]
        picked = [self._order((first + i) // n)[(first + i) % n] for i in range(c.worker_batch)]
        return self.rows[torch.stack(picked).to(self.rows.device)]

    def step(self, step: int) -> torch.Tensor:
        return torch.cat([self.worker(step, k) for k in range(self.config.workers)])


@dataclass(frozen=True)
class MethodResult:
    method: str
    heldout_loss: float
    seconds: float
    rounds: int


def save_initial_model(config: DeviceConfig, tokenizer: PreTrainedTokenizerBase, folder: Path) -> Path:
    """The initial model of every method (the preset's width, `config.layers` layers, seeded), saved
    with `save_pretrained` into `folder`."""
    shape = preset_config(config.preset, tokenizer, config.attention)
    if config.layers is not None:
        shape.num_hidden_layers = config.layers
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(SEED)
        LlamaForCausalLM(shape).save_pretrained(folder)
    return folder


def new_model(
    config: DeviceConfig, folder: Path, tokenizer: PreTrainedTokenizerBase, device: torch.device
) -> PreTrainedModel:
    """The initial model, loaded from `folder` (`save_initial_model`) as a checkpoint is."""
    return load_model(
        ModelSpec(path_or_id=str(folder), attention=config.attention), tokenizer=tokenizer, device=device
    )


def _step(config: DeviceConfig, model, optimizer, batch: torch.Tensor, micro_batches: int) -> None:
    train_step(
        model,
        optimizer,
        batch,
        loss_fn=causal_lm_loss,
        micro_batches=micro_batches,
        cpu_threads=None,
        autocast=config.autocast,
    )


def calibrate(config: DeviceConfig, folder: Path, tokenizer, batches: Batches, device: torch.device) -> float:
    """Seconds of one worker step (the unit every method spends workers of per global step), the
    median of `calibration_steps` after two untimed ones."""
    model = new_model(config, folder, tokenizer, device)
    optimizer = make_inner_optimizer(model, config.optimizer())
    times = []
    for step in range(config.calibration_steps + 2):
        _sync(device)
        start = time.perf_counter()
        _step(config, model, optimizer, batches.worker(step, 0), 1)
        _sync(device)
        times.append(time.perf_counter() - start)
    del model, optimizer
    return sorted(times[2:])[len(times[2:]) // 2]


def warm_steps(config: DeviceConfig, steps: int) -> int:
    """The steps DDP trains before the DiLoCo rows start from its model: `warm_start` of `steps`, a
    multiple of H, leaving DiLoCo at least one round."""
    h = config.inner_steps
    return min(steps - h, round(steps * config.warm_start / h) * h)


def plan_steps(
    config: DeviceConfig, parameters: int, step_seconds: float, seconds: float
) -> tuple[int, int, str]:
    """(steps per worker, the token target's steps, which bound set them): the steps that give
    tokens_per_param tokens per parameter, cut to what the methods fit in `seconds`, as a multiple of H.
    DDP trains every step; each DiLoCo row the steps after the warm start."""
    h = config.inner_steps
    target = max(h, round(config.tokens_per_param * parameters / config.tokens_per_step / h) * h)
    if config.steps is not None:
        return config.steps, target, "set by --steps"
    methods = 1 + (len(config.methods) - 1) * (1 - config.warm_start)
    per_step = step_seconds * config.workers * methods * ROUND_OVERHEAD
    fits = max(h, math.floor(seconds / per_step + 1e-9) // h * h)
    if fits < target:
        return fits, target, f"time: {seconds:.0f} s left for training, at the calibrated pace"
    return target, target, f"the token target: {config.tokens_per_param:g} tokens per parameter"


def train_ddp(
    config: DeviceConfig, model, batches: Batches, steps: int, warm: int
) -> dict[str, torch.Tensor]:
    """Every step; returns the model after the first `warm` (a float32 copy), where DiLoCo starts."""
    optimizer = make_inner_optimizer(model, config.optimizer())
    snapshot = float_params(model)
    for step in range(steps):
        set_lr(optimizer, cosine_lr(config, step, steps))
        _step(config, model, optimizer, batches.step(step), config.workers)
        if step + 1 == warm:
            snapshot = float_params(model)
    return snapshot


def train_diloco(
    config: DeviceConfig, model, batches: Batches, steps: int, first: int, keep_adamw: bool
) -> int:
    """Rounds of H steps from global step `first` (a multiple of H) to `steps`, from the model's
    parameters; `model` ends holding the final global parameters. Returns the rounds."""
    workers = [model] + [copy.deepcopy(model) for _ in range(config.workers - 1)]
    kept = [make_inner_optimizer(w, config.optimizer()) for w in workers] if keep_adamw else None
    global_params = float_params(model)
    state = OuterState(momentum={})
    h = config.inner_steps
    for r in range(first // h, steps // h):
        contributions = []
        for k, worker in enumerate(workers):
            _load(worker, global_params)
            optimizer = kept[k] if kept is not None else make_inner_optimizer(worker, config.optimizer())
            for s in range(h):
                lr = cosine_lr(config, r * h + s, steps)
                if kept is None and config.round_warmup_steps:
                    lr *= min(1.0, (s + 1) / config.round_warmup_steps)
                set_lr(optimizer, lr)
                _step(config, worker, optimizer, batches.worker(r * h + s, k), 1)
            delta = pseudo_gradient(global_params, float_params(worker))
            contributions.append(Contribution(key=f"worker-{k}", pseudo_gradient=delta, weight=1.0))
        outcome = outer_step(global_params, contributions, state, config.outer)
        global_params, state = outcome.params, outcome.state
    _load(model, global_params)
    return (steps - first) // h


def _load(model, params: dict[str, torch.Tensor]) -> None:
    with torch.no_grad():
        for name, p in model.named_parameters():
            p.copy_(params[name])


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


@dataclass(frozen=True)
class DeviceRun:
    """What one device-mode run measured, and everything that set it."""

    config: DeviceConfig
    device_name: str
    corpus: Corpus
    tokens: Tokens
    parameters: int
    step_seconds: float
    steps: int
    warm: int
    """the steps DDP trained before the DiLoCo rows started from its model"""
    target_steps: int
    bound: str
    results: list[MethodResult]
    bytes_per_token: float
    total_seconds: float


def run_device(config: DeviceConfig, corpus: Corpus, folder: Path, log: Callable[[str], None]) -> DeviceRun:
    """Tokenize, calibrate, plan, then train and evaluate every method in turn."""
    started = time.perf_counter()
    device = torch.device(config.device)
    if device.type == "cuda":
        torch.backends.cuda.matmul.allow_tf32 = True
        torch.backends.cudnn.allow_tf32 = True
    log(f"tokenizing {len(corpus.files)} files ({corpus.bytes:,} bytes) …")
    tokens = tokenize_corpus(corpus, config, folder / "tokenizer")
    log(
        f"{tokens.train.numel():,} training tokens, {tokens.heldout.numel():,} held out "
        f"(tokenizer {tokens.tokenizer_seconds:.0f} s, tokenizing {tokens.tokenize_seconds:.0f} s)"
    )
    batches = Batches(tokens.train, config, device)
    initial = save_initial_model(config, tokens.tokenizer, folder / "initial-model")
    parameters = count_parameters(new_model(config, initial, tokens.tokenizer, torch.device("cpu")))
    step_seconds = calibrate(config, initial, tokens.tokenizer, batches, device)
    left = config.run_seconds - (time.perf_counter() - started) - EVAL_RESERVE
    steps, target, bound = plan_steps(config, parameters, step_seconds, left)
    warm = warm_steps(config, steps)
    log(
        f"{parameters:,} parameters; a worker step takes {step_seconds * 1000:.1f} ms; {steps} steps per worker "
        f"({steps * config.tokens_per_step / parameters:.1f} tokens per parameter; bound: {bound}); DiLoCo "
        f"from DDP's model after {warm}"
    )
    heldout = tokens.heldout.to(device)
    results = []
    start_params: dict[str, torch.Tensor] = {}
    for method in config.methods:
        model = new_model(config, initial, tokens.tokenizer, device)
        if method != "ddp":
            _load(model, start_params)
        _sync(device)
        start = time.perf_counter()
        if method == "ddp":
            start_params, rounds = train_ddp(config, model, batches, steps, warm), 0
        else:
            rounds = train_diloco(config, model, batches, steps, warm, keep_adamw=method == "diloco-kept")
        _sync(device)
        seconds = time.perf_counter() - start
        loss = evaluate(model, heldout, batch_size=32, cpu_threads=None)
        log(f"{METHOD_LABELS[method]}: held-out loss {loss:.4f} in {seconds:.0f} s")
        results.append(MethodResult(method, loss, seconds, rounds))
        del model
    targets = tokens.heldout[:, 1:]
    bytes_per_token = float(torch.tensor(token_bytes(tokens.tokenizer))[targets].sum()) / targets.numel()
    name = torch.cuda.get_device_name(device) if device.type == "cuda" else "CPU"
    return DeviceRun(
        config,
        name,
        corpus,
        tokens,
        parameters,
        step_seconds,
        steps,
        warm,
        target,
        bound,
        results,
        bytes_per_token,
        time.perf_counter() - started,
    )
