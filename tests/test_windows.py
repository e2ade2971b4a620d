"""Window arithmetic and the challenge draw (distrai/protocol/windows.py)."""

from __future__ import annotations

import dataclasses
import hashlib
from collections import Counter

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import ValidationError

from distrai.protocol.run import load_run_config, shipped_config_path
from distrai.protocol.windows import (
    ChallengeInputs,
    Phase,
    WindowConfig,
    activities,
    aggregate_deadline,
    base_index,
    blocks_until,
    challenge_count,
    challenge_runs,
    challenged,
    challenged_miners,
    challenged_segments,
    commit_deadline,
    committed_in_time,
    is_checkpoint_window,
    miner_segments,
    on_probation,
    phase,
    read_patience,
    replay_shares,
    replayed_by,
    reveal_deadline,
    reveal_seed,
    roster_block,
    run_starts,
    score_patience,
    score_shares,
    segments_to_reveal,
    trajectory_sample,
    window_end,
    window_of,
    window_start,
)

SMALL = WindowConfig(
    blocks_per_window=10, commit_offset=4, reveal_offset=6, aggregate_offset=8, checkpoint_every=3
)
BLOCK_HASH = "0x" + "ab" * 32
RUN = "f" * 64


@st.composite
def window_configs(draw):
    length = draw(st.integers(min_value=4, max_value=500))
    offsets = sorted(draw(st.sets(st.integers(min_value=1, max_value=length - 1), min_size=3, max_size=3)))
    return WindowConfig(
        blocks_per_window=length,
        commit_offset=offsets[0],
        reveal_offset=offsets[1],
        aggregate_offset=offsets[2],
        checkpoint_every=draw(st.integers(min_value=1, max_value=20)),
    )


def hotkeys(n: int, prefix: str = "miner") -> list[str]:
    return [f"5{prefix}{i:04d}" for i in range(n)]


def seed_number(i: int) -> bytes:
    return reveal_seed("0x" + hashlib.sha256(str(i).encode()).hexdigest(), RUN, i)


# --- window config ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("offsets", "field", "words"),
    [
        (
            {"commit_offset": 6, "reveal_offset": 6, "aggregate_offset": 8},
            "reveal_offset",
            "after commit_offset",
        ),
        (
            {"commit_offset": 4, "reveal_offset": 6, "aggregate_offset": 5},
            "aggregate_offset",
            "after reveal_offset",
        ),
        (
            {"commit_offset": 4, "reveal_offset": 6, "aggregate_offset": 10},
            "aggregate_offset",
            "inside the window",
        ),
        (
            {"commit_offset": 0, "reveal_offset": 6, "aggregate_offset": 8},
            "commit_offset",
            "greater than or equal",
        ),
    ],
)
def test_window_config_refuses_offsets_out_of_order(offsets, field, words):
    with pytest.raises(ValidationError) as refused:
        WindowConfig(blocks_per_window=10, **offsets)
    errors = refused.value.errors()
    assert [e["loc"] for e in errors] == [(field,)]
    assert words in str(refused.value)


def test_window_config_is_frozen_and_strict():
    with pytest.raises(ValidationError):
        SMALL.commit_offset = 5
    with pytest.raises(ValidationError):
        WindowConfig(blocks_per_window="10", commit_offset=4, reveal_offset=6, aggregate_offset=8)
    with pytest.raises(ValidationError):
        WindowConfig(blocks_per_window=10, commit_offset=4, reveal_offset=6, aggregate_offset=8, tempo=3)


# --- phases and deadlines -----------------------------------------------------------------------


def test_phases_at_the_boundaries_of_a_small_window():
    expected = [Phase.TRAIN] * 4 + [Phase.REVEAL] * 2 + [Phase.VALIDATE] * 2 + [Phase.WEIGHTS] * 2
    assert [phase(SMALL, b) for b in range(10)] == expected
    assert [phase(SMALL, b) for b in range(20, 30)] == expected
    assert [window_of(SMALL, b) for b in (0, 9, 10, 19, 20)] == [0, 0, 1, 1, 2]
    assert (window_start(SMALL, 2), window_end(SMALL, 2)) == (20, 30)
    assert (commit_deadline(SMALL, 2), reveal_deadline(SMALL, 2), aggregate_deadline(SMALL, 2)) == (
        24,
        26,
        28,
    )


