"""The run's rule from a report's scores to an aggregate's updates and weights."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from distrai.aggregation import Scored, accepted_by_rule


def test_the_best_passing_scores_are_taken_and_weighted_by_score():
    scored = {
        "a": Scored(True, 0.5),
        "b": Scored(True, 1.0),
        "c": Scored(False, 1.0),
        "d": Scored(True, 0.0),
        "e": Scored(True, 0.5),
        "f": Scored(True, 0.25),
    }
    assert accepted_by_rule(scored, top_n=3) == [("b", 0.5), ("a", 0.25), ("e", 0.25)]
    assert accepted_by_rule(scored, top_n=1) == [("b", 1.0)]
    assert accepted_by_rule({"x": Scored(False, 1.0)}, top_n=3) == []
    with pytest.raises(ValueError, match="top_n"):
        accepted_by_rule(scored, top_n=0)


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
    chosen = accepted_by_rule(scored, top_n)
    assert len(chosen) <= top_n
    assert all(scored[hk].passed and scored[hk].score > 0 for hk, _ in chosen)
    if chosen:
        assert sum(w for _, w in chosen) == pytest.approx(1.0)
        weights = [w for _, w in chosen]
        assert weights == sorted(weights, reverse=True)
    assert accepted_by_rule(dict(reversed(list(scored.items()))), top_n) == chosen
