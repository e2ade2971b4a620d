"""Pay that matures (`validators.pay`): a window's score enters the moving average only
`maturity_windows` windows later, a catch forfeits what has not matured, and a fresh hotkey earns
nothing before its first window matures."""

from __future__ import annotations

import pytest

from validators.pay import add_window, forfeit, mature, matures_at, pending_total
from validators.scoring import weights_from_averages
from validators.validator_state import ValidatorState

ALPHA, M = 0.5, 3


def run(windows: int, scores: dict[str, float], caught: dict[int, str] | None = None, held=()):
    """`windows` windows of the same scores folded as a validator folds them; returns each window's
    averages after its fold."""
    caught = caught or {}
    averages = dict.fromkeys(scores, 0.0)
    pending: dict = {}
    history = []
    for w in range(windows):
        pending = add_window(pending, w, scores)
        if w in caught:
            pending, _ = forfeit(pending, caught[w])
            averages[caught[w]] = 0.0
        averages, pending = mature(averages, pending, w - M, ALPHA, held)
        history.append(dict(averages))
    return history, pending


def test_a_fresh_hotkey_earns_nothing_before_its_first_window_matures():
    history, pending = run(M + 2, {"5honest": 100.0})
    assert [h["5honest"] for h in history[:M]] == [0.0] * M
    weights = weights_from_averages([history[M - 1]["5honest"], 0.0], burn_share=0.0, owner_uid=1)
    assert weights == [0.0, 1.0]  # nothing to pay the miner yet: its part goes to the owner
    assert history[M]["5honest"] == pytest.approx(ALPHA * 100.0)
    assert history[M + 1]["5honest"] == pytest.approx(ALPHA * 100.0 + (1 - ALPHA) * ALPHA * 100.0)
    assert pending_total(pending, "5honest") == 300.0 and matures_at(pending, "5honest", M) == 2 + M


def test_a_catch_forfeits_every_score_not_yet_matured_and_only_the_caught_hotkeys():
    honest, _ = run(8, {"5honest": 100.0, "5cheat": 400.0})
    caught, pending = run(8, {"5honest": 100.0, "5cheat": 400.0}, caught={5: "5cheat"})
    assert [h["5honest"] for h in caught] == [h["5honest"] for h in honest]
    # windows 3, 4 and 5 were pending at the catch in window 5: they never reach the average, and the
    # windows after it start from zero
    assert caught[4]["5cheat"] == pytest.approx(honest[4]["5cheat"])
    assert caught[5]["5cheat"] == 0.0 and caught[6]["5cheat"] == 0.0
    assert caught[7]["5cheat"] == 0.0  # window 6 matures at window 9
    assert [e.window for e in pending["5cheat"]] == [6, 7]
    _, lost = forfeit(add_window({}, 0, {"5a": 1.0, "5b": 2.0}), "5a")
    assert lost == 1.0


def test_a_held_hotkey_matures_nothing_until_released_and_then_catches_up():
    scores = {"5held": 10.0}
    pending = add_window(add_window({}, 0, scores), 1, scores)
    averages, kept = mature({"5held": 0.0}, pending, 1, ALPHA, held=["5held"])
    assert averages == {"5held": 0.0} and kept == pending
    averages, kept = mature(averages, kept, 1, ALPHA)
    assert averages["5held"] == pytest.approx(ALPHA * 10 + (1 - ALPHA) * ALPHA * 10) and kept == {}


def test_an_unmeasured_score_leaves_the_average_when_it_matures():
    pending = add_window(add_window({}, 0, {"5a": 8.0}), 1, {"5a": None})
    averages, _ = mature({"5a": 0.0}, pending, 1, ALPHA)
    assert averages["5a"] == pytest.approx(4.0)


def test_pending_scores_follow_the_hotkey_and_leave_with_it():
    state = ValidatorState(
        run_id="r",
        hotkeys=["5a", "5b"],
        averages=[1.0, 2.0],
        last_scores=[0.0, 0.0],
        pending=add_window({}, 4, {"5a": 3.0, "5b": 5.0}),
    )
    moved = state.aligned(["5a", "5c"])  # 5b deregistered, 5c took its uid
    assert moved.averages == [1.0, 0.0] and set(moved.pending) == {"5a"}
    assert ValidatorState.model_validate_json(moved.model_dump_json()) == moved