def test_a_commitment_counts_only_inside_its_window_before_the_deadline():
    assert [committed_in_time(SMALL, 1, b) for b in (9, 10, 13, 14, 20)] == [False, True, True, False, False]


def test_checkpoint_windows_and_waiting():
    assert [w for w in range(10) if is_checkpoint_window(SMALL, w)] == [0, 3, 6, 9]
    assert blocks_until(5, 12) == 7
    assert blocks_until(12, 12) == 0
    assert blocks_until(20, 12) == 0


@pytest.mark.parametrize("bad", [-1, True, 1.5])
def test_blocks_and_windows_must_be_non_negative_ints(bad):
    with pytest.raises((ValueError, TypeError)):
        window_of(SMALL, bad)
    with pytest.raises((ValueError, TypeError)):
        window_start(SMALL, bad)


@given(window_configs(), st.integers(min_value=0, max_value=10**9))
@settings(max_examples=300, deadline=None)
def test_every_block_lies_in_exactly_one_window_and_one_phase(cfg, block):
    w = window_of(cfg, block)
    assert window_start(cfg, w) <= block < window_end(cfg, w)
    assert window_end(cfg, w) == window_start(cfg, w + 1)
    spans = {
        Phase.TRAIN: (window_start(cfg, w), commit_deadline(cfg, w)),
        Phase.REVEAL: (commit_deadline(cfg, w), reveal_deadline(cfg, w)),
        Phase.VALIDATE: (reveal_deadline(cfg, w), aggregate_deadline(cfg, w)),
        Phase.WEIGHTS: (aggregate_deadline(cfg, w), window_end(cfg, w)),
    }
    holding = [p for p, (start, end) in spans.items() if start <= block < end]
    assert holding == [phase(cfg, block)]


@given(window_configs(), st.integers(min_value=0, max_value=10**6))
@settings(max_examples=200, deadline=None)
def test_deadlines_increase_within_and_across_windows(cfg, w):
    marks = [
        window_start(cfg, w),
        commit_deadline(cfg, w),
        reveal_deadline(cfg, w),
        aggregate_deadline(cfg, w),
        window_end(cfg, w),
        commit_deadline(cfg, w + 1),
    ]
    assert marks == sorted(set(marks))
    assert phase(cfg, commit_deadline(cfg, w) - 1) is Phase.TRAIN
    assert phase(cfg, commit_deadline(cfg, w)) is Phase.REVEAL
    assert phase(cfg, aggregate_deadline(cfg, w)) is Phase.WEIGHTS


# --- challenge seed -----------------------------------------------------------------------------


def test_the_window_seed_is_deterministic_and_depends_on_every_input():
    seed = reveal_seed(BLOCK_HASH, RUN, 7)
    assert len(seed) == 32
    assert seed == reveal_seed(BLOCK_HASH.upper().replace("0X", "0x"), RUN, 7)
    others = {
        reveal_seed("0x" + "ac" * 32, RUN, 7),
        reveal_seed(BLOCK_HASH, "e" * 64, 7),
        reveal_seed(BLOCK_HASH, RUN, 8),
    }
    assert seed not in others and len(others) == 3


@pytest.mark.parametrize(
    "args",
    [
        ("ab" * 32, RUN, 0),
        ("0x", RUN, 0),
        ("0xzz", RUN, 0),
        (BLOCK_HASH, "", 0),
        (BLOCK_HASH, RUN, -1),
    ],
)
def test_the_window_seed_refuses_bad_inputs(args):
    with pytest.raises(ValueError):
        reveal_seed(*args)


# --- who and what is challenged -----------------------------------------------------------------


@pytest.mark.parametrize(
    ("count_or_fraction", "population", "expected"),
    [
        (3, 10, 3),
        (12, 10, 10),
        (0, 10, 0),
        (0.3, 10, 3),
        (0.1, 10, 1),
        (0.25, 3, 1),
        (1.0, 7, 7),
        (0.5, 0, 0),
    ],
)
def test_challenge_count(count_or_fraction, population, expected):
    assert challenge_count(count_or_fraction, population) == expected


