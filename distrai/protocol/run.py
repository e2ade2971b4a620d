"""The run config: every knob the subnet owner sets, in one TOML file, read once at the edge.

The content hash of the validated config (defaults filled in, canonical JSON) is the run id. The
owner publishes `run_commitment(config)` as the chain commitment of the subnet owner's hotkey; every
miner and validator checks its own config against it with `check_run_matches` and refuses to start,
saying why, when they differ. Two files that differ only in comments, key order or spelled-out
defaults are the same run; any knob changed is another.

Shipped examples live in `distrai/configs/` (`shipped_config_path`).
"""

from __future__ import annotations

import hashlib
import json
import math
import re
import tomllib
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    ValidationError,
    ValidationInfo,
    field_validator,
    model_validator,
)

from distrai.codec import CODECS, get_codec
from distrai.protocol.windows import ChallengeInputs, WindowConfig, on_probation
from distrai.train.pieces import PIECE_ELEMENTS

RUN_COMMITMENT_PREFIX = "distrai-run:"
MAX_COMMITMENT_BYTES = 128
SHIPPED_CONFIGS = ("cpu-localnet", "gpu-subnet")
_CONFIG_DIR = Path(__file__).parents[1] / "configs"
_OPTION_NAME = re.compile(r"[a-z][a-z0-9_]*")
_RUN_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*")
_MIB = 1 << 20


class RunConfigError(ValueError):
    """A run config that cannot be read or is invalid; each line names the file, the field and the problem."""


class RunMismatch(ValueError):
    """This node's run config is not the one the subnet owner published."""


def _list_to_tuple(value: Any) -> Any:
    """TOML arrays arrive as lists; the frozen config keeps them as tuples."""
    return tuple(value) if isinstance(value, list) else value


_AS_TUPLE = BeforeValidator(_list_to_tuple)


class _Section(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, strict=True, allow_inf_nan=False)


ModelPreset = Literal["micro", "tiny", "small", "150m", "1b"]


class ModelSource(_Section):
    """A causal LM: a size preset built from `init_seed` (so every node starts from the same weights),
    or `path_or_id` (a local folder or a hub id) pinned at `revision`."""

    preset: ModelPreset | None = None
    path_or_id: str | None = Field(default=None, min_length=1)
    revision: str | None = Field(
        default=None,
        min_length=1,
        description="hub commit hash or tag; for a local folder, the label of the version every node holds",
    )
    dtype: Literal["float32", "bfloat16"] = Field(
        default="float32", description="the parameters' dtype (float32: master weights under bf16 autocast)"
    )
    attention: Literal["eager", "sdpa"] = Field(
        default="eager",
        description="attention kernel: sdpa (fused, flash on GPUs) or eager (matmul and softmax); replays follow it",
    )
    init_seed: int = Field(default=0, ge=0, description="seed of a preset model's initial weights")
    kernels: Literal["aten", "atomic_free"] = Field(
        default="aten",
        description="aten: PyTorch's embedding and a gathered loss; atomic_free: an embedding and a loss whose "
        "backward writes without atomics or scatter, so a compiled step stays whole under deterministic "
        "algorithms (distrai/train/kernels.py); replays follow it",
    )
    pad_vocab_to: int = Field(
        default=1,
        ge=1,
        description="a preset's embedding and output layer get a multiple of this many rows (64 aligns the "
        "output layer's matmul); the extra rows are ids no tokenizer produces, cut off before the loss",
    )

    @model_validator(mode="after")
    def _one_source(self) -> ModelSource:
        if (self.preset is None) == (self.path_or_id is None):
            raise ValueError("set exactly one of preset or path_or_id")
        if self.path_or_id is not None and self.revision is None:
            raise ValueError(
                f"path_or_id {self.path_or_id!r} needs a revision, so every node loads the same weights"
            )
        if self.preset is not None and self.revision is not None:
            raise ValueError("revision applies only to path_or_id, not to a preset")
        if self.path_or_id is not None and self.init_seed != 0:
            raise ValueError("init_seed applies only to a preset, not to path_or_id")
        if self.path_or_id is not None and self.pad_vocab_to != 1:
            raise ValueError("pad_vocab_to applies only to a preset: a path_or_id model brings its own shape")
        return self


def _data_source(value: Any) -> Any:
    if value in ("files", "hub"):
        raise ValueError(
            f"a run does not read {value!r} text itself: turn it into token shards with `distrai data prepare` "
            "and name them with source 'prepared' and manifest (docs/data.md)"
        )
    return value


