"""Fitting the step in a device's memory: the plan splits the batch further, then recomputes
activations, and says what it would need when nothing fits; a checkpointed step gives the same bits."""

from __future__ import annotations

import pytest
import torch
from support.tiny_models import FAST_LR, tiny_data
from transformers import LlamaForCausalLM

from distrai.train.loss import causal_lm_loss
from distrai.train.memory import GIB, HEADROOM, DoesNotFit, ModelShape, plan_memory, set_checkpointing
from distrai.train.model import ModelSpec, load_model, preset_config
from distrai.train.optimizer import InnerOptimizerConfig, make_inner_optimizer
from distrai.train.state import capture_state, state_hash
from distrai.train.step import train_step
from distrai.train.tokenizer import byte_tokenizer

DATA = tiny_data(seq_len=32, documents=120)
BATCHES = [DATA.train[i * 4 : (i + 1) * 4] for i in range(3)]


def preset_shape(preset: str, attention: str = "sdpa", autocast: str | None = "bfloat16") -> ModelShape:
    """The shape of a preset in fp32, built on the meta device (no memory, no time)."""
    with torch.device("meta"):
        model = LlamaForCausalLM(preset_config(preset, byte_tokenizer(), attention=attention))
    return ModelShape.of(model, autocast)


def test_the_run_s_split_is_kept_when_it_fits_and_split_further_when_not():
    shape = preset_shape("150m")
    roomy = plan_memory(shape, rows=32, seq_len=2048, micro_batches=4, budget=80 * GIB)
    assert (roomy.micro_batches, roomy.checkpointing) == (4, False)
    assert roomy.need == shape.state_bytes() + shape.activation_bytes(8, 2048, False) <= 80 * GIB
    tight = plan_memory(shape, rows=32, seq_len=2048, micro_batches=4, budget=roomy.need - 1)
    assert tight.micro_batches == 8 and not tight.checkpointing and tight.need < roomy.need


def test_checkpointing_comes_when_no_split_fits_and_a_validator_only_checkpoints():
    shape = preset_shape("150m")
    finest = shape.state_bytes() + shape.activation_bytes(1, 2048, False)
    plan = plan_memory(shape, rows=32, seq_len=2048, micro_batches=4, budget=finest - 1)
    assert plan.checkpointing and plan.need < finest
    assert plan.need == shape.state_bytes() + shape.activation_bytes(32 // plan.micro_batches, 2048, True)
    # a validator replays the miner's split (here the run's 4) and may only recompute activations
    budget = shape.state_bytes() + shape.activation_bytes(8, 2048, True)
    replay = plan_memory(shape, rows=32, seq_len=2048, micro_batches=4, budget=budget, split_further=False)
    assert (replay.micro_batches, replay.checkpointing) == (4, True)
    with pytest.raises(DoesNotFit):
        plan_memory(shape, rows=32, seq_len=2048, micro_batches=4, budget=budget - 1, split_further=False)


def test_the_1b_preset_fits_a_24_gb_card_with_checkpointing():
    shape = preset_shape("1b")
    assert shape.params > 1_000_000_000 and shape.state_bytes() == 20 * shape.params
    plan = plan_memory(shape, rows=32, seq_len=2048, micro_batches=4, budget=int(HEADROOM * 24 * GIB))
    assert plan.checkpointing and plan.need <= HEADROOM * 24 * GIB, plan.describe()


def test_a_step_that_cannot_fit_names_what_it_needs():
    shape = preset_shape("1b")
    with pytest.raises(
        DoesNotFit, match=r"needs at least 19\.\d GiB .*1,0\d\d,\d{3},\d{3} parameters.*budget is 16\.0"
    ):
        plan_memory(shape, rows=32, seq_len=2048, micro_batches=4, budget=16 * GIB)


@pytest.mark.parametrize(
    ("kwargs", "words"),
    [
        ({"rows": 30, "micro_batches": 4}, "30 rows do not split into 4"),
        ({"budget": 0}, "budget must be positive"),
    ],
)
def test_bad_plans_are_refused(kwargs, words):
    args = {"rows": 32, "seq_len": 2048, "micro_batches": 4, "budget": GIB} | kwargs
    with pytest.raises(ValueError, match=words):
        plan_memory(preset_shape("tiny"), **args)


def test_eager_attention_and_fp32_compute_need_more_than_sdpa_under_autocast():
    fast = preset_shape("150m").activation_bytes(8, 2048, False)
    assert preset_shape("150m", attention="eager").activation_bytes(8, 2048, False) > fast
    assert preset_shape("150m", autocast=None).activation_bytes(8, 2048, False) > fast


@pytest.mark.parametrize("autocast", [None, "bfloat16"])
def test_a_checkpointed_step_gives_the_same_bits(autocast):
    def run(checkpointing: bool) -> str:
        model = load_model(ModelSpec(preset="tiny", attention="sdpa"))
        set_checkpointing(model, checkpointing)
        assert model.is_activation_checkpointing == checkpointing
        optimizer = make_inner_optimizer(model, InnerOptimizerConfig(lr=FAST_LR))
        for batch in BATCHES:
            train_step(model, optimizer, batch, loss_fn=causal_lm_loss, micro_batches=2, autocast=autocast)
        return state_hash(capture_state(model, optimizer, len(BATCHES)))

    assert run(True) == run(False)
