"""The validator's state survives restarts exactly and follows the metagraph."""

from __future__ import annotations

import json

import pytest

from validators.validator_state import OwnAggregate, ValidatorState, load_state, save_state


def test_state_round_trips_exactly(tmp_path):
    path = tmp_path / "state.json"
    state = ValidatorState(
        run_id="r1",
        window=7,
        hotkeys=["a", "b"],
        averages=[0.1, 1 / 3],
        last_scores=[0.2, 0.3],
        banned_until={"b": 12},
        last_weights_block=99,
        own_aggregate=OwnAggregate(window=7, result_hash="ab" * 32, accepted=["a", "b"]),
    )
    save_state(state, path)
    assert load_state(path, "r1") == state
    assert load_state(path, "r1").own_aggregate == state.own_aggregate
    assert [p.name for p in tmp_path.iterdir()] == ["state.json"]


def test_missing_state_starts_fresh_and_foreign_or_corrupt_state_is_refused(tmp_path):
    path = tmp_path / "state.json"
    assert load_state(path, "r1") == ValidatorState(run_id="r1")
    save_state(ValidatorState(run_id="r1"), path)
    with pytest.raises(ValueError, match="belongs to run"):
        load_state(path, "r2")
    path.write_text('{"run_id": "r1", "window": "x"')
    with pytest.raises(ValueError, match="unreadable"):
        load_state(path, "r1")


def test_failed_write_keeps_the_old_state(tmp_path, monkeypatch):
    path = tmp_path / "state.json"
    save_state(ValidatorState(run_id="r1", window=1), path)

    def broken_replace(src, dst):
        raise OSError("disk full")

    monkeypatch.setattr("validators.validator_state.os.replace", broken_replace)
    with pytest.raises(OSError):
        save_state(ValidatorState(run_id="r1", window=2), path)
    assert json.loads(path.read_text())["window"] == 1
    assert [p.name for p in tmp_path.iterdir()] == ["state.json"]


def test_alignment_follows_the_metagraph():
    state = ValidatorState(
        run_id="r", hotkeys=["a", "b", "c"], averages=[0.1, 0.2, 0.3], last_scores=[1, 2, 3]
    )
    grown = state.aligned(["a", "b", "c", "d"])
    assert grown.averages == [0.1, 0.2, 0.3, 0.0]
    replaced = state.aligned(["a", "x", "c"])
    assert replaced.averages == [0.1, 0.0, 0.3] and replaced.last_scores == [1, 0, 3]
    shrunk = state.aligned(["a"])
    assert shrunk.averages == [0.1] and shrunk.hotkeys == ["a"]


def test_bans_expire():
    state = ValidatorState(run_id="r", banned_until={"a": 5})
    assert state.is_banned("a", 4) and not state.is_banned("a", 5) and not state.is_banned("b", 0)