class DataConfig(_Section):
    """Training tokens: `prepared` token shards (made by `distrai data prepare`, named by the hash of
    their manifest), or `builtin`, the offline corpus shipped with the package, tokenized in memory
    at start-up (for tests). A prepared run config without a manifest is a template: it loads (for
    planning and link checks), but no node starts on it until the owner names the data."""

    source: Annotated[Literal["builtin", "prepared"], BeforeValidator(_data_source)] = "builtin"
    manifest: str | None = Field(
        default=None, pattern=r"^[0-9a-f]{64}$", description="sha256 of the prepared data's manifest"
    )
    store: str | None = Field(
        default=None,
        min_length=1,
        description="where the owner publishes the prepared data (file:// or s3://); a node may read a mirror "
        "instead (--data.store); None: the node's own store",
    )
    endpoint: str | None = Field(default=None, min_length=1, description="S3 endpoint URL of `store`")
    vocab_size: int | None = Field(
        default=None,
        ge=2,
        description="with tokenizer 'data': the size of the vocabulary that prepared the data (checked "
        "against its manifest), so the model's shape is known before any data is fetched",
    )
    seq_len: int = Field(ge=2, description="tokens per training sequence")
    heldout_fraction: float = Field(
        default=0.01,
        gt=0.0,
        le=0.5,
        description="builtin: share of documents held out, never trained on (prepared data fixed its own)",
    )

    @model_validator(mode="after")
    def _source_fields(self) -> DataConfig:
        prepared_fields = [n for n in ("manifest", "store", "endpoint") if getattr(self, n) is not None]
        if self.source == "builtin" and prepared_fields:
            raise ValueError(f"{', '.join(prepared_fields)} applies only to source 'prepared'")
        if self.endpoint is not None and self.store is None:
            raise ValueError("endpoint applies only with store")
        return self


class TaskConfig(_Section):
    """`pretrain` (cross-entropy) or `distill` from a frozen `teacher`: loss = alpha·KL(teacher ‖ student)
    at `temperature` over the teacher's `top_k` logits + (1 − alpha)·cross-entropy."""

    kind: Literal["pretrain", "distill"] = "pretrain"
    teacher: ModelSource | None = None
    alpha: float = Field(default=0.5, ge=0.0, le=1.0, description="weight of the distillation term")
    temperature: float = Field(default=2.0, gt=0.0)
    top_k: int = Field(default=32, ge=1, description="teacher logits kept per position")

    @model_validator(mode="after")
    def _teacher_iff_distill(self) -> TaskConfig:
        if self.kind == "distill" and self.teacher is None:
            raise ValueError("kind 'distill' needs a teacher")
        if self.kind == "pretrain":
            if self.teacher is not None:
                raise ValueError("teacher applies only to kind 'distill'")
            changed = [
                n
                for n in ("alpha", "temperature", "top_k")
                if getattr(self, n) != type(self).model_fields[n].default
            ]
            if changed:
                raise ValueError(f"{', '.join(changed)} applies only to kind 'distill'")
        return self


