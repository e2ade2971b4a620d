"""The arithmetic of docs/protocol.md, "Why a claim beyond the work does not pay"
(`validators.deterrence`), against a simulation of the rule itself: the window's challenge drawn by
`distrai.protocol.windows` from random block hashes, a cheater caught when a replayed segment is one
it did not train, its pay folded by `validators.pay`, a fresh hotkey at once after each catch. Then
the shipped GPU config: every claim beyond the work loses, and a copier earns nothing."""

from __future__ import annotations

import hashlib
import math

import pytest

from distrai.protocol.run import load_run_config, shipped_config_path
from distrai.protocol.windows import ChallengeInputs, challenge_runs, miner_segments
from validators.deterrence import (
    Rule,
    catch_probability,
    pay_per_window,
    pay_ratio,
    runs_distribution,
    simulate,
)

MINERS = 4
"""the population: the floor challenges one of them a window, q = 1/4"""
RULE = Rule(floor=1 / MINERS, reference=4, probation_windows=1, maturity=4, alpha=0.5)


def test_runs_are_drawn_as_the_rule_says_over_2000_windows():
    """The floor's run with probability q, one run always on probation, and beyond the reference
    q · (claimed − reference) / reference more in expectation."""
    for claimed, probation in ((4, False), (4, True), (13, False), (40, False)):
        drawn = []
        for w in range(2000):
            inputs = ChallengeInputs(
                block_hash="0x" + hashlib.sha256(f"runs/{w}".encode()).hexdigest(),
                run_id="run",
                window=w,
                miner_hotkeys=tuple(f"5m{i}" for i in range(MINERS)),
                miners_challenged=1,
                segments_per_miner=1,
                claims=(("5m0", claimed),),
                reference_segments=RULE.reference,
                probation=("5m0",) if probation else (),
            )
            drawn.append(challenge_runs(inputs, "5m0"))
            assert len(miner_segments(inputs, "5m0", claimed)) == min(max(1, drawn[-1]), claimed)
        expected = sum(runs * p for runs, p in runs_distribution(RULE, claimed, probation))
        sd = math.sqrt(
            sum((runs - expected) ** 2 * p for runs, p in runs_distribution(RULE, claimed, probation))
        )
        assert abs(sum(drawn) / 2000 - expected) <= 4 * sd / math.sqrt(2000) + 1e-9, (claimed, probation)


@pytest.mark.parametrize(
    ("trained", "claimed"),
    [
        (2, 4),  # half of an ordinary claim faked: caught by the floor's run half the times it is drawn
        (4, 12),  # three times the reference: two more runs in expectation
        (0, 4),  # a copier: trains nothing
    ],
)
def test_the_arithmetic_matches_a_simulation_of_the_rule(trained, claimed):
    for lag in (0, 1):
        run = simulate(RULE, MINERS, trained, claimed, 6000, lag=lag)
        expected_pay = pay_per_window(RULE, trained, claimed, lag=lag)
        assert run.pay_per_window == pytest.approx(expected_pay, rel=0.12, abs=0.02 * claimed), (lag, run)
    # the catch rate: a life of one probation window and later windows, the renewal's catches a window
    first, later = (catch_probability(RULE, trained, claimed, p) for p in (True, False))
    life = 1 + (1 - first) / later
    assert run.catches / run.windows == pytest.approx(1 / life, rel=0.12), (run, 1 / life)


def test_per_segment_draws_make_a_larger_claim_likelier_to_be_caught():
    """Beyond the reference, each faked segment adds to the catch: claiming H of an H100's window
    is caught almost every window, however little the miner fakes per segment claimed."""
    gpu = rule_of("gpu-subnet")
    assert catch_probability(gpu, 45, 46) == pytest.approx(gpu.floor / 46, rel=1e-9)  # the floor's run alone
    assert catch_probability(gpu, 46, 92) > 30 * catch_probability(
        gpu, 45, 46
    )  # a run more, half of it faked
    assert catch_probability(gpu, 46, 400) > 0.45
    no_extra = Rule(gpu.floor, None, gpu.probation_windows, gpu.maturity, gpu.alpha)
    assert catch_probability(no_extra, 46, 400) < gpu.floor  # per miner only, it saturates at q


def rule_of(name: str) -> Rule:
    config = load_run_config(shipped_config_path(name))
    return Rule(
        floor=16 / 256,  # `challenge_miners` = 16 of the 256 miners a subnet holds at most
        reference=config.verification.reference_segments,
        probation_windows=config.verification.probation_windows,
        maturity=config.scoring.maturity_windows,
        alpha=config.scoring.ema_alpha,
    )


TRAINED = [1, 2, 3, 5, 8, 12, 23, 34, 45, 46, 92, 184, 368]
"""segments a window, from a GPU of a fiftieth of an H100 to an 8-GPU miner (an H100: 46)"""


def claims_of(trained: int) -> list[int]:
    return sorted(
        {
            c
            for c in (trained + 1, trained + 2, 2 * trained, 4 * trained, 46, 47, 60, 92, 200, 400)
            if trained < c <= 400
        }
    )


def test_on_the_gpu_config_every_claim_beyond_the_work_loses_even_with_a_fresh_hotkey():
    gpu = rule_of("gpu-subnet")
    worst = max(
        (pay_ratio(gpu, n, c, lag, honest), n, c)
        for n in TRAINED
        for c in claims_of(n)
        for lag in (0, 1)
        for honest in (0, gpu.probation_windows)
    )
    assert worst[0] < 0.95, worst
    # a copier, which trains nothing, earns nothing: caught in its first window on probation; one that
    # works honestly through its probation first earns under 5% of an H100's share
    assert max(pay_per_window(gpu, 0, c) for c in (1, 46, 400)) == 0.0
    assert pay_per_window(gpu, 0, 46, honest_windows=gpu.probation_windows, honest_trained=46) / 46 < 0.05


def test_without_maturing_pay_the_same_claims_pay_so_the_check_above_can_fail():
    gpu = rule_of("gpu-subnet")
    bare = Rule(gpu.floor, gpu.reference, gpu.probation_windows, 0, gpu.alpha)
    assert pay_ratio(bare, 1, 46, 1, gpu.probation_windows) > 5
    assert pay_per_window(bare, 0, 46, honest_windows=2, honest_trained=46) / 46 > 0.5