@pytest.mark.parametrize("bad", [0.0, 1.5, -1, True, "2"])
def test_challenge_count_refuses_bad_values(bad):
    with pytest.raises((ValueError, TypeError)):
        challenge_count(bad, 10)


@given(st.integers(min_value=0, max_value=10**6), st.integers(min_value=1, max_value=30), st.randoms())
@settings(max_examples=100, deadline=None)
def test_challenged_miners_ignore_order_and_duplicates(i, n, rnd):
    seed = seed_number(i)
    miners = hotkeys(n)
    shuffled = miners + rnd.sample(miners, k=n // 2)
    rnd.shuffle(shuffled)
    chosen = challenged_miners(seed, miners, 0.3)
    assert chosen == challenged_miners(seed, shuffled, 0.3)
    assert len(chosen) == len(set(chosen)) == challenge_count(0.3, n)
    assert set(chosen) <= set(miners)


def test_challenged_miners_refuse_a_bare_string_or_a_bad_seed():
    with pytest.raises(TypeError):
        challenged_miners(seed_number(0), "5miner", 1)
    with pytest.raises(ValueError):
        challenged_miners(b"short", hotkeys(3), 1)


@given(st.integers(min_value=0, max_value=10**6), st.integers(min_value=1, max_value=40), st.data())
@settings(max_examples=100, deadline=None)
def test_challenged_segments_are_distinct_sorted_and_in_range(i, n_segments, data):
    count = data.draw(st.integers(min_value=0, max_value=n_segments))
    segments = challenged_segments(seed_number(i), "5miner", n_segments, count)
    assert segments == sorted(set(segments))
    assert len(segments) == count
    assert all(0 <= s < n_segments for s in segments)
    assert segments == challenged_segments(seed_number(i), "5miner", n_segments, count)
    # one run of consecutive segments (wrapping to 0): at most one start state to reveal
    assert len(run_starts(segments)) <= 1
    if 0 < count < n_segments:
        assert len([s for s in segments if (s + 1) % n_segments not in segments]) == 1


def test_run_starts_are_the_segments_whose_predecessor_is_not_challenged():
    assert run_starts([]) == []
    assert run_starts([0, 1, 2]) == []
    assert run_starts([0, 1, 18, 19]) == [18]
    assert run_starts([3, 4, 7]) == [3, 7]


def test_challenged_segments_refuse_more_than_there_are():
    with pytest.raises(ValueError, match="cannot challenge 5 segments of 4"):
        challenged_segments(seed_number(0), "5miner", 4, 5)


def test_challenges_are_roughly_uniform_over_2000_seeds():
    seeds = [seed_number(i) for i in range(2000)]
    miners = hotkeys(10)
    miner_counts = Counter(m for s in seeds for m in challenged_miners(s, miners, 3))
    share = 2000 * 3 / 10
    assert set(miner_counts) == set(miners)
    assert all(share / 2 <= c <= 2 * share for c in miner_counts.values())
    segment_counts = Counter(x for s in seeds for x in challenged_segments(s, "5miner", 12, 2))
    share = 2000 * 2 / 12
    assert set(segment_counts) == set(range(12))
    assert all(share / 2 <= c <= 2 * share for c in segment_counts.values())


def inputs_of(
    i: int, n_miners: int, challenged_share, replicas: int = 1, segments: int = 1
) -> ChallengeInputs:
    return ChallengeInputs(
        block_hash="0x" + hashlib.sha256(str(i).encode()).hexdigest(),
        run_id=RUN,
        window=i,
        miner_hotkeys=tuple(hotkeys(n_miners)),
        miners_challenged=challenged_share,
        segments_per_miner=segments,
        replicas=replicas,
    )


@given(
    st.integers(min_value=0, max_value=10**6),
    st.integers(min_value=1, max_value=40),
    st.integers(min_value=1, max_value=12),
    st.sampled_from([1, 3, 0.25, 0.5, 1.0]),
    st.integers(min_value=1, max_value=4),
)
@settings(max_examples=150, deadline=None)
def test_the_split_draw_covers_every_challenged_miner_with_balanced_shares(
    i, n_miners, n_validators, share, replicas
):
    inputs = inputs_of(i, n_miners, share, replicas)
    validators = hotkeys(n_validators, "val")
    shares = replay_shares(inputs, validators)
    assert set(shares) == set(validators)
    drawn = challenged(inputs)
    assert len(drawn) == challenge_count(share, n_miners)
    # every challenged miner is replayed, by min(replicas, V) distinct validators; nobody else is
    by_miner = Counter(m for miners in shares.values() for m in miners)
    assert set(by_miner) == set(drawn)
    assert all(c == min(replicas, n_validators) for c in by_miner.values())
    assert all(len(set(miners)) == len(miners) for miners in shares.values())
    # the load is balanced to within one miner, and the same whatever order the validators come in
    loads = [len(miners) for miners in shares.values()]
    assert max(loads) - min(loads) <= 1
    assert replay_shares(inputs, list(reversed(validators)) + validators[:1]) == shares
    assert replayed_by(inputs, validators, validators[0]) == shares[validators[0]]
    assert replayed_by(inputs, validators, "5stranger") == []


@given(
    st.integers(min_value=0, max_value=10**6),
    st.integers(min_value=1, max_value=60),
    st.integers(min_value=1, max_value=12),
    st.integers(min_value=1, max_value=4),
)
@settings(max_examples=150, deadline=None)
def test_every_miner_is_measured_by_replicas_validators_in_balanced_shares(
    i, n_miners, n_validators, replicas
):
    inputs = inputs_of(i, n_miners, 1)
    validators = hotkeys(n_validators, "val")
    shares = score_shares(inputs, validators, replicas)
    assert set(shares) == set(validators)
    by_miner = Counter(m for miners in shares.values() for m in miners)
    assert set(by_miner) == set(inputs.miner_hotkeys)
    assert all(c == min(replicas, n_validators) for c in by_miner.values())
    assert all(len(set(miners)) == len(miners) for miners in shares.values())
    loads = [len(miners) for miners in shares.values()]
    assert max(loads) - min(loads) <= 1
    assert score_shares(inputs, list(reversed(validators)), replicas) == shares
    assert score_shares(inputs, [], replicas) == {}


def test_the_measured_shares_move_between_validators_from_window_to_window():
    mine = {tuple(score_shares(inputs_of(i, 20, 1), hotkeys(4, "val"), 1)["5val0000"]) for i in range(20)}
    assert len(mine) > 1


def test_each_miner_is_challenged_with_the_configured_probability_over_2000_windows():
    counts = Counter(m for i in range(2000) for m in challenged(inputs_of(i, 20, 0.25)))
    assert set(counts) == set(hotkeys(20))
    assert all(0.2 <= c / 2000 <= 0.3 for c in counts.values()), counts
    # and the shares move between validators from window to window
    first = {tuple(replayed_by(inputs_of(i, 20, 0.25), hotkeys(4, "val"), "5val0000")) for i in range(20)}
    assert len(first) > 1


def test_the_split_draw_refuses_bad_replicas_and_a_bare_string():
    with pytest.raises(ValueError, match="replicas must be >= 1"):
        replay_shares(inputs_of(0, 5, 1.0, replicas=0), hotkeys(2, "val"))
    with pytest.raises(TypeError):
        replay_shares(inputs_of(0, 5, 1.0), "5val0000")
    assert replay_shares(inputs_of(0, 5, 1.0), []) == {}


# --- what a miner reveals -----------------------------------------------------------------------


@given(
    st.integers(min_value=0, max_value=10**6),
    st.integers(min_value=1, max_value=12),
    st.sampled_from([1, 2, 0.25, 0.5, 1.0]),
    st.integers(min_value=1, max_value=20),
    st.data(),
)
@settings(max_examples=60, deadline=None)
def test_challenged_miners_reveal_the_segments_every_replaying_validator_replays(
    i, n_miners, share, n_segments, data
):
    inputs = inputs_of(i, n_miners, share, segments=data.draw(st.integers(min_value=1, max_value=n_segments)))
    # each miner committed its own number of whole segments (a slower one fewer)
    committed = {m: data.draw(st.integers(min_value=1, max_value=n_segments)) for m in inputs.miner_hotkeys}
    drawn = set(challenged(inputs))
    for miner in inputs.miner_hotkeys:
        reveal = set(segments_to_reveal(inputs, miner, committed[miner]))
        # one draw per window for what is replayed: the reveal does not depend on the validators
        assert reveal == (set(miner_segments(inputs, miner, committed[miner])) if miner in drawn else set())
        assert len(miner_segments(inputs, miner, committed[miner])) == min(
            inputs.segments_per_miner, committed[miner]
        )
        assert all(0 <= s < committed[miner] for s in reveal)


def test_the_trajectory_sample_is_a_fraction_of_the_pieces_drawn_per_miner_and_window():
    inputs = ChallengeInputs(BLOCK_HASH, RUN, 5, tuple(hotkeys(4)), 1, 1)
    pieces = [f"param/layer{i}.weight#0" for i in range(40)]
    miner = inputs.miner_hotkeys[0]
    sample = trajectory_sample(inputs, miner, pieces, 0.125)
    assert len(sample) == 5 and set(sample) <= set(pieces) and sample == sorted(sample)
    assert trajectory_sample(inputs, miner, list(reversed(pieces)) + pieces[:3], 0.125) == sample
    assert trajectory_sample(inputs, inputs.miner_hotkeys[1], pieces, 0.125) != sample
    later = ChallengeInputs(BLOCK_HASH, RUN, 6, inputs.miner_hotkeys, 1, 1)
    assert trajectory_sample(later, miner, pieces, 0.125) != sample
    assert trajectory_sample(inputs, miner, pieces[:3], 0.125) != []
    assert sorted(trajectory_sample(inputs, miner, pieces, 1.0)) == sorted(pieces)


def test_an_unchallenged_miner_reveals_nothing():
    inputs = ChallengeInputs(BLOCK_HASH, RUN, 5, tuple(hotkeys(8)), 1, 2)
    drawn = set(challenged(inputs))
    missed = sorted(set(inputs.miner_hotkeys) - drawn)
    assert len(missed) == 7
    assert segments_to_reveal(inputs, missed[0], 6) == []
    assert segments_to_reveal(inputs, "5stranger", 6) == []
    assert len(segments_to_reveal(inputs, drawn.pop(), 6)) == 2


# --- pipelined windows --------------------------------------------------------------------------

PIPELINED = WindowConfig(
    blocks_per_window=30, pipelined=True, commit_offset=30, reveal_offset=50, aggregate_offset=58
)


@st.composite
def pipelined_configs(draw):
    length = draw(st.integers(min_value=4, max_value=500))
    commit = draw(st.integers(min_value=1, max_value=length))
    reveal = draw(st.integers(min_value=commit + 1, max_value=2 * length - 2))
    aggregate = draw(st.integers(min_value=reveal + 1, max_value=min(2 * length - 1, reveal + length - 1)))
    return WindowConfig(
        blocks_per_window=length,
        pipelined=True,
        commit_offset=commit,
        reveal_offset=reveal,
        aggregate_offset=aggregate,
    )


@pytest.mark.parametrize(
    ("offsets", "field", "words"),
    [
        ({"commit_offset": 31, "reveal_offset": 50, "aggregate_offset": 58}, "commit_offset", "window's end"),
        ({"commit_offset": 30, "reveal_offset": 50, "aggregate_offset": 60}, "aggregate_offset", "2 x"),
        (
            {"commit_offset": 10, "reveal_offset": 20, "aggregate_offset": 50},
            "aggregate_offset",
            "reveal_offset +",
        ),
    ],
)
def test_pipelined_offsets_reach_into_the_next_window_only_so_far(offsets, field, words):
    with pytest.raises(ValidationError) as refused:
        WindowConfig(blocks_per_window=30, pipelined=True, **offsets)
    errors = refused.value.errors()
    assert [e["loc"] for e in errors] == [(field,)]
    assert words in errors[0]["msg"]
    with pytest.raises(ValidationError, match="pipelined windows may reach into the next"):
        WindowConfig(blocks_per_window=30, commit_offset=30, reveal_offset=50, aggregate_offset=58)


def test_pipelined_windows_train_one_aggregate_behind():
    assert [base_index(SMALL, w, 2) for w in range(2, 6)] == [2, 3, 4, 5]
    assert [base_index(PIPELINED, w, 2) for w in range(2, 6)] == [2, 2, 3, 4]


def test_pipelined_activities_overlap_the_previous_windows_reveal_and_checks():
    start = window_start(PIPELINED, 7)
    assert activities(PIPELINED, start + 5) == [(6, Phase.REVEAL), (7, Phase.TRAIN)]
    assert activities(PIPELINED, start + 20) == [(6, Phase.VALIDATE), (7, Phase.TRAIN)]
    assert activities(PIPELINED, start + 28) == [(7, Phase.TRAIN)]
    assert activities(SMALL, 25) == [(2, Phase.REVEAL)]


@given(pipelined_configs(), st.integers(min_value=2, max_value=10**6))
@settings(max_examples=300, deadline=None)
def test_every_pipelined_window_has_a_public_base_when_it_starts(cfg, w):
    # window w trains from M_{w-1}, which applies window w - 2's aggregate
    assert aggregate_deadline(cfg, w - 2) <= window_start(cfg, w)
    # a validator checking window w at its reveal deadline can reach M_w, its aggregate's base
    assert aggregate_deadline(cfg, w - 1) <= reveal_deadline(cfg, w)
    assert commit_deadline(cfg, w) <= window_start(cfg, w + 1)


@pytest.mark.parametrize("config", ["cpu-localnet", "gpu-subnet"])
def test_the_read_and_score_patience_fall_in_order_inside_the_validate_phase(config):
    cfg = load_run_config(shipped_config_path(config)).windows
    for w in (0, 7):
        reveal, aggregate = reveal_deadline(cfg, w), aggregate_deadline(cfg, w)
        assert reveal < read_patience(cfg, w) < score_patience(cfg, w) < aggregate
        assert aggregate - score_patience(cfg, w) >= 2  # room to score, report and aggregate


# --- claims and probation -----------------------------------------------------------------------


def test_probation_is_the_first_windows_whose_roster_holds_the_hotkey():
    cfg = WindowConfig(blocks_per_window=10, commit_offset=5, reveal_offset=7, aggregate_offset=9)
    registered = 23  # in window 2: window 3's roster (block 29) is the first to hold it
    assert roster_block(cfg, 3) >= registered > roster_block(cfg, 2)
    assert [w for w in range(8) if on_probation(cfg, w, registered, 2)] == [3, 4]
    assert [w for w in range(8) if on_probation(cfg, w, 29, 1)] == [3]  # registered in the roster block
    assert not any(on_probation(cfg, w, registered, 0) for w in range(8))


def test_a_miner_on_probation_is_challenged_whatever_the_floor_draws():
    base = inputs_of(7, 12, 1)
    missed = sorted(set(base.miner_hotkeys) - set(challenged(base)))
    assert len(missed) == 11
    on = dataclasses.replace(base, probation=(missed[0],))
    assert set(challenged(on)) == set(challenged(base)) | {missed[0]}
    assert challenge_runs(on, missed[0]) == 1 and segments_to_reveal(on, missed[0], 6) != []


def test_a_claim_beyond_the_reference_draws_more_runs_and_every_node_draws_the_same():
    miners = tuple(hotkeys(8))

    def inputs(i: int, claimed: int) -> ChallengeInputs:
        return dataclasses.replace(inputs_of(i, 8, 1), claims=((miners[0], claimed),), reference_segments=10)

    # 1/8 of the miners challenged: a claim of 10 draws the floor's run only, one of 90 eight
    # times the reference, so 1/8 + 1/8 · 80 / 10 = 1.125 runs a window in expectation
    small = [challenge_runs(inputs(i, 10), miners[0]) for i in range(800)]
    large = [challenge_runs(inputs(i, 90), miners[0]) for i in range(800)]
    assert max(small) == 1 and 0.07 <= sum(small) / 800 <= 0.18
    assert 1.0 <= sum(large) / 800 <= 1.25 and max(large) == 2
    for i in range(20):
        a, b = inputs(i, 90), dataclasses.replace(inputs(i, 90), miner_hotkeys=tuple(reversed(miners)))
        assert challenge_runs(a, miners[0]) == challenge_runs(b, miners[0])
        runs = challenge_runs(a, miners[0])
        assert len(miner_segments(a, miners[0], 90)) == max(1, runs)