class TrainConfig(_Section):
    """The inner loop: up to H AdamW steps per window, checkable in segments of k steps."""

    inner_steps: int = Field(
        ge=1,
        description="H: the most inner steps a window trains; a miner trains whole segments until its commit deadline",
    )
    segment_steps: int = Field(ge=1, description="k: inner steps per segment; must divide inner_steps")
    batch_size: int = Field(ge=1, description="sequences per inner step")
    micro_batches: int = Field(
        default=1,
        ge=1,
        description="default split of a step; a miner may choose another divisor of batch_size and record it",
    )
    lr: float = Field(default=3e-4, gt=0.0, description="inner AdamW learning rate")
    weight_decay: float = Field(default=0.1, ge=0.0)
    betas: Annotated[tuple[float, float], _AS_TUPLE] = (0.9, 0.95)
    eps: float = Field(default=1e-8, gt=0.0)
    max_grad_norm: float = Field(default=1.0, gt=0.0, description="gradient clipping norm per inner step")
    warmup_steps: int = Field(
        default=0, ge=0, description="linear warm-up of the inner learning rate, in inner steps"
    )
    autocast: Literal["bfloat16"] | None = Field(
        default=None,
        description="run each step's forward in bfloat16 over the model's dtype (float32 master weights); None: off",
    )
    adamw: Literal["single", "foreach", "fused"] = Field(
        default="single", description="AdamW implementation; every node uses the run's, replays follow it"
    )
    compile: bool = Field(
        default=False,
        description="run the model under torch.compile (inductor): other bits than eager, so replays follow it",
    )
    cpu_threads: int = Field(
        default=1,
        ge=1,
        description="intra-op CPU threads of each step; results depend on it, so replays follow it",
    )
    base_anchor: float = Field(
        default=0.01,
        ge=0.0,
        description="after each inner step, pull the parameters toward the window's base by lr times this;"
        " replaying any segment then checks the base (0 turns it off)",
    )
    boundary_moments: Literal["float32", "bfloat16"] = Field(
        default="float32",
        description="what a segment boundary keeps of AdamW's moments: 'bfloat16' rounds them there and trains"
        " on from the rounded values (miner, every rank and replay alike), so a revealed state codes them in"
        " about half the bytes",
    )

    @field_validator("segment_steps")
    @classmethod
    def _divides_inner_steps(cls, value: int, info: ValidationInfo) -> int:
        steps = info.data.get("inner_steps")
        if steps is not None and steps % value:
            raise ValueError(f"{value} must divide inner_steps ({steps})")
        return value

    @field_validator("micro_batches")
    @classmethod
    def _divides_batch(cls, value: int, info: ValidationInfo) -> int:
        batch = info.data.get("batch_size")
        if batch is not None and batch % value:
            raise ValueError(f"{value} must divide batch_size ({batch})")
        return value

    @field_validator("betas")
    @classmethod
    def _betas_in_range(cls, value: tuple[float, float]) -> tuple[float, float]:
        if not all(0.0 <= b < 1.0 for b in value):
            raise ValueError(f"{list(value)} must both be in [0, 1)")
        return value

    @property
    def n_segments(self) -> int:
        """Segments per window: H / k."""
        return self.inner_steps // self.segment_steps


class OuterConfig(_Section):
    """The outer step (DiLoCo): Nesterov SGD over the weighted mean of the accepted pseudo-gradients."""

    lr: float = Field(default=0.7, gt=0.0)
    momentum: float = Field(default=0.9, ge=0.0, lt=1.0)
    nesterov: bool = True
    clip_to_median_norm: bool = Field(
        default=True,
        description="scale each accepted pseudo-gradient down to the median norm (weighted by the "
        "updates' weights) before averaging",
    )


def _codec_options(value: Any) -> Any:
    if not isinstance(value, Mapping):
        raise ValueError(f"must be a table of option = number, got {value!r}")
    for key, option in value.items():
        if not isinstance(key, str) or not _OPTION_NAME.fullmatch(key):
            raise ValueError(f"option name {key!r} must be lower_snake_case")
        if isinstance(option, bool) or not isinstance(option, int | float) or not math.isfinite(option):
            raise ValueError(f"option {key!r} must be a finite number, got {option!r}")
    return dict(value)


class CodecConfig(_Section):
    """The pseudo-gradient codec and its options (the codec validates their names and ranges). The
    names are those of `distrai.codec.CODECS`: a new codec is one module and one entry there."""

    name: str = "none"
    options: Annotated[dict[str, int | float], BeforeValidator(_codec_options)] = Field(default_factory=dict)

    @field_validator("name")
    @classmethod
    def _known(cls, name: str) -> str:
        if name not in CODECS:
            raise ValueError(f"unknown codec {name!r}; known: {', '.join(CODECS)}")
        return name

    @model_validator(mode="after")
    def _none_has_no_options(self) -> CodecConfig:
        if self.name == "none" and self.options:
            raise ValueError("codec 'none' takes no options")
        chunk = getattr(get_codec(self.name, **self.options), "chunk", 1)
        if PIECE_ELEMENTS % chunk:
            raise ValueError(
                f"options.chunk ({chunk}) must divide {PIECE_ELEMENTS}, the hashed piece a challenged miner "
                "reveals for the trajectory check: a power of two"
            )
        return self


