"""What a validator says about windows it passes over (`Validator.say_skipped`) or finishes late
(`validator.time_spent`)."""

from __future__ import annotations

import logging
from pathlib import Path

from support.local_harness import make_local_harness

from distrai.node.seat import Seat
from distrai.protocol.run import load_run_config
from distrai.protocol.runtime import build_runtime
from distrai.store import FileStore
from validators.validator import Validator, ValidatorOptions
from validators.validator_state import ValidatorState, save_state
from validators.window_record import time_spent

CONFIG = Path(__file__).parent / "support" / "adversary-localnet.toml"


def validator_at(tmp_path: Path, saved_window: int | None) -> Validator:
    """A validator process as it starts, with the state it saved at `saved_window` (None: fresh)."""
    harness = make_local_harness(tmp_path)
    wallet = harness.new_wallet("validator")
    harness.chain.register(wallet)
    runtime = build_runtime(load_run_config(CONFIG))
    work = tmp_path / "validator"
    if saved_window is not None:
        work.mkdir()
        save_state(ValidatorState(run_id=runtime.run_id, window=saved_window), work / "validator_state.json")
    store = FileStore(tmp_path / "store")
    return Validator(Seat(runtime, harness.chain, wallet, store, store.url), ValidatorOptions(work))


def said_while(action, caplog) -> list[str]:
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="distrai.validator"):
        action()
    return [r.getMessage() for r in caplog.records]


def test_a_restarted_validator_says_which_windows_after_its_saved_one_it_skips(tmp_path, caplog):
    validator = validator_at(tmp_path, saved_window=4)
    assert said_while(lambda: validator.say_skipped(7), caplog) == [
        "window 5: skipped: its reveals could no longer be listed in time",
        "window 6: skipped: its reveals could no longer be listed in time",
    ]
    assert said_while(lambda: validator.say_skipped(7), caplog) == []  # said once
    assert said_while(lambda: validator.say_skipped(8), caplog) == []


def test_a_fresh_validator_skips_nothing_before_its_first_window(tmp_path, caplog):
    validator = validator_at(tmp_path, saved_window=None)
    assert said_while(lambda: validator.say_skipped(6), caplog) == []


def test_a_late_window_names_where_its_time_went_the_longest_part_first():
    parts = [
        ("listing the miners' stores (s3://b/m)", 0.21),
        ("checking the miners", 1.0),
        ("publishing to s3://b/v", 25.3),
    ]
    assert time_spent(parts) == (
        "publishing to s3://b/v: 25.3 s; checking the miners: 1.0 s; listing the miners' stores (s3://b/m): 0.2 s"
    )
