"""What a node builds from the run config before its first window: tokenizer, data, model, loss,
inner-loop settings and codec. Miners and validators build the same things the same way."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import torch
from transformers import PreTrainedModel, PreTrainedTokenizerBase

from distrai.codec import Codec, get_codec
from distrai.data.access import DataAccess, open_prepared
from distrai.data.tokenizers import tokenizer_sha256
from distrai.protocol.run import ModelSource, RunConfig, run_id
from distrai.train.assignment import batch_indices
from distrai.train.data import DataSpec, TrainingData, build_token_data
from distrai.train.distill import DistillationLoss, DistillConfig
from distrai.train.hashing import hash_tensors
from distrai.train.inner import InnerConfig
from distrai.train.kernels import one_hot_causal_lm_loss
from distrai.train.loss import LossFn, causal_lm_loss
from distrai.train.memory import MemoryPlan, ModelShape, plan_memory, set_checkpointing
from distrai.train.model import ModelSpec, load_model, load_teacher, load_tokenizer
from distrai.train.optimizer import InnerOptimizerConfig
from distrai.train.parallel import DataParallel, FullyShardedParallel, Launch
from distrai.train.step import StepConfig, over_ranks

PARAMS_TAG = "global_params"


def model_spec(source: ModelSource) -> ModelSpec:
    return ModelSpec(
        preset=source.preset,
        path_or_id=source.path_or_id,
        revision=source.revision,
        dtype=source.dtype,
        attention=source.attention,
        init_seed=source.init_seed if source.preset is not None else 0,
        kernels=source.kernels,
        pad_vocab_to=source.pad_vocab_to,
    )


def inner_config(config: RunConfig, run: str) -> InnerConfig:
    t = config.train
    return InnerConfig(
        inner_steps=t.inner_steps,
        segment_steps=t.segment_steps,
        optimizer=InnerOptimizerConfig(
            lr=t.lr,
            betas=t.betas,
            eps=t.eps,
            weight_decay=t.weight_decay,
            warmup_steps=t.warmup_steps,
            implementation=t.adamw,
        ),
        step=StepConfig(
            micro_batches=t.micro_batches,
            max_grad_norm=t.max_grad_norm,
            cpu_threads=t.cpu_threads,
            autocast=t.autocast,
        ),
        sketch_seed=run,
        base_anchor=t.base_anchor,
        boundary_moments=t.boundary_moments,
    )


def params_hash(params: dict[str, torch.Tensor]) -> str:
    """The canonical hash of a global model's parameters (the `base_hash` of manifests)."""
    return hash_tensors(PARAMS_TAG, params)


@dataclass
class Runtime:
    config: RunConfig
    run_id: str
    tokenizer: PreTrainedTokenizerBase
    data: TrainingData
    model: PreTrainedModel
    loss_fn: LossFn
    inner: InnerConfig
    codec: Codec
    device: torch.device
    parallel: DataParallel | None = None
    """this process's place among a miner's ranks (`parallel.py`); None: one process"""

    def initial_params(self) -> dict[str, torch.Tensor]:
        """The run's starting global model: every node builds the same bytes from the config."""
        fresh = load_model(model_spec(self.config.model), tokenizer=self.tokenizer)
        return {name: p.detach().to(torch.float32).clone() for name, p in fresh.named_parameters()}

    def batch(self, window: int, owner: str, miners: list[str], step: int) -> torch.Tensor:
        """The sequences `owner` trains on at inner step `step` of `window`, among the window's
        `miners` (`distrai.train.assignment.batch_indices`): what the miner trains, a validator
        replays and a miner rebuilding a state replays again."""
        size = self.config.train.batch_size
        return self.data.batch(
            batch_indices(self.run_id, window, owner, step, size, self.data.n_train, miners, self.data.unit)
        )

    def replica(self) -> PreTrainedModel:
        """Another model of the run's shape on this runtime's device, as `build_runtime` builds the
        working one: for work beside the training (a miner's rebuilt states, `miners.rebuild`)."""
        model = load_model(model_spec(self.config.model), tokenizer=self.tokenizer, device=self.device)
        if self.config.train.compile:
            model.compile()
        return model

    def shapes(self) -> dict[str, tuple[int, ...]]:
        return {name: tuple(p.shape) for name, p in self.model.named_parameters()}

    def load_params(self, params: dict[str, torch.Tensor]) -> None:
        """Put the global parameters into the working model (on sharded ranks, the leader hands every
        rank its shards: `parallel.FullyShardedParallel.load`)."""
        if self.parallel is not None and self.parallel.sharded:
            self.parallel.load(params)
            return
        with torch.no_grad():
            for name, p in self.model.named_parameters():
                p.copy_(params[name].to(p.dtype))


def run_on_ranks(runtime: Runtime, launch: Launch) -> None:
    """Make `runtime` one of a miner's `launch.world` data-parallel ranks: every step splits the
    batch over them (the manifest records it). Refuses a batch that does not split evenly."""
    step = over_ranks(runtime.inner.step, runtime.config.train.batch_size, launch.world)
    runtime.inner = dataclasses.replace(runtime.inner, step=step)
    runtime.parallel = DataParallel(launch.rank, launch.world, runtime.device, runtime.model)


