"""Fitting the step in a device's memory: the plan splits the batch further, then keeps the window's
base in host memory, then recomputes activations, and says what it would need when nothing fits; a
checkpointed step gives the same bits."""

from __future__ import annotations

import pytest
import torch
from support.tiny_models import FAST_LR, tiny_data
from transformers import LlamaForCausalLM

from distrai.data.byte_tokenizer import byte_tokenizer
from distrai.train.loss import causal_lm_loss
from distrai.train.memory import GIB, HEADROOM, DoesNotFit, ModelShape, plan_memory, set_checkpointing
from distrai.train.model import ModelSpec, load_model, preset_config
from distrai.train.optimizer import InnerOptimizerConfig, make_inner_optimizer
from distrai.train.step import train_step
from distrai.train.train_state import capture_state, state_hash

DATA = tiny_data(seq_len=32, documents=120)
BATCHES = [DATA.train[i * 4 : (i + 1) * 4] for i in range(3)]


def preset_shape(
    preset: str, attention: str = "sdpa", autocast: str | None = "bfloat16", vocab: int | None = None
) -> ModelShape:
    """The shape of a preset in fp32, built on the meta device (no memory, no time), sized to the
    byte tokenizer or to `vocab` tokens (50,257: the GPU config's GPT-2 BPE)."""
    config = preset_config(preset, byte_tokenizer(), attention=attention)
    config.vocab_size = vocab or config.vocab_size
    with torch.device("meta"):
        model = LlamaForCausalLM(config)
    return ModelShape.of(model, autocast)


def test_the_run_s_split_is_kept_when_it_fits_and_split_further_when_not():
    shape = preset_shape("150m")
    roomy = plan_memory(shape, rows=32, seq_len=2048, micro_batches=4, budget=80 * GIB)
    assert (roomy.micro_batches, roomy.checkpointing) == (4, False)
    assert roomy.need == shape.state_bytes() + shape.activation_bytes(8, 2048, False) <= 80 * GIB
    tight = plan_memory(shape, rows=32, seq_len=2048, micro_batches=4, budget=roomy.need - 1)
    assert tight.micro_batches == 8 and not tight.checkpointing and tight.need < roomy.need


def test_the_base_goes_to_host_memory_when_no_split_fits_then_activations_are_recomputed():
    shape = preset_shape("150m")
    assert shape.state_bytes(base_on_host=True) == (4 * shape.params + shape.largest_param) * 4
    finest = shape.state_bytes() + shape.activation_bytes(1, 2048, False)
    plan = plan_memory(shape, rows=32, seq_len=2048, micro_batches=4, budget=finest - 1)
    assert plan.base_on_host and not plan.checkpointing and plan.need < finest
    assert plan.need == shape.state_bytes(base_on_host=True) + shape.activation_bytes(
        32 // plan.micro_batches, 2048, False
    )
    assert plan.describe().endswith(
        f"without activation checkpointing, the window's base in host memory: an estimated "
        f"{plan.need / GIB:.1f} GiB of a {plan.budget / GIB:.1f} GiB budget"
    )
    finest = shape.state_bytes(base_on_host=True) + shape.activation_bytes(1, 2048, False)
    plan = plan_memory(shape, rows=32, seq_len=2048, micro_batches=4, budget=finest - 1)
    assert plan.checkpointing and plan.need < finest
    assert plan.need == shape.state_bytes(base_on_host=plan.base_on_host) + shape.activation_bytes(
        32 // plan.micro_batches, 2048, True
    )


def test_a_validator_keeps_the_miner_s_split_and_may_move_the_base_and_recompute():
    shape = preset_shape("150m")
    for checkpointing in (False, True):
        budget = shape.state_bytes(base_on_host=True) + shape.activation_bytes(8, 2048, checkpointing)
        replay = plan_memory(
            shape, rows=32, seq_len=2048, micro_batches=4, budget=budget, split_further=False
        )
        assert (replay.micro_batches, replay.checkpointing, replay.base_on_host) == (4, checkpointing, True)
    with pytest.raises(DoesNotFit):
        plan_memory(shape, rows=32, seq_len=2048, micro_batches=4, budget=budget - 1, split_further=False)


