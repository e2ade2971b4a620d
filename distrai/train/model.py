"""Models: Llama-family causal LMs from size presets, or any causal LM through `from_pretrained`.

Why Llama: it is the architecture of most small open models (SmolLM, TinyLlama, Llama 3.2), so
a hub checkpoint and a preset take one code path; it has rotary positions (no learned position
table tied to a length), no biases, and no dropout in its default config, so a training step
draws no random numbers and replays exactly. GPT-2 style models default to dropout in the
embeddings, attention and residual paths, and learn absolute positions up to a fixed length.

Attention is the spec's: "eager" (matmul and softmax, the default) or "sdpa" (torch's fused
kernels, flash attention on GPUs, 3.2x the tokens/s of eager on an H100 at 150M); see
`determinism.py` for when each replays bit for bit. Every dropout probability in a loaded config is set to zero, so a step is a pure
function of its inputs. Remote code is never trusted (`trust_remote_code` stays False).

The spec's `kernels` puts an input embedding whose backward is a matmul in the model ("atomic_free",
`kernels.py`), and a preset's `pad_vocab_to` rounds its embedding and output layer up to a multiple
of rows, the output layer cutting its logits back to the tokenizer's size.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from pathlib import Path
from typing import cast

import torch
from transformers import (
    AutoConfig,
    AutoModelForCausalLM,
    AutoTokenizer,
    LlamaConfig,
    LlamaForCausalLM,
    PretrainedConfig,
    PreTrainedModel,
    PreTrainedTokenizerBase,
)

from distrai.data.byte_tokenizer import byte_tokenizer
from distrai.train.kernels import KERNELS, PaddedHead, padded_vocab, use_kernels

ATTENTIONS = ("eager", "sdpa")
DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}
TOKENIZER_KINDS = ("auto", "byte", "model")
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "tokenizer.model", "vocab.json")


@dataclass(frozen=True)
class Preset:
    """A Llama shape (parameter counts in `PRESETS` are with the 260-token byte vocabulary)."""

    hidden_size: int
    num_layers: int
    num_heads: int
    intermediate_size: int
    max_positions: int


PRESETS: dict[str, Preset] = {  # micro 0.27M, tiny 0.99M, small 14.4M, 150m 155M, 1b 1.03B parameters
    "micro": Preset(hidden_size=96, num_layers=2, num_heads=4, intermediate_size=256, max_positions=512),
    "tiny": Preset(hidden_size=192, num_layers=2, num_heads=4, intermediate_size=512, max_positions=512),
    "small": Preset(hidden_size=384, num_layers=8, num_heads=6, intermediate_size=1024, max_positions=1024),
    "150m": Preset(hidden_size=1024, num_layers=12, num_heads=16, intermediate_size=2816, max_positions=2048),
    "1b": Preset(hidden_size=2048, num_layers=20, num_heads=16, intermediate_size=5632, max_positions=2048),
}


@dataclass(frozen=True)
class ModelSpec:
    """Which model: a preset (initialized from `init_seed`) or `path_or_id` (a local folder or a hub id
    at `revision`), held in `dtype`."""

    preset: str | None = None
    path_or_id: str | None = None
    revision: str | None = None
    dtype: str = "float32"
    attention: str = "eager"
    init_seed: int = 0
    kernels: str = "aten"
    pad_vocab_to: int = 1
    """a preset's embedding and output layer get a multiple of this many rows (1: the tokenizer's)"""

    def __post_init__(self) -> None:
        if (self.preset is None) == (self.path_or_id is None):
            raise ValueError("ModelSpec needs exactly one of preset and path_or_id")
        if self.preset is not None and self.preset not in PRESETS:
            raise ValueError(f"unknown model preset {self.preset!r}; choose one of {sorted(PRESETS)}")
        if self.preset is not None and self.revision is not None:
            raise ValueError("ModelSpec.revision applies to path_or_id only, not to a preset")
        if self.preset is None and self.init_seed != 0:
            raise ValueError("ModelSpec.init_seed applies to a preset only, not to path_or_id")
        if self.dtype not in DTYPES:
            raise ValueError(f"unknown dtype {self.dtype!r}; choose one of {sorted(DTYPES)}")
        if self.attention not in ATTENTIONS:
            raise ValueError(f"unknown attention {self.attention!r}; choose one of {ATTENTIONS}")
        if self.kernels not in KERNELS:
            raise ValueError(f"unknown kernels {self.kernels!r}; choose one of {KERNELS}")
        if self.pad_vocab_to < 1 or (self.preset is None and self.pad_vocab_to != 1):
            raise ValueError(
                f"pad_vocab_to must be at least 1, and 1 for a path_or_id model, got {self.pad_vocab_to}"
            )

    @property
    def torch_dtype(self) -> torch.dtype:
        return DTYPES[self.dtype]


def preset_config(
    name: str, tokenizer: PreTrainedTokenizerBase, attention: str = "eager", pad_vocab_to: int = 1
) -> LlamaConfig:
    """The Llama config of preset `name`, sized to `tokenizer` (its rows rounded up to a multiple of
    `pad_vocab_to`), with `attention`'s kernel."""
    if name not in PRESETS:
        raise ValueError(f"unknown model preset {name!r}; choose one of {sorted(PRESETS)}")
    preset = PRESETS[name]
    # PretrainedConfig takes attn_implementation through **kwargs, which LlamaConfig's signature hides.
    return LlamaConfig(  # type: ignore[call-arg]
        vocab_size=padded_vocab(len(tokenizer), pad_vocab_to),
        hidden_size=preset.hidden_size,
        intermediate_size=preset.intermediate_size,
        num_hidden_layers=preset.num_layers,
        num_attention_heads=preset.num_heads,
        num_key_value_heads=preset.num_heads,
        max_position_embeddings=preset.max_positions,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
        tie_word_embeddings=False,
        attention_dropout=0.0,
        use_cache=False,
        attn_implementation=attention,
    )


