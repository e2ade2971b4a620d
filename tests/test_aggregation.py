"""The run's rule from a report's scores to an aggregate's updates and weights."""

from __future__ import annotations

import hashlib
from collections import Counter

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from distrai.protocol.aggregation import Scored, accepted_by_rule

SEED = b"\x07" * 32


def tie(seed: bytes):
    return lambda item: hashlib.sha256(seed + item[0].encode()).digest()


def test_the_best_passing_scores_are_taken_and_weighted_by_score():
    scored = {
        "a": Scored(True, 0.5),
        "b": Scored(True, 1.0),
        "c": Scored(False, 1.0),
        "d": Scored(True, 0.0),
        "e": Scored(True, 0.5),
        "f": Scored(True, 0.25),
    }
    chosen = accepted_by_rule(scored, 4, SEED)
    tied = sorted(["a", "e"], key=lambda hk: tie(SEED)((hk,)))
    assert [hk for hk, _ in chosen] == ["b", *tied, "f"]
    assert [w for _, w in chosen] == pytest.approx([1.0 / 2.25, 0.5 / 2.25, 0.5 / 2.25, 0.25 / 2.25])
    assert accepted_by_rule(scored, 1, SEED) == [("b", 1.0)]
    assert accepted_by_rule({"x": Scored(False, 1.0)}, 3, SEED) == []
    with pytest.raises(ValueError, match="top_n"):
        accepted_by_rule(scored, 0, SEED)


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
    if chosen:
        assert sum(w for _, w in chosen) == pytest.approx(1.0)
        weights = [w for _, w in chosen]
        assert weights == sorted(weights, reverse=True)
    assert accepted_by_rule(dict(reversed(list(scored.items()))), top_n, SEED) == chosen
