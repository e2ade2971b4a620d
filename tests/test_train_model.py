"""Model presets and loading: sizes, seeded initialization, the from_pretrained path a hub
model takes, dropout removal, and clear errors."""

from __future__ import annotations

import threading
from typing import get_args

import pytest
import torch
from support.tiny_models import save_tiny_model, tiny_model
from transformers import LlamaForCausalLM

from distrai.data.byte_tokenizer import byte_tokenizer
from distrai.protocol.run import ModelPreset
from distrai.train.model import (
    PRESETS,
    ModelSpec,
    count_parameters,
    load_model,
    load_teacher,
    load_tokenizer,
    preset_config,
)

# The sizes the presets are named for (issue 3): tiny ~1M, small 10–20M, 150m, 1b.
EXPECTED_RANGES = {
    "micro": (0.2e6, 0.35e6),
    "tiny": (0.5e6, 1.5e6),
    "small": (10e6, 20e6),
    "150m": (130e6, 170e6),
    "1b": (0.9e9, 1.2e9),
}


@pytest.mark.parametrize("name", sorted(PRESETS))
def test_preset_sizes(name):
    with torch.device("meta"):
        model = LlamaForCausalLM(preset_config(name, byte_tokenizer()))
    low, high = EXPECTED_RANGES[name]
    assert low <= count_parameters(model) <= high


def test_a_run_config_takes_every_preset_and_no_other():
    """The run config's `ModelPreset` names (kept apart so reading a config imports no torch) are
    the presets the model builder has."""
    assert get_args(ModelPreset) == tuple(PRESETS)


def test_preset_uses_eager_attention_and_no_dropout():
    model = tiny_model()
    assert model.config._attn_implementation == "eager"
    assert model.config.attention_dropout == 0.0
    assert model.config.vocab_size == len(byte_tokenizer())


def test_preset_initialization_depends_on_seed_only():
    torch.manual_seed(123)
    first = tiny_model(init_seed=0)
    torch.manual_seed(999)
    second = tiny_model(init_seed=0)
    other = tiny_model(init_seed=1)
    assert all(torch.equal(a, b) for a, b in zip(first.parameters(), second.parameters(), strict=True))
    assert not torch.equal(first.lm_head.weight, other.lm_head.weight)


def test_building_a_preset_leaves_global_rng_untouched():
    torch.manual_seed(42)
    expected = torch.rand(3)
    torch.manual_seed(42)
    tiny_model(init_seed=3)
    assert torch.equal(torch.rand(3), expected)


def test_bfloat16_preset():
    model = load_model(ModelSpec(preset="tiny", dtype="bfloat16"))
    assert {p.dtype for p in model.parameters()} == {torch.bfloat16}


def test_from_pretrained_round_trip(tmp_path, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    original = tiny_model(init_seed=4)
    original.save_pretrained(tmp_path)
    byte_tokenizer().save_pretrained(tmp_path)
    spec = ModelSpec(path_or_id=str(tmp_path))
    loaded = load_model(spec)
    assert loaded.config._attn_implementation == "eager"
    original_params = dict(original.named_parameters())
    loaded_params = dict(loaded.named_parameters())
    assert original_params.keys() == loaded_params.keys()
    assert all(torch.equal(original_params[name], loaded_params[name]) for name in original_params)
    batch = torch.tensor([list(b"the quick fox sees the old barn")])
    with torch.no_grad():
        assert torch.equal(original(input_ids=batch).logits, loaded(input_ids=batch).logits)
    tokenizer = load_tokenizer(spec)
    assert tokenizer("abc", add_special_tokens=False)["input_ids"] == [97, 98, 99]


def test_folder_without_tokenizer_gets_byte_tokenizer_unless_model_is_demanded(tmp_path):
    save_tiny_model(tmp_path, with_tokenizer=False)
    spec = ModelSpec(path_or_id=str(tmp_path))
    assert len(load_tokenizer(spec)) == len(byte_tokenizer())
    with pytest.raises(ValueError, match="tokenizer 'model' needs a path_or_id"):
        load_tokenizer(ModelSpec(preset="tiny"), kind="model")
    with pytest.raises(ValueError, match="holds no tokenizer files"):
        load_tokenizer(spec, kind="model")


def test_loading_zeroes_dropout(tmp_path):
    save_tiny_model(tmp_path, attention_dropout=0.25)
    model = load_model(ModelSpec(path_or_id=str(tmp_path)))
    assert model.config.attention_dropout == 0.0
    assert all(layer.self_attn.attention_dropout == 0.0 for layer in model.model.layers)


def test_teacher_is_frozen(tmp_path):
    save_tiny_model(tmp_path)
    teacher = load_teacher(ModelSpec(path_or_id=str(tmp_path)))
    assert not teacher.training
    assert not any(p.requires_grad for p in teacher.parameters())


def test_model_too_small_for_tokenizer(tmp_path):
    save_tiny_model(
        tmp_path,
        with_tokenizer=False,
        vocab_size=100,
        bos_token_id=None,
        eos_token_id=None,
        pad_token_id=None,
    )
    with pytest.raises(ValueError, match="260 tokens but the model's embedding has only 100 rows"):
        load_model(ModelSpec(path_or_id=str(tmp_path)))


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({}, "exactly one of preset and path_or_id"),
        ({"preset": "tiny", "path_or_id": "x"}, "exactly one of preset and path_or_id"),
        ({"preset": "huge"}, "unknown model preset 'huge'"),
        ({"preset": "tiny", "dtype": "float64"}, "unknown dtype 'float64'"),
        ({"preset": "tiny", "revision": "main"}, "revision applies to path_or_id only"),
        ({"path_or_id": "x", "init_seed": 3}, "init_seed applies to a preset only"),
    ],
)
def test_bad_specs_are_refused(fields, message):
    with pytest.raises(ValueError, match=message):
        ModelSpec(**fields)


def test_threads_building_a_preset_at_once_build_the_seeds_weights():
    spec = ModelSpec(preset="tiny", init_seed=0)
    expected = load_model(spec).state_dict()
    built = []
    threads = [threading.Thread(target=lambda: built.append(load_model(spec).state_dict())) for _ in range(6)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(built) == 6
    assert all(torch.equal(state[name], expected[name]) for state in built for name in expected)
