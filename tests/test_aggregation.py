"""The run's rule from a report's scores to an aggregate's updates and weights."""

from __future__ import annotations

import hashlib
import statistics
from collections import Counter

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from distrai.protocol.aggregation import Scored, accepted_by_rule

SEED = b"\x07" * 32


def tie(seed: bytes):
    return lambda item: hashlib.sha256(seed + item[0].encode()).digest()


def test_the_passing_scores_capped_at_their_median_are_taken_best_first_and_weighted():
    scored = {
        "a": Scored(True, 0.5),
        "b": Scored(True, 1.0),
        "c": Scored(False, 1.0),
        "d": Scored(True, 0.0),
        "e": Scored(True, 0.5),
        "f": Scored(True, 0.25),
    }
    # candidates a, b, e, f: median 0.5, so b weighs as much as a and e and ties with them
    chosen = accepted_by_rule(scored, 4, SEED)
    tied = sorted(["a", "b", "e"], key=lambda hk: tie(SEED)((hk,)))
    assert [hk for hk, _ in chosen] == [*tied, "f"]
    assert [w for _, w in chosen] == pytest.approx([0.5 / 1.75, 0.5 / 1.75, 0.5 / 1.75, 0.25 / 1.75])
    assert accepted_by_rule(scored, 1, SEED) == [(tied[0], 1.0)]
    assert accepted_by_rule({"x": Scored(False, 1.0)}, 3, SEED) == []
    with pytest.raises(ValueError, match="top_n"):
        accepted_by_rule(scored, 0, SEED)


def test_an_inflated_claim_buys_neither_weight_nor_a_place_above_the_median():
    """A miner that claims 8.7 times an H100's tokens (16,000 steps against 1,840) weighs in the model
    as an H100 does, and takes the last place among them as often as any: its claim is capped at the
    window's median claim, and ties go by the seed."""
    honest = {f"5honest{i:03d}": Scored(True, 1840.0) for i in range(30)}
    slower = {f"5slow{i:03d}": Scored(True, 460.0) for i in range(10)}
    scored = {**honest, **slower, "5inflater": Scored(True, 16000.0)}
    places = Counter()
    for i in range(64):
        chosen = dict(accepted_by_rule(scored, 16, bytes([i]) * 32))
        if "5inflater" in chosen:
            assert chosen["5inflater"] == pytest.approx(1.0 / 16)
            places["in"] += 1
        assert all(w == pytest.approx(1.0 / 16) for w in chosen.values())
    # 16 of the 31 candidates at the cap are taken: the inflater about half the windows, not every one
    assert 16 <= places["in"] <= 48, places
    # below the median, a slower miner weighs by what it trained
    few = {"5a": Scored(True, 1.0), "5b": Scored(True, 4.0), "5c": Scored(True, 9.0)}
    assert dict(accepted_by_rule(few, 3, SEED)) == pytest.approx({"5a": 1 / 9, "5b": 4 / 9, "5c": 4 / 9})


def test_ties_are_broken_by_the_window_seed_not_by_the_hotkey():
    """A miner that grinds a hotkey sorting first gains nothing: among equal scores the order is
    sha256(seed + hotkey), and the seed is the hash of a block nobody knows before committing."""
    tied = {hotkey: Scored(True, 1.0) for hotkey in ("5Aaaa", "5Mmmm", "5Zzzz")}
    firsts = Counter(accepted_by_rule(tied, 1, bytes([i]) * 32)[0][0] for i in range(90))
    assert set(firsts) == set(tied) and min(firsts.values()) >= 15, firsts


@given(
    st.dictionaries(
        st.text(min_size=1, max_size=4),
        st.builds(Scored, st.booleans(), st.floats(min_value=0.0, max_value=1.0)),
        max_size=20,
    ),
    st.integers(min_value=1, max_value=25),
)
@settings(max_examples=200, deadline=None)
def test_weights_sum_to_one_and_follow_the_scores(scored, top_n):
    chosen = accepted_by_rule(scored, top_n, SEED)
    assert len(chosen) <= top_n
    assert all(scored[hk].passed and scored[hk].score > 0 for hk, _ in chosen)
    candidates = sorted(s.score for s in scored.values() if s.passed and s.score > 0)
    if candidates:
        median = statistics.median(candidates)
        assert all(w <= median / sum(min(scored[hk].score, median) for hk, _ in chosen) * (1 + 1e-9)
                   for hk, w in chosen)
    if chosen:
        assert sum(w for _, w in chosen) == pytest.approx(1.0)
        weights = [w for _, w in chosen]
        assert weights == sorted(weights, reverse=True)
    assert accepted_by_rule(dict(reversed(list(scored.items()))), top_n, SEED) == chosen