def fit_memory(
    runtime: Runtime, budget: int | None, split_further: bool, shard: bool = False
) -> MemoryPlan | None:
    """Fit the run's step in `budget` bytes of device memory (`distrai.train.memory`; None: nothing
    is planned). A miner may split its batch further (`split_further`), and a miner on several ranks
    shards the model over them when nothing else fits, or when asked (`shard`); a validator replays
    the miner's split and may only keep the window's base in host memory and recompute activations.
    Raises `DoesNotFit` naming what the step would need."""
    if shard and runtime.parallel is None:
        raise ValueError(
            "sharding the model needs several ranks: start the miner under torchrun --nproc-per-node N"
        )
    step = runtime.inner.step
    plan = None
    if budget is not None:
        plan = plan_memory(
            ModelShape.of(runtime.model, step.autocast),
            runtime.config.train.batch_size // step.ranks,
            runtime.config.data.seq_len,
            step.micro_batches,
            budget,
            split_further,
            step.ranks,
            shard,
        )
        runtime.inner = dataclasses.replace(
            runtime.inner,
            step=dataclasses.replace(step, micro_batches=plan.micro_batches),
            base_on_host=plan.base_on_host,
        )
        set_checkpointing(runtime.model, plan.checkpointing)
    if shard or (plan is not None and plan.sharded):
        _shard_ranks(runtime)
    return plan


def _shard_ranks(runtime: Runtime) -> None:
    """Make the miner's ranks (`runtime.parallel`) shard the model, its gradients, AdamW's state and
    the window's base (FSDP2, `parallel.FullyShardedParallel`); the manifest records it."""
    if runtime.config.train.compile:
        raise ValueError(
            "train.compile with a sharded model is not supported (not measured to replay bit for bit)"
        )
    ranks = runtime.parallel
    assert ranks is not None, "only a miner on several ranks shards (fit_memory checks)"
    parallel = FullyShardedParallel(ranks.rank, ranks.world, runtime.device, runtime.model)
    parallel.shard()
    runtime.parallel = parallel
    runtime.inner = dataclasses.replace(
        runtime.inner, step=dataclasses.replace(runtime.inner.step, sharded=True)
    )


def build_data(
    config: RunConfig, spec: ModelSpec, access: DataAccess | None
) -> tuple[TrainingData, PreTrainedTokenizerBase]:
    """The run's training data and tokenizer: prepared shards through `access`, or the built-in
    corpus. A run whose tokenizer is not 'data' must name the tokenizer that prepared its shards."""
    d = config.data
    if d.source == "builtin":
        tokenizer = load_tokenizer(spec, config.tokenizer)
        return build_token_data(
            DataSpec(seq_len=d.seq_len, heldout_fraction=d.heldout_fraction), tokenizer
        ), tokenizer
    if d.manifest is None:
        raise ValueError(
            "the run config names no prepared data (data.manifest): it is a template until the owner prepares "
            "the data with `distrai data prepare` and sets the hash it prints (docs/data.md)"
        )
    if access is None:
        raise ValueError("the run trains from prepared data: this node needs a data store and a cache folder")
    data, data_tokenizer = open_prepared(access, d.manifest, d.seq_len)
    if config.tokenizer == "data":
        if len(data_tokenizer) != d.vocab_size:
            raise ValueError(
                f"the run config's data.vocab_size is {d.vocab_size}, but its data was prepared by "
                f"{data.manifest.tokenizer.name} with {len(data_tokenizer)} tokens"
            )
        return data, data_tokenizer
    tokenizer = load_tokenizer(spec, config.tokenizer)
    if tokenizer_sha256(tokenizer) != data.manifest.tokenizer.sha256:
        raise ValueError(
            f"the run's tokenizer ({config.tokenizer}) is not the one that prepared its data "
            f"({data.manifest.tokenizer.name}): prepare the data with it, or set tokenizer = 'data'"
        )
    return data, tokenizer


def build_runtime(config: RunConfig, device: str = "cpu", data_access: DataAccess | None = None) -> Runtime:
    """Everything a node builds from the run config; `data_access` says where prepared data is read
    from and cached (not needed for the built-in corpus)."""
    spec = model_spec(config.model)
    data, tokenizer = build_data(config, spec, data_access)
    model = load_model(spec, tokenizer=tokenizer, device=device)
    if config.train.compile:
        model.compile()  # in place: the module, its parameters and their names stay as they are
    loss_fn: LossFn = causal_lm_loss if spec.kernels == "aten" else one_hot_causal_lm_loss
    if config.task.kind == "distill":
        assert config.task.teacher is not None, "the run config's task names a teacher for distill"
        teacher = load_teacher(model_spec(config.task.teacher), tokenizer=tokenizer, device=device)
        loss_fn = DistillationLoss(
            teacher, DistillConfig(config.task.alpha, config.task.temperature, config.task.top_k)
        )
    run = run_id(config)
    return Runtime(
        config=config,
        run_id=run,
        tokenizer=tokenizer,
        data=data,
        model=model,
        loss_fn=loss_fn,
        inner=inner_config(config, run),
        codec=get_codec(config.codec.name, **dict(config.codec.options)),
        device=torch.device(device),
    )
