"""A challenged boundary state the miner did not keep (`miners.kept_states`), rebuilt by replaying
its window's segments from the kept state before it, as a validator replays them
(`distrai.train.replay.replay_segment`), and checked against the hash the manifest committed to.

What the replay needs beside the states is written next to them when training ends (`TRAINED_FILE`):
whose batches the window trained on, among which miners, and the committed hash of every boundary."""

from __future__ import annotations

import logging
import os
import time
from pathlib import Path

import torch
from pydantic import BaseModel, ConfigDict

from distrai.protocol.runtime import Runtime
from distrai.train.replay import replay_segment
from distrai.train.train_state import TrainState, load_state, save_state, state_hash
from miners.kept_states import state_file, steps_on_disk

log = logging.getLogger("distrai.miner")

TRAINED_FILE = "trained.json"


class TrainedRecord(BaseModel):
    """What a window's states were trained on, and the hash committed for each boundary."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    owner: str
    """the hotkey whose assigned batches were trained on"""
    miners: list[str]
    """the window's miners, among which the batches are assigned"""
    hashes: dict[int, str]
    """boundary step → the state hash the manifest commits to"""


def write_record(states: Path, record: TrainedRecord) -> None:
    """Write `TRAINED_FILE` atomically."""
    tmp = states / (TRAINED_FILE + ".tmp")
    tmp.write_text(record.model_dump_json())
    os.replace(tmp, states / TRAINED_FILE)


def read_record(states: Path) -> TrainedRecord:
    return TrainedRecord.model_validate_json((states / TRAINED_FILE).read_text())


class RebuildError(RuntimeError):
    """A dropped state could not be had again: nothing kept before it, or the replay did not reach
    the committed hash (this device's training is not deterministic)."""


def rebuild(runtime: Runtime, model: torch.nn.Module, window: int, states: Path, step: int) -> TrainState:
    """The boundary state at `step`, replayed on `model` (a model of the run's shape, not the one
    training) from the nearest kept state before it, and saved among the kept ones."""
    k = runtime.inner.segment_steps
    record = read_record(states)
    if step not in record.hashes:
        raise RebuildError(f"window {window}: step {step} is not a boundary this window committed")
    before = [s for s in steps_on_disk(states) if s < step]
    if not before:
        raise RebuildError(f"window {window}: no boundary state kept before step {step}")
    first = before[-1]
    state = load_state(state_file(states, first))
    base = load_state(state_file(states, 0)).params
    began = time.monotonic()
    for start in range(first, step, k):
        batches = [runtime.batch(window, record.owner, record.miners, t) for t in range(start, start + k)]
        state = replay_segment(model, state, batches, runtime.loss_fn, runtime.inner, base=base).end
    if state_hash(state) != record.hashes[step]:
        raise RebuildError(
            f"window {window}: the state at step {step} replayed from step {first}'s does not hash to the "
            "committed one: training on this device does not repeat bit for bit, so keep every state "
            "(--miner.kept-states 0)"
        )
    save_state(state, state_file(states, step))
    log.info(
        "window %d: the challenged state at step %d, not kept, replayed from step %d's in %.1f s (%d segment(s))",
        window,
        step,
        first,
        time.monotonic() - began,
        (step - first) // k,
    )
    return state