def load_tokenizer(spec: ModelSpec, kind: str = "auto") -> PreTrainedTokenizerBase:
    """The tokenizer for `spec`: "byte" (the offline byte-level one), "model" (the checkpoint's own,
    `path_or_id` only), or "auto" (the checkpoint's own when it has one: always for a hub id, for a
    local folder when it holds tokenizer files; otherwise bytes)."""
    if kind not in TOKENIZER_KINDS:
        raise ValueError(f"unknown tokenizer kind {kind!r}; choose one of {TOKENIZER_KINDS}")
    if kind == "model" and spec.path_or_id is None:
        raise ValueError("tokenizer 'model' needs a path_or_id model: a preset has no tokenizer of its own")
    if kind == "byte" or spec.path_or_id is None:
        return byte_tokenizer()
    folder = Path(spec.path_or_id)
    has_files = any((folder / name).exists() for name in TOKENIZER_FILES)
    if folder.is_dir() and not has_files:
        if kind == "model":
            raise ValueError(f"model folder {folder} holds no tokenizer files ({', '.join(TOKENIZER_FILES)})")
        return byte_tokenizer()
    return AutoTokenizer.from_pretrained(spec.path_or_id, revision=spec.revision)


_INIT_LOCK = threading.Lock()
"""A preset's weights come from torch's process-wide generator, seeded: two threads building at
once would interleave their draws and build other weights than the seed's."""


def load_model(
    spec: ModelSpec, *, tokenizer: PreTrainedTokenizerBase | None = None, device: torch.device | str = "cpu"
) -> PreTrainedModel:
    """Build a preset or load a checkpoint, dropout-free, with the spec's attention and kernels, on
    `device`."""
    tokenizer = tokenizer if tokenizer is not None else load_tokenizer(spec)
    model: PreTrainedModel
    if spec.preset is not None:
        config = preset_config(spec.preset, tokenizer, spec.attention, spec.pad_vocab_to)
        with _INIT_LOCK, torch.random.fork_rng(devices=[]):
            torch.manual_seed(spec.init_seed)
            model = LlamaForCausalLM(config)
        # transformers' decorator on `to` hides its signature from the type checker.
        model = model.to(dtype=spec.torch_dtype)  # type: ignore[call-arg]
        if config.vocab_size > len(tokenizer):
            model.set_output_embeddings(PaddedHead.of(model.get_output_embeddings(), len(tokenizer)))
    else:
        assert spec.path_or_id is not None, "a ModelSpec holds exactly one of preset and path_or_id"
        config = AutoConfig.from_pretrained(spec.path_or_id, revision=spec.revision)
        _zero_dropout(config)
        config.use_cache = False
        model = AutoModelForCausalLM.from_pretrained(
            spec.path_or_id,
            revision=spec.revision,
            config=config,
            dtype=spec.torch_dtype,
            attn_implementation=spec.attention,
        )
    use_kernels(model, spec.kernels)
    _check_fits(model, tokenizer)
    _check_no_dropout(model)
    return model.to(device)  # type: ignore[arg-type]  # as above: the decorated `to`


def load_teacher(
    spec: ModelSpec, *, tokenizer: PreTrainedTokenizerBase | None = None, device: torch.device | str = "cpu"
) -> PreTrainedModel:
    """A frozen model for distillation: eval mode, no parameter requires grad."""
    teacher = load_model(spec, tokenizer=tokenizer, device=device)
    teacher.eval()
    teacher.requires_grad_(False)
    return teacher


def count_parameters(model: torch.nn.Module) -> int:
    """Number of distinct parameters (tied weights counted once)."""
    return sum(p.numel() for p in model.parameters())


def _zero_dropout(config: PretrainedConfig) -> None:
    for key, value in config.to_dict().items():
        is_dropout = "dropout" in key or "pdrop" in key
        if is_dropout and isinstance(value, float) and value > 0:
            setattr(config, key, 0.0)


def _check_no_dropout(model: torch.nn.Module) -> None:
    active = [
        name
        for name, module in model.named_modules()
        if isinstance(module, torch.nn.Dropout) and module.p > 0
    ]
    if active:
        raise ValueError(f"model has active dropout in {active[:5]}; training steps would not replay exactly")


def _check_fits(model: PreTrainedModel, tokenizer: PreTrainedTokenizerBase) -> None:
    # transformers types it as any Module; a causal LM's input embedding is an nn.Embedding.
    rows = cast(torch.nn.Embedding, model.get_input_embeddings()).num_embeddings
    if rows < len(tokenizer):
        raise ValueError(
            f"tokenizer has {len(tokenizer)} tokens but the model's embedding has only {rows} rows"
        )
