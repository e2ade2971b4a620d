"""Replay classes: a node's class names what makes its replay bit-exact, and a validator picks
bit-exact, a table row, or the run's default to compare a miner's segments."""

from __future__ import annotations

import tomllib

import pytest
import torch
from support.tiny_models import tiny_model

from distrai.localnet.network import local_runtime
from distrai.protocol.run import ClassTolerance, load_run_config, parse_run_config, shipped_config_path
from distrai.train.replay_class import (
    Tolerance,
    device_name,
    replay_class_of,
    tolerance_for,
)
from distrai.train.step import StepConfig
from distrai.wire.window_documents import ReplayClass

H100, H200, A100 = "NVIDIA H100 80GB HBM3", "NVIDIA H200", "NVIDIA A100-SXM4-80GB"
DEFAULT = Tolerance(0.03, 0.02, "the run's default tolerance")
TABLE = [ClassTolerance(devices=(H100, H200), replay=0.025, loss=0.01, measured="gpu-2026-11-23")]


def cls(device: str = H100, micro_batches: int = 4, **changes) -> ReplayClass:
    base = {"torch": "2.13.0", "cuda": "13.0", "dtype": "bfloat16", "attention": "sdpa"}
    return ReplayClass(device=device, micro_batches=micro_batches, **{**base, **changes})


def test_the_same_class_compares_bit_for_bit_whatever_the_split():
    # the validator replays with the miner's split, so its own default split does not matter
    tolerance = tolerance_for(cls(H100, micro_batches=2), cls(H100, micro_batches=4), TABLE, DEFAULT)
    assert tolerance.exact and (tolerance.replay, tolerance.loss) == (0.0, 0.0)


def test_a_pair_of_devices_in_the_table_gets_its_row_in_either_order():
    for miner, validator in ((H100, H200), (H200, H100)):
        tolerance = tolerance_for(cls(miner), cls(validator), TABLE, DEFAULT)
        assert (tolerance.replay, tolerance.loss) == (0.025, 0.01)
        assert "gpu-2026-11-23" in tolerance.why


@pytest.mark.parametrize(
    ("miner", "validator"),
    [
        (cls(A100), cls(H100)),  # no row for the pair
        (cls(H100, torch="2.12.0"), cls(H200)),  # a row for the devices, but another torch
        (cls(H100, attention="eager"), cls(H200)),
        (cls(H100), cls(H100, dtype="float32")),  # same device, other dtype: not the same class
        (cls(H100, autocast="bfloat16"), cls(H100)),  # autocast changes the kernels' inputs
        (cls(H100, adamw="fused"), cls(H100)),
        (cls(H100, compiled=True), cls(H100)),  # inductor's kernels give other bits than eager's
        (None, cls(H100)),  # a manifest that names no class
    ],
)
def test_anything_else_gets_the_run_default(miner, validator):
    assert tolerance_for(miner, validator, TABLE, DEFAULT) == DEFAULT


def test_this_machine_s_class():
    model = tiny_model()
    step = StepConfig(micro_batches=2, max_grad_norm=1.0, cpu_threads=1, ranks=2, autocast="bfloat16")
    mine = replay_class_of(model, torch.device("cpu"), step, adamw="foreach")
    assert mine.device == device_name(torch.device("cpu")) and mine.device.startswith("cpu (")
    assert (mine.torch, mine.cuda, mine.dtype, mine.micro_batches) == (torch.__version__, None, "float32", 2)
    assert (mine.ranks, mine.autocast, mine.adamw, mine.sharded) == (2, "bfloat16", "foreach", False)
    assert mine.attention == model.config._attn_implementation
    sharded = replay_class_of(model, torch.device("cpu"), StepConfig(ranks=4, sharded=True))
    assert (sharded.ranks, sharded.sharded) == (4, True)


@pytest.mark.parametrize("validator_ranks", [1, "the miner's"])
@pytest.mark.parametrize("sharded", [False, True])
def test_a_validator_replays_a_split_over_any_number_of_ranks_bit_for_bit(validator_ranks, sharded):
    # a miner's ranks add their gradients in rank order (DDP's all-reduce hook, FSDP2's reduce-scatter),
    # which one process repeats at any width (tests/test_train_parallel.py, test_train_sharded.py). A
    # validator's own class carries the miner's split when it replays (validators/replay_check.py).
    def validator(miner: ReplayClass) -> ReplayClass:
        return cls(H100) if validator_ranks == 1 else miner.model_copy(update={"device": H100})

    for ranks in (2, 4, 8):
        miner = cls(H100, ranks=ranks, sharded=sharded)
        assert tolerance_for(miner, validator(miner), TABLE, DEFAULT).exact
        # a table row applies across devices, whatever the split
        other = cls(H200, ranks=ranks, sharded=sharded)
        assert tolerance_for(other, validator(other), TABLE, DEFAULT).replay == 0.025
        assert (
            tolerance_for(cls(A100, ranks=ranks, sharded=sharded), validator(miner), TABLE, DEFAULT)
            == DEFAULT
        )


def _run(verification: dict) -> dict:
    data = tomllib.loads(shipped_config_path("cpu-localnet").read_text())
    return {**data, "verification": {**data["verification"], **verification}}


def test_the_run_config_holds_the_table_and_no_row_may_be_looser_than_the_default():
    row = {"devices": [H100, H200], "replay": 0.025, "loss": 0.01, "measured": "gpu-2026-11-23"}
    config = parse_run_config(_run({"replay_tolerance": 0.03, "loss_tolerance": 0.02, "tolerances": [row]}))
    assert config.verification.tolerances == TABLE
    with pytest.raises(ValueError, match="tighter bound than a listed one"):
        parse_run_config(_run({"replay_tolerance": 0.02, "loss_tolerance": 0.02, "tolerances": [row]}))


def test_a_compiled_run_compiles_every_node_s_model_and_says_so_in_its_class(tmp_path):
    data = tomllib.loads(shipped_config_path("cpu-localnet").read_text())
    config = parse_run_config({**data, "train": {**data["train"], "compile": True}})
    runtime = local_runtime(config, tmp_path)
    assert runtime.model._compiled_call_impl is not None, "the model runs under torch.compile"
    plain = local_runtime(load_run_config(shipped_config_path("cpu-localnet")), tmp_path).model
    names = [n for n, _ in runtime.model.named_parameters()]
    assert names == [n for n, _ in plain.named_parameters()], "compiling in place keeps the parameters' names"
    mine = replay_class_of(runtime.model, runtime.device, runtime.inner.step, compiled=config.train.compile)
    assert mine.compiled
