"""Bounded chaos on a localnet: the small version of bench/chaos.py (which writes
docs/reliability.md with 20 kills over 8 windows), run by `support.chaos_run` beside the other tests.

3 miners and 2 validators on the pipelined cpu-localnet config at 0.7 s per block, 5 windows.
7 SIGKILLs at moments drawn from a fixed seed, every (role, phase) pair among them, each followed
at once by a restart with the same command; the store unreachable for one window; the chain
locked for 5 s. The network runs once for the session; each check is its own test, so a failure
names the check. Runs in about 2.5 minutes on 2 cores.

Checks that a bug in code this test does not own can fail are marked xfail (not strict: a chaos
run's timing decides whether a kill lands where the bug bites), each with the bug in its reason;
docs/reliability.md ("Bugs found") has the evidence and suggested fixes. The planner's own rules
(reproducible, every phase, no kill near a disruption) are checked without a network.
"""

from __future__ import annotations

import random

import pytest
from support.chaos_run import KILLS, SEED, chaos_options

from bench.chaos import MARGIN_BLOCKS, PHASES, ROLES, phase_label, plan, plan_for_seed
from distrai.run import load_run_config, shipped_config_path
from distrai.windows import activities

NODES = {
    "validator0": "validator",
    "validator1": "validator",
    "miner0": "miner",
    "miner1": "miner",
    "miner2": "miner",
}


@pytest.fixture(scope="module")
def windows_config():
    return load_run_config(shipped_config_path("cpu-localnet")).windows


# -- the plan, without a network -------------------------------------------------------------------


def test_a_seed_gives_one_plan(windows_config, tmp_path):
    first = plan_for_seed(windows_config, chaos_options(tmp_path), NODES, 1)
    again = plan_for_seed(windows_config, chaos_options(tmp_path), NODES, 1)
    other = plan_for_seed(windows_config, chaos_options(tmp_path, seed=SEED + 1), NODES, 1)
    assert first == again
    assert first != other


@pytest.mark.parametrize("kills,windows", [(7, 5), (20, 8)])
def test_the_plan_hits_every_role_in_every_phase_away_from_the_disruptions(
    windows_config, tmp_path, kills, windows
):
    cfg = windows_config
    for seed in range(20):
        events = plan_for_seed(
            cfg, chaos_options(tmp_path, kills=kills, windows=windows, seed=seed), NODES, 1
        )
        killed = [e for e in events if e.kind == "kill"]
        assert len(killed) == kills
        hit = {(NODES[e.node], phase_label(activities(cfg, int(e.block)))) for e in killed}
        assert hit >= {(role, phase) for role in ROLES for phase in PHASES}, (seed, hit)
        assert all(1 < e.block / cfg.blocks_per_window < 1 + windows for e in killed)
        for disruption in (e for e in events if e.kind != "kill"):
            end = disruption.block + disruption.seconds / 0.7
            assert not any(disruption.block - MARGIN_BLOCKS < e.block < end + MARGIN_BLOCKS for e in killed)
        moments = sorted(e.block for e in killed)
        assert min(b - a for a, b in zip(moments, moments[1:], strict=False)) >= 2


def test_a_plan_that_cannot_fit_says_so(windows_config, tmp_path):
    with pytest.raises(ValueError, match="no free block|no room|at least 2"):
        plan(windows_config, chaos_options(tmp_path, kills=40, windows=2), NODES, 1, random.Random(0))


# -- the run ----------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def result(chaos_run):
    print("\n".join(chaos_run.said))
    if chaos_run.error is not None:
        raise chaos_run.error
    outcome = chaos_run.outcome
    for check in outcome.checks:
        print(f"{'pass' if check.ok else 'FAIL'}  {check.name}: {check.summary}")
        for line in check.details[:12]:
            print(f"        {line}")
    print(f"chaos run: {outcome.seconds:.0f} s")
    return outcome


def explain(check) -> str:
    return f"{check.name}: {check.summary}\n" + "\n".join(f"  - {d}" for d in check.details)


def test_every_phase_was_hit_by_a_kill(result):
    check = result.check("every phase hit")
    assert check.ok, explain(check)
    assert len(result.kills) == KILLS
    assert {k.role for k in result.kills} == set(ROLES)


# Checks that must hold. Each runs on the one chaos run of the module.
HOLDS = [
    "processes",
    "run completed",
    "validator state",
    "miner residual chain",
    "one global model",
    "store objects whole",
    "no residual chain reported broken",
    "store outage survived",
    "store outage logged",
    "chain stall survived",
    "chain stall logged",
    "no temp file left",
]

# Checks that fail on bugs found by this test in code it does not own (docs/reliability.md, "Bugs
# found"; B2 and B4 were fixed after commit 5681688, B5 by the file store's sweep of temp files, and
# their checks moved to HOLDS). Not strict: a chaos run's timing decides whether a kill lands where
# a bug bites, so a check may pass by luck; an XPASS that keeps coming after a fix says its marker
# can go.
KNOWN_BUGS = {
    "reveals in flight resumed": (
        "BUG B1 miners/miner.py Miner.recover(): a miner killed mid-upload restarts in 11-15 s on 2 cores, "
        "longer than what is left of the 16-block reveal phase (11 s at 0.7 s/block), so its reveal is lost "
        "(the restarted miner logs the drop)"
    ),
    "no honest miner marked fraud": (
        "BUG B1 (above): a reveal lost to a crash is hiding when the miner is challenged, and the miner is "
        "barred; at 0.7 s blocks a restart takes about as long as the whole reveal phase"
    ),
}


@pytest.mark.parametrize("name", HOLDS)
def test_check_holds(result, name):
    check = result.check(name)
    assert check.ok, explain(check)


@pytest.mark.parametrize(
    "name",
    [
        pytest.param(name, marks=pytest.mark.xfail(reason=why, strict=False))
        for name, why in KNOWN_BUGS.items()
    ],
)
def test_check_blocked_by_a_known_bug(result, name):
    check = result.check(name)
    assert check.ok, explain(check)


def test_every_check_is_asserted(result):
    assert {c.name for c in result.checks} == {"every phase hit", *HOLDS, *KNOWN_BUGS}
