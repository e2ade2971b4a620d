"""Tiny models, data and teachers for the training tests, built in temporary folders."""

from __future__ import annotations

import json
from pathlib import Path

import torch
from transformers import LlamaForCausalLM, PreTrainedModel

from distrai.data.byte_tokenizer import byte_tokenizer
from distrai.train.data import DataSpec, TokenData, build_token_data
from distrai.train.inner import InnerConfig, run_steps
from distrai.train.loss import causal_lm_loss
from distrai.train.model import ModelSpec, load_model, preset_config
from distrai.train.optimizer import InnerOptimizerConfig, make_inner_optimizer
from distrai.train.step import StepConfig

TINY = ModelSpec(preset="tiny")
FAST_LR = 3e-3


def tiny_model(init_seed: int = 0) -> PreTrainedModel:
    """A fresh preset `tiny` model (about 1M parameters) on the CPU."""
    return load_model(ModelSpec(preset="tiny", init_seed=init_seed))


def tiny_data(seq_len: int = 32, documents: int = 200, heldout_fraction: float = 0.05) -> TokenData:
    """Byte-tokenized sequences of a small slice of the built-in corpus."""
    spec = DataSpec(seq_len=seq_len, builtin_documents=documents, heldout_fraction=heldout_fraction)
    return build_token_data(spec, byte_tokenizer())


def fast_inner_config(inner_steps: int = 4, segment_steps: int = 2, **step_fields) -> InnerConfig:
    """An inner-loop config with a learning rate high enough to see learning in a few steps."""
    return InnerConfig(
        inner_steps=inner_steps,
        segment_steps=segment_steps,
        optimizer=InnerOptimizerConfig(lr=FAST_LR, weight_decay=0.0),
        step=StepConfig(**step_fields),
        sketch_seed="test-run",
    )


def train_on(model: PreTrainedModel, data: TokenData, steps: int, batch_size: int = 8) -> list[float]:
    """Train `model` in place on consecutive training batches; returns the step losses."""
    optimizer = make_inner_optimizer(model, InnerOptimizerConfig(lr=FAST_LR, weight_decay=0.0))
    batches = (
        data.train[(s * batch_size) % (data.n_train - batch_size) :][:batch_size] for s in range(steps)
    )
    config = fast_inner_config(inner_steps=steps, segment_steps=steps)
    return [r.loss for r in run_steps(model, optimizer, batches, causal_lm_loss, config, 0)]


def save_tiny_model(
    directory: Path, *, init_seed: int = 0, with_tokenizer: bool = True, **config_overrides
) -> Path:
    """`save_pretrained` a tiny Llama (its config changed by `config_overrides`) and, optionally,
    the byte tokenizer beside it, as a hub checkpoint folder would hold them."""
    tokenizer = byte_tokenizer()
    config = preset_config("tiny", tokenizer)
    for key, value in config_overrides.items():
        setattr(config, key, value)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(init_seed)
        model = LlamaForCausalLM(config)
    model.save_pretrained(directory)
    if with_tokenizer:
        tokenizer.save_pretrained(directory)
    return directory


def save_tiny_teacher(directory: Path, data: TokenData, steps: int = 40) -> Path:
    """Train a tiny model briefly on `data` and `save_pretrained` it with its tokenizer."""
    teacher = tiny_model(init_seed=7)
    train_on(teacher, data, steps)
    teacher.save_pretrained(directory)
    byte_tokenizer().save_pretrained(directory)
    return directory


def with_micro_model(config_text: str) -> str:
    """A run config's text with the `micro` model (0.27M parameters, a training step about half of
    `tiny`'s) in place of `tiny`: a network's checks and replays of each window take less of the 2
    cores the suite shares, and what a network test checks does not depend on the model's size."""
    if config_text.count('preset = "tiny"') != 1:
        raise ValueError("the run config does not name the tiny preset exactly once")
    return config_text.replace('preset = "tiny"', 'preset = "micro"')


def write_corpus_files(directory: Path, documents: list[str]) -> dict[str, Path]:
    """The same documents as a blank-line separated .txt, a .jsonl and a .parquet file."""
    directory.mkdir(parents=True, exist_ok=True)
    text = directory / "corpus.txt"
    text.write_text("\n\n".join(documents) + "\n", encoding="utf-8")
    jsonl = directory / "corpus.jsonl"
    jsonl.write_text("".join(json.dumps({"text": d}) + "\n" for d in documents), encoding="utf-8")
    import pyarrow as pa  # the `hub` extra's (datasets'): the suite's conftest loads without it
    import pyarrow.parquet as pq

    parquet = directory / "corpus.parquet"
    pq.write_table(pa.table({"text": documents}), parquet)
    return {"text": text, "json": jsonl, "parquet": parquet}
