"""AdamW's moments rounded to bfloat16 at every segment boundary (`train.boundary_moments`): the
boundary states hold moments a bfloat16 represents exactly, training goes on from them, every
segment still replays bit for bit from its revealed start (a run of two segments too, rounding at the
boundary between them), a revealed state codes in fewer bytes, and the run config carries the choice
to the inner loop. Data-parallel and sharded ranks round alike: tests/test_train_sharded.py."""

from __future__ import annotations

import dataclasses

import pytest
import torch
from support.tiny_models import fast_inner_config, tiny_data, tiny_model

from distrai.protocol.run import load_run_config, shipped_config_path
from distrai.protocol.runtime import inner_config
from distrai.train.assignment import batch_indices
from distrai.train.coded_state import encode_coded_state
from distrai.train.inner import InnerConfig, inner_loop
from distrai.train.loss import causal_lm_loss
from distrai.train.optimizer import MOMENT_KEYS
from distrai.train.replay import replay_segment
from distrai.train.train_state import decode_state, encode_state, state_hash, states_equal

DATA = tiny_data(seq_len=32, documents=120)
MINERS = ["alice", "bob"]
FP32 = fast_inner_config(inner_steps=6, segment_steps=2)
BF16 = dataclasses.replace(FP32, boundary_moments="bfloat16")


def batch(step: int) -> torch.Tensor:
    return DATA.batch(batch_indices("run", 0, "bob", step, 4, DATA.n_train, MINERS))


def moments(state) -> dict[str, torch.Tensor]:
    return {k: v for k, v in state.optimizer.items() if k.rsplit("/", 1)[1] in MOMENT_KEYS}


def in_bfloat16(t: torch.Tensor) -> bool:
    return torch.equal(t, t.to(torch.bfloat16).to(t.dtype))


@pytest.fixture(scope="module")
def windows():
    return {c.boundary_moments: inner_loop(tiny_model(), batch, causal_lm_loss, c) for c in (FP32, BF16)}


def test_boundary_states_hold_bfloat16_moments_and_training_goes_on_from_them(windows):
    rounded, plain = windows["bfloat16"], windows["float32"]
    for boundary in rounded.boundaries[1:]:
        held = moments(boundary.state)
        assert held and all(t.dtype == torch.float32 and in_bfloat16(t) for t in held.values())
    assert not all(in_bfloat16(t) for t in moments(plain.boundaries[1].state).values())
    # the first segment is the same; the rounding at its end changes every step after it
    assert rounded.losses[:2] == plain.losses[:2]
    assert states_equal(
        dataclasses.replace(rounded.boundaries[1].state, optimizer={}),
        dataclasses.replace(plain.boundaries[1].state, optimizer={}),
    )
    assert rounded.boundaries[2].state_hash != plain.boundaries[2].state_hash
    assert rounded.losses[3] != plain.losses[3]


@pytest.mark.parametrize("segments", [1, 2])
def test_every_run_of_segments_replays_bit_for_bit_from_its_revealed_start(windows, segments):
    result = windows["bfloat16"]
    for first in range(BF16.n_segments - segments + 1):
        start = decode_state(encode_state(result.boundaries[first].state))
        claimed = result.boundaries[first + segments]
        steps = range(start.step, claimed.step)
        replay = replay_segment(
            tiny_model(init_seed=5), start, [batch(t) for t in steps], causal_lm_loss, BF16
        )
        assert state_hash(replay.end) == claimed.state_hash
        assert replay.losses == result.losses[start.step : claimed.step]
        # a replay that keeps every float32 bit of the moments does not reach the committed state
        kept = replay_segment(tiny_model(), start, [batch(t) for t in steps], causal_lm_loss, FP32)
        assert state_hash(kept.end) != claimed.state_hash


def test_a_revealed_state_codes_in_fewer_bytes(windows):
    """The moments' low 16 bits are 0 and code to nothing: measured here on the tiny model, about 3 bytes
    per parameter less (docs/reveal-size.md has the measured table)."""
    n = sum(p.numel() for p in tiny_model().parameters())
    sizes = {}
    for kind, result in windows.items():
        base = result.boundaries[0].state.params
        sizes[kind] = len(encode_coded_state(result.boundaries[-1].state, base)) / n
    assert sizes["bfloat16"] < sizes["float32"] - 2.5, sizes


def test_the_run_config_carries_the_choice_and_a_bad_one_is_named():
    run = load_run_config(shipped_config_path("cpu-localnet"))
    for choice in ("float32", "bfloat16"):
        changed = run.model_copy(update={"train": run.train.model_copy(update={"boundary_moments": choice})})
        assert inner_config(changed, "run").boundary_moments == choice
    with pytest.raises(ValueError, match="boundary_moments"):
        InnerConfig(inner_steps=2, segment_steps=1, boundary_moments="float16")
    with pytest.raises(ValueError, match="boundary_moments"):
        type(run.train).model_validate({**run.train.model_dump(), "boundary_moments": "float16"})
