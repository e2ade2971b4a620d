"""The run's rule from a report's verdicts, scores and measured gains to an aggregate's updates and
weights."""

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


def test_the_largest_measured_gains_of_passing_updates_are_taken_and_weighted_by_gain():
    scored = {
        "a": Scored(True, 40.0, 0.5),
        "b": Scored(True, 160.0, 1.0),
        "c": Scored(False, 40.0, 2.0),  # failed a check
        "d": Scored(True, 0.0, 1.0),  # unscored
        "e": Scored(True, 40.0, 0.5),
        "f": Scored(True, 10.0, 0.25),
        "g": Scored(True, 40.0, -0.1),  # made the reserve's loss worse
    }
    chosen = accepted_by_rule(scored, 4, SEED)
    tied = sorted(["a", "e"], key=lambda hk: tie(SEED)((hk,)))
    assert [hk for hk, _ in chosen] == ["b", *tied, "f"]
    assert [w for _, w in chosen] == pytest.approx([1.0 / 2.25, 0.5 / 2.25, 0.5 / 2.25, 0.25 / 2.25])
    assert accepted_by_rule(scored, 1, SEED) == [("b", 1.0)]
    assert accepted_by_rule({"x": Scored(False, 1.0, 1.0)}, 3, SEED) == []
    with pytest.raises(ValueError, match="top_n"):
        accepted_by_rule(scored, 0, SEED)


def test_an_inflated_claim_buys_neither_weight_nor_a_place():
    """A miner that claims 8.7 times an H100's tokens (16,000 steps against 1,840) and did an H100's
    work weighs in the model as that work measured: its claim is not read. Sixteen such claims do
    not take the sixteen places from miners whose updates measured better."""
    honest = {f"5honest{i:03d}": Scored(True, 1840.0, 0.30 + i / 1000) for i in range(30)}
    inflaters = {f"5inflater{i:02d}": Scored(True, 16000.0, 0.28) for i in range(16)}
    chosen = dict(accepted_by_rule({**honest, **inflaters}, 16, SEED))
    assert set(chosen) <= set(honest) and len(chosen) == 16
    pair = {"5a": Scored(True, 1840.0, 0.3), "5b": Scored(True, 16000.0, 0.3)}
    alone = dict(accepted_by_rule(pair, 2, SEED))
    assert alone["5a"] == alone["5b"] == pytest.approx(0.5)


def test_ties_are_broken_by_the_window_seed_not_by_the_hotkey():
    """A miner that grinds a hotkey sorting first gains nothing: among equal gains the order is
    sha256(seed + hotkey), and the seed is the hash of a block nobody knows before committing."""
    tied = {hotkey: Scored(True, 1.0, 1.0) for hotkey in ("5Aaaa", "5Mmmm", "5Zzzz")}
    firsts = Counter(accepted_by_rule(tied, 1, bytes([i]) * 32)[0][0] for i in range(90))
    assert set(firsts) == set(tied) and min(firsts.values()) >= 15, firsts


@given(
    st.dictionaries(
        st.text(min_size=1, max_size=4),
        st.builds(
            Scored,
            st.booleans(),
            st.floats(min_value=0.0, max_value=1.0),
            st.floats(min_value=-1.0, max_value=1.0),
        ),
        max_size=20,
    ),
    st.integers(min_value=1, max_value=25),
)
@settings(max_examples=200, deadline=None)
def test_weights_sum_to_one_and_follow_the_gains(scored, top_n):
    chosen = accepted_by_rule(scored, top_n, SEED)
    assert len(chosen) <= top_n
    assert all(scored[hk].passed and scored[hk].score > 0 and scored[hk].gain > 0 for hk, _ in chosen)
    if chosen:
        assert sum(w for _, w in chosen) == pytest.approx(1.0)
        weights = [w for _, w in chosen]
        assert weights == sorted(weights, reverse=True)
        gains = [scored[hk].gain for hk, _ in chosen]
        assert weights == pytest.approx([g / sum(gains) for g in gains])
    assert accepted_by_rule(dict(reversed(list(scored.items()))), top_n, SEED) == chosen