class ClassTolerance(BaseModel):
    """One row of the run config's tolerance table: replays between two device models (the rest of
    the replay class equal) may differ by `replay` at the end and by `loss` in every step's loss."""

    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)

    devices: tuple[str, str] = Field(description="two device models, as `device_name` names them")
    replay: float = Field(gt=0.0, description="relative end distance a replay may differ by")
    loss: float = Field(gt=0.0, description="relative difference a replayed step's loss may have")
    measured: str = Field(min_length=1, description="where the numbers come from")

    @field_validator("devices", mode="before")
    @classmethod
    def _pair(cls, value: object) -> object:
        return tuple(value) if isinstance(value, list) else value


class VerificationConfig(_Section):
    """What is replayed in each window: the challenged miners, the segments per challenged miner,
    and how many validators share each replay; how long the evidence stays, and how replays compare."""

    challenge_miners: int | float = Field(
        default=0.25,
        description="the miners replayed in each window, by somebody: a count (int) or a fraction (float in (0, 1])",
    )
    challenge_segments: int = Field(
        default=1, ge=1, description="consecutive segments in each run replayed of a challenged miner"
    )
    reference_segments: int | None = Field(
        default=None,
        ge=1,
        description="the claim (segments a manifest commits to) up to which a miner is challenged with the "
        "floor probability q alone; each claimed segment beyond adds q / reference_segments runs to replay in "
        "expectation, so a claim's chance of a replay grows with it (None: no runs beyond the floor's)",
    )
    probation_windows: int = Field(
        default=0,
        ge=0,
        description="a new hotkey is challenged in each of the first this many windows whose roster holds it",
    )
    replicas: int = Field(
        default=1,
        ge=1,
        description="validators that replay each challenged miner; the validators taking part share the "
        "replays, so each replays about replicas x challenged miners / validators",
    )
    retention_windows: int = Field(
        default=3,
        ge=3,
        description="windows a miner keeps its revealed states in its store after revealing them, so any "
        "validator can re-check a finding (the re-check runs up to the next window's aggregate deadline, "
        "which pipelined windows place two windows on)",
    )
    replay_tolerance: float = Field(
        default=0.0, ge=0.0, description="relative distance a replay may differ by; 0.0 (bit-exact) on CPU"
    )
    loss_tolerance: float = Field(
        default=0.0,
        ge=0.0,
        description="relative difference a replayed step's loss may have from the committed one, when "
        "replay_tolerance > 0 (a bit-exact replay must reproduce every loss exactly)",
    )
    tolerances: list[ClassTolerance] = Field(
        default_factory=list,
        description="per pair of device models: the tolerances of a replay between them (the rest of the "
        "replay class equal); same class: bit-exact; any other pair: replay_tolerance and loss_tolerance",
    )
    replay_rechecks: float = Field(
        default=1.0,
        ge=0.0,
        description="receipts of the other validators' replays of the window before that each validator "
        "replays again per window, in expectation (the whole part always, the fraction with its probability, "
        "drawn by the window's seed), drawn from all of them; one it cannot reproduce is refuted, and that "
        "validator is not paid as a worker there for ban_windows windows (validators/receipts.py)",
    )
    trajectory_fraction: float = Field(
        default=0.125,
        gt=0.0,
        le=1.0,
        description="share of the last state's parameter pieces a challenged miner reveals, with the same "
        "pieces of its residual, for the check that its update encodes its trajectory",
    )

    @model_validator(mode="after")
    def _default_at_least_every_row(self) -> VerificationConfig:
        for row in self.tolerances:
            if row.replay > self.replay_tolerance or row.loss > self.loss_tolerance:
                raise ValueError(
                    f"the row for {list(row.devices)} allows {row.replay} / {row.loss}, more than the default "
                    f"replay_tolerance / loss_tolerance ({self.replay_tolerance} / {self.loss_tolerance}): a pair "
                    "of devices no row names would be held to a tighter bound than a listed one"
                )
        return self

    @field_validator("challenge_miners", mode="before")
    @classmethod
    def _count_or_fraction(cls, value: Any) -> int | float:
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise ValueError(f"must be a count (integer) or a fraction (float), got {value!r}")
        if isinstance(value, int) and value < 1:
            raise ValueError(f"a count must be at least 1, got {value}")
        if isinstance(value, float) and not 0.0 < value <= 1.0:
            raise ValueError(f"a fraction must be in (0, 1], got {value}")
        return value