def test_the_1b_preset_fits_a_24_gb_card_with_checkpointing():
    shape = preset_shape("1b")
    assert shape.params > 1_000_000_000 and shape.state_bytes() == 20 * shape.params
    plan = plan_memory(shape, rows=32, seq_len=2048, micro_batches=4, budget=int(HEADROOM * 24 * GIB))
    assert plan.checkpointing and plan.need <= HEADROOM * 24 * GIB, plan.describe()


def test_the_1b_preset_with_gpt2_s_vocabulary_fits_a_24_gb_card_with_its_base_in_host_memory():
    shape = preset_shape("1b", vocab=50_257)
    assert shape.params == 1_233_541_120 and shape.state_bytes() > HEADROOM * 24 * GIB
    plan = plan_memory(shape, rows=32, seq_len=2048, micro_batches=4, budget=int(HEADROOM * 24 * GIB))
    assert plan.base_on_host and plan.checkpointing and plan.need <= HEADROOM * 24 * GIB, plan.describe()


def test_a_step_that_cannot_fit_names_what_it_needs():
    shape = preset_shape("1b")
    with pytest.raises(
        DoesNotFit,
        match=r"needs at least 16\.0 GiB .*1,0\d\d,\d{3},\d{3} parameters.*base kept in host memory.*budget is 15\.0",
    ):
        plan_memory(shape, rows=32, seq_len=2048, micro_batches=4, budget=15 * GIB)


def test_ranks_shard_the_state_only_when_nothing_else_fits():
    shape = preset_shape("1b")
    assert shape.layer_params * shape.layers < shape.params, (
        "embeddings and output layer lie outside the layers"
    )
    # 8 ranks on 24 GB cards: every rank fits the whole state with checkpointing, so none shards
    budget = int(HEADROOM * 24 * GIB)
    plan = plan_memory(shape, rows=4, seq_len=2048, micro_batches=1, budget=budget, ranks=8)
    assert not plan.sharded and plan.checkpointing and plan.sharded_over == 1
    # 4 ranks on 12 GB cards: the state does not fit one (19.2 GiB, 15.4 with the base in host
    # memory), a quarter of it (and a layer gathered at a time) does
    budget = int(HEADROOM * 12 * GIB)
    with pytest.raises(DoesNotFit):
        plan_memory(shape, rows=8, seq_len=2048, micro_batches=1, budget=budget)
    plan = plan_memory(shape, rows=8, seq_len=2048, micro_batches=1, budget=budget, ranks=4)
    assert plan.sharded_over == 4 and plan.need <= budget
    assert shape.state_bytes(4) < shape.state_bytes() / 3
    assert plan.need == shape.state_bytes(4) + shape.activation_bytes(
        8 // plan.micro_batches, 2048, plan.checkpointing
    )
    assert "the state sharded over 4 ranks" in plan.describe()
    # asked to shard, the ranks shard even when the whole state fits
    roomy = plan_memory(shape, rows=8, seq_len=2048, micro_batches=1, budget=80 * GIB, ranks=4, shard=True)
    assert roomy.sharded and not roomy.checkpointing
    with pytest.raises(ValueError, match="sharding the state needs at least 2 ranks, got 1"):
        plan_memory(shape, rows=8, seq_len=2048, micro_batches=1, budget=80 * GIB, shard=True)


def test_ranks_that_cannot_fit_even_sharded_say_what_each_would_need():
    shape = preset_shape("1b")
    with pytest.raises(
        DoesNotFit,
        match=r"needs at least 16\.0 GiB .*; sharded over 2 ranks, 11\.\d GiB per rank .*budget is 8\.0",
    ):
        plan_memory(shape, rows=16, seq_len=2048, micro_batches=1, budget=8 * GIB, ranks=2)


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