class ScoringConfig(_Section):
    """From window scores to weights on chain, and to the aggregate.

    A miner's window score is the tokens its manifest commits to having trained, for an update that
    passes every check, up to the tokens its measured gain vouches for (`validators/scoring.py`); it
    enters the moving average `maturity_windows` windows later unless a catch forfeits it first
    (`validators/pay.py`). Being present, well formed and verified are gates, not points: they earn
    nothing by themselves."""

    ema_alpha: float = Field(
        default=0.1, gt=0.0, le=1.0, description="moving-average rate: new = alpha·window + (1 − alpha)·old"
    )
    burn_share: float = Field(
        default=0.0, ge=0.0, lt=1.0, description="fraction of the weight given to the owner's uid"
    )
    aggregate_top_n: int = Field(
        default=8, ge=1, description="most accepted updates the aggregate takes, best first"
    )
    ban_windows: int = Field(
        default=10, ge=0, description="windows a miner caught in verified fraud is barred"
    )
    maturity_windows: int = Field(
        default=0,
        ge=0,
        description="a window's score enters the moving average (and so the weights) this many windows after "
        "the window; a catch before then forfeits every score not yet matured",
    )
    duplicate_cosine: float = Field(
        default=0.95,
        gt=0.0,
        le=1.0,
        description="updates whose sketches are at least this cosine-similar are one piece of work: one share",
    )
    gain_floor: float = Field(
        default=0.25,
        ge=0.0,
        lt=1.0,
        description="a passing update is paid its claimed tokens only if its gain on the window's reserve is at "
        "least this fraction of what the window's median update delivers for work of that size; below it, the "
        "smaller claim its gain vouches for (validators/scoring.py, vouched_tokens); 0 pays every claim",
    )
    gain_exponent: float = Field(
        default=0.3,
        gt=0.0,
        le=1.0,
        description="how a window's gain grows with the tokens trained (gain ~ tokens ** gain_exponent), the "
        "size correction of the gain floor",
    )
    usefulness_sequences: int = Field(
        default=16,
        ge=2,
        description="sequences each of a miner's trained data and of the window's reserve that a validator "
        "evaluates per update, drawn by the window's challenge seed",
    )
    score_replicas: int = Field(
        default=1,
        ge=1,
        description="validators that measure each update; the validators taking part share the measurements, "
        "so each measures about score_replicas x miners / validators updates (validators/shared_scoring.py)",
    )
    score_rechecks: int = Field(
        default=1,
        ge=0,
        description="measurements of each other validator's share that each validator measures again per "
        "window; one it cannot reproduce is refuted, and that validator's measurements are not taken, nor is "
        "it paid as a worker, there for ban_windows windows (validators/shared_scoring.py)",
    )
    validator_share: float = Field(
        default=0.0,
        ge=0.0,
        lt=1.0,
        description="share of each validator's weight that pays the validators that published the measurements "
        "of their whole share in time (a validator that copies others' scores gets none of it)",
    )


class FollowConfig(_Section):
    """What a follower checks of an aggregate beyond the aggregator's own report: the re-measurement on
    the run's held-out split (docs/protocol.md, "Following an aggregate")."""

    heldout_sequences: int = Field(
        default=16,
        ge=1,
        description="held-out sequences a follower draws per window, from the hash of the block at the "
        "window's aggregate deadline, to measure an aggregate's result against its base",
    )
    heldout_tolerance: float = Field(
        default=0.01,
        ge=0.0,
        description="an aggregate whose result raises the loss on that sample by more than this share of "
        "the base's loss is refused (0.01: by more than 1%)",
    )


class LimitsConfig(_Section):
    """Largest documents and blobs a node downloads, in bytes."""

    max_manifest_bytes: int = Field(default=1 * _MIB, ge=1024)
    max_report_bytes: int = Field(
        default=16 * _MIB, ge=1024, description="a validator's signed report of a window (every miner's line)"
    )
    max_update_bytes: int = Field(default=512 * _MIB, ge=1024)
    max_checkpoint_bytes: int = Field(default=16 * 1024 * _MIB, ge=1024)


class RunConfig(_Section):
    """One training run of the subnet: everything miners and validators must agree on."""

    name: str = Field(min_length=1, max_length=64)
    netuid: int = Field(ge=0, le=65535)
    tokenizer: Literal["byte", "model", "data"] = Field(
        default="byte",
        description="the offline byte-level tokenizer, the model's own (needs path_or_id), or the one that "
        "made the prepared data (named in its manifest)",
    )
    model: ModelSource
    data: DataConfig
    task: TaskConfig = Field(default_factory=TaskConfig)
    train: TrainConfig
    outer: OuterConfig = Field(default_factory=OuterConfig)
    codec: CodecConfig = Field(default_factory=CodecConfig)
    windows: WindowConfig
    verification: VerificationConfig = Field(default_factory=VerificationConfig)
    scoring: ScoringConfig = Field(default_factory=ScoringConfig)
    follow: FollowConfig = Field(default_factory=FollowConfig)
    limits: LimitsConfig = Field(default_factory=LimitsConfig)

    @field_validator("name")
    @classmethod
    def _plain_name(cls, value: str) -> str:
        if not _RUN_NAME.fullmatch(value):
            raise ValueError(
                f"{value!r} may hold only letters, digits, '.', '_' and '-', starting with a letter or digit"
            )
        return value

    @model_validator(mode="after")
    def _sections_agree(self) -> RunConfig:
        if self.tokenizer == "data" and self.data.source != "prepared":
            raise ValueError(
                "tokenizer 'data' needs data.source 'prepared': built-in text has no tokenizer of its own"
            )
        if (self.tokenizer == "data") != (self.data.vocab_size is not None):
            raise ValueError(
                "data.vocab_size goes with tokenizer 'data' (and only with it): the size of the vocabulary that "
                "prepared the data"
            )
        if self.tokenizer == "data" and self.model.preset is None:
            raise ValueError(
                "tokenizer 'data' sizes a preset model to the data's tokenizer; a path_or_id model brings its "
                "own: use tokenizer 'model' (its tokenizer must be the one that prepared the data)"
            )
        if self.tokenizer == "model" and self.model.path_or_id is None:
            raise ValueError(
                "tokenizer 'model' needs model.path_or_id: a preset model has no tokenizer of its own"
            )
        if self.model.kernels == "atomic_free" and self.task.kind == "distill":
            raise ValueError(
                "model.kernels 'atomic_free' has the pre-training loss only: the distillation loss gathers the "
                "teacher's top logits, whose backward scatters"
            )
        teacher = self.task.teacher
        if teacher is not None and (teacher.preset is not None) != (self.tokenizer in ("byte", "data")):
            raise ValueError(
                "task.teacher must share the student's tokenizer: a preset teacher with tokenizer 'byte' or "
                "'data', a path_or_id teacher with tokenizer 'model'"
            )
        if self.verification.replay_tolerance > 0 and self.verification.loss_tolerance == 0:
            raise ValueError(
                "verification.loss_tolerance must be above 0 when replay_tolerance is: a replay that is not "
                "bit-exact does not reproduce every loss exactly"
            )
        if self.scoring.burn_share + self.scoring.validator_share >= 1.0:
            raise ValueError(
                "scoring.burn_share + scoring.validator_share must leave the miners a share: their sum is "
                f"{self.scoring.burn_share + self.scoring.validator_share}"
            )
        segments = self.train.n_segments
        if self.verification.challenge_segments > segments:
            raise ValueError(
                f"verification.challenge_segments ({self.verification.challenge_segments}) is more than the "
                f"{segments} segments of a window (train.inner_steps / train.segment_steps)"
            )
        return self


def _describe(error: Mapping[str, Any]) -> str:
    """One pydantic error as `field.path: problem`."""
    path = ".".join(str(part) for part in error["loc"])
    if error["type"] in ("value_error", "assertion_error"):
        problem = str(error["ctx"]["error"])
    elif error["type"] == "missing":
        problem = "is required"
    elif error["type"] == "extra_forbidden":
        problem = "is not a setting of the run config"
    else:
        problem = error["msg"]
        if not isinstance(error["input"], Mapping | list | tuple):
            problem += f" (got {error['input']!r})"
    return f"{path}: {problem}" if path else problem


def parse_run_config(data: Mapping[str, Any], source: str = "<run config>") -> RunConfig:
    """Validate a parsed document; `RunConfigError` with one `source: field: problem` line per error."""
    try:
        return RunConfig.model_validate(data)
    except ValidationError as exc:
        raise RunConfigError("\n".join(f"{source}: {_describe(e)}" for e in exc.errors())) from None


def load_run_config(path: str | Path) -> RunConfig:
    """Read and validate a run config TOML file."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise RunConfigError(f"{path}: cannot read the run config: {exc.strerror or exc}") from None
    except UnicodeDecodeError as exc:
        raise RunConfigError(f"{path}: not UTF-8 text (bad byte at offset {exc.start})") from None
    try:
        document = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise RunConfigError(f"{path}: not valid TOML: {exc}") from None
    return parse_run_config(document, str(path))


def shipped_config_path(name: str) -> Path:
    """Path of a run config shipped with the package (one of `SHIPPED_CONFIGS`)."""
    if name not in SHIPPED_CONFIGS:
        raise ValueError(f"no shipped run config {name!r}; shipped: {', '.join(SHIPPED_CONFIGS)}")
    return _CONFIG_DIR / f"{name}.toml"


def canonical_config_json(config: RunConfig) -> bytes:
    """The config with every default filled in, as JSON with sorted keys and no spaces; floats are
    written as their shortest round-tripping decimal, so every machine writes the same bytes."""
    document = config.model_dump(mode="json")
    return json.dumps(
        document, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False
    ).encode()


def run_id(config: RunConfig) -> str:
    """The run id: sha256 (hex) of the canonical JSON of the config."""
    return hashlib.sha256(canonical_config_json(config)).hexdigest()


class RunCommitment(BaseModel):
    """The subnet owner's chain commitment, `distrai-run:<run id>` on chain (`encode`; read by
    `parse_run_commitment`). The other commitments are nodes' announcements (`distrai.protocol.announce`)."""

    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)

    run_id: Annotated[str, Field(pattern=r"^[0-9a-f]{64}$")]

    def encode(self) -> str:
        return RUN_COMMITMENT_PREFIX + self.run_id


def run_commitment(config: RunConfig) -> str:
    """What the subnet owner publishes as its chain commitment: `distrai-run:<run id>`."""
    return RunCommitment(run_id=run_id(config)).encode()


def parse_run_commitment(commitment_data: str) -> str:
    """The run id in an owner's commitment (surrounding whitespace aside); `RunMismatch`, saying what
    is wrong, if it is not a run commitment."""
    data = commitment_data.strip()
    refused = f"the subnet owner's commitment {data[:80]!r} is not a run commitment"
    if not data.startswith(RUN_COMMITMENT_PREFIX):
        raise RunMismatch(f"{refused}: it does not start with '{RUN_COMMITMENT_PREFIX}'")
    try:
        return RunCommitment(run_id=data.removeprefix(RUN_COMMITMENT_PREFIX)).run_id
    except ValidationError:
        raise RunMismatch(
            f"{refused}: what follows '{RUN_COMMITMENT_PREFIX}' is not a run id (64 lowercase hex digits)"
        ) from None


def check_run_matches(config: RunConfig, commitment_data: str | None) -> None:
    """Raise `RunMismatch`, saying why, unless the owner's commitment names this config's run id."""
    mine = run_id(config)
    if commitment_data is None or not commitment_data.strip():
        raise RunMismatch(
            f"the subnet owner has published no run commitment, so run {mine} cannot be confirmed; "
            f"the owner publishes it with its hotkey as '{RUN_COMMITMENT_PREFIX}<run id>'"
        )
    published = parse_run_commitment(commitment_data)
    if published != mine:
        raise RunMismatch(
            f"this node's run config has run id {mine}, but the subnet owner published run id {published}: "
            "use the owner's run config file"
        )


def challenge_inputs(
    config: RunConfig,
    block_hash: str,
    window: int,
    miner_hotkeys: Iterable[str],
    claims: Mapping[str, int] | None = None,
    registered_at: Mapping[str, int] | None = None,
) -> ChallengeInputs:
    """The challenge inputs of `window` under this run, from the hash of the block at its commit deadline
    and the miners whose commitment counts for it: the segments each commitment claims
    (`Announcement.segments`) and the block each miner registered at (for its probation), where known."""
    miners = tuple(sorted(set(miner_hotkeys)))
    claims, registered_at = claims or {}, registered_at or {}
    verification = config.verification
    return ChallengeInputs(
        block_hash=block_hash,
        run_id=run_id(config),
        window=window,
        miner_hotkeys=miners,
        miners_challenged=verification.challenge_miners,
        segments_per_miner=verification.challenge_segments,
        replicas=verification.replicas,
        claims=tuple((m, claims[m]) for m in miners if m in claims),
        reference_segments=verification.reference_segments,
        probation=tuple(
            m
            for m in miners
            if m in registered_at
            and on_probation(config.windows, window, registered_at[m], verification.probation_windows)
        ),
    )
