"""The tables of bench/verification.py (docs/verification.md) from a tiny adversary run of the real
record types: validators' signed report bodies (`WindowReport`) and miners' metrics lines
(`MetricsLine`), as the bench reads them from its networks. Each table follows from those records:
an adversary's rejections by first failed check (a ban counts as a rejection, not as a check), its
share of the emission against the honest miners', the honest miners' false rejections, each
validator's replay seconds over the miners' training seconds of the same windows, the bytes an honest
miner reveals, and the held-out loss with and without the damaging adversaries. The odds of catching
a quarter-faker are the closed form of docs/verification.md, and the rate measured over the
project's own challenge draws agrees with it.

The verdicts of its Targets follow from the same rows: met, MISSED, or not measured where the
measurement is missing or too small to judge (fewer than 200 honest verifications, a validator that
replayed nothing). The bench's `--quick` run is three local networks (17 adversaries, two honest
miners, two validators, 120-s windows), minutes and far more CPU than a test of the suite may take:
tests/test_bench_verification_e2e.py launches the suite's adversary network through the bench and
writes its report from it. Here: the plan of its three networks, and the run of one whose nodes are
given a setting they cannot read: the bench refuses it, naming each node. Its `--help` is parsed in
this process.
"""

from __future__ import annotations

import dataclasses
import math

import pytest
from support.bench_jobs import bench_module
from support.metrics_lines import line, reveal_record, train_record

from distrai.protocol.run import load_run_config, shipped_config_path
from distrai.wire.window_documents import MinerEntry, WindowReport
from miners.adversaries import ADVERSARIES

V = bench_module("verification")
RUN = "ab" * 32
WINDOWS = [1, 2]


def hotkey(name: str) -> str:
    return f"5{name}".ljust(48, "x")


HOTKEYS = {
    name: hotkey(name) for name in ("validator0", "validator1", "miner0", "miner1", "adversary-lazy")
} | {"adversary-badsig": hotkey("adversary-badsig")}
BEHAVIOUR = {
    HOTKEYS["miner0"]: "honest",
    HOTKEYS["miner1"]: "honest",
    HOTKEYS["adversary-lazy"]: "lazy",
    HOTKEYS["adversary-badsig"]: "badsig",
}


def entry(reason: str | None, replayed: bool, seconds: float = 0.0, steps: float = 0.0) -> MinerEntry:
    verdicts = {"manifest": "pass", "update": "pass"} | ({"replay": "pass"} if replayed else {})
    if reason is not None:
        verdicts[reason.split(":", 1)[0]] = reason
    numbers = {"replay_seconds": seconds, "replay_steps": steps} if replayed else {}
    return MinerEntry(
        uid=1, verdicts=verdicts, numbers=numbers, score=0.0 if reason else 640.0, reason=reason
    )


def report(window: int, validator: str, false_rejection: str | None = None) -> WindowReport:
    """A validator's report: both honest miners replayed (1.5 s and 5 steps each), `lazy` passing its
    first window (not challenged) and caught replaying its second, `badsig` refused its manifest and
    then barred."""
    lazy = entry(None, False) if window == 1 else entry("replay: segment 3 ends elsewhere", True, 0.5, 5)
    badsig = entry("manifest: bad signature" if window == 1 else "banned: barred until window 11", False)
    return WindowReport(
        run_id=RUN,
        window=window,
        validator=HOTKEYS[validator],
        observed_block=120 * window + 95,
        miners={
            HOTKEYS["miner0"]: entry(None, True, 1.5, 5),
            HOTKEYS["miner1"]: entry(false_rejection, True, 1.5, 5),
            HOTKEYS["adversary-lazy"]: lazy,
            HOTKEYS["adversary-badsig"]: badsig,
        },
        refused=[],
    )


def run_result(name: str, heldout: list[float], false_rejection: str | None = None):
    """Windows 1 and 2 checked by both validators; window 0's training lies outside them."""
    metrics = {
        HOTKEYS[miner]: [line(0, train_record(train_seconds=99.0, steps_trained=999), HOTKEYS[miner])]
        + [
            line(w, train_record(train_seconds=50.0, steps_trained=160, bytes_sent=160_000), HOTKEYS[miner])
            for w in WINDOWS
        ]
        + [
            line(w, reveal_record(revealed_bytes=size), HOTKEYS[miner])
            for w, size in zip(WINDOWS, sizes, strict=True)
        ]
        for miner, sizes in (("miner0", (10_000_000, 11_000_000)), ("miner1", (12_000_000, 13_000_000)))
    }
    return V.RunResult(
        name=name,
        windows=WINDOWS,
        reports=[
            report(w, v, false_rejection if w == 2 and v == "validator0" else None)
            for w in WINDOWS
            for v in ("validator0", "validator1")
        ],
        hotkeys=HOTKEYS,
        emission={
            HOTKEYS["miner0"]: 0.4,
            HOTKEYS["miner1"]: 0.4,
            HOTKEYS["adversary-lazy"]: 0.1,
            HOTKEYS["adversary-badsig"]: 0.0,
        },
        miner_metrics=metrics,
        heldout=heldout,
        seconds=100.0,
        behaviour=BEHAVIOUR,
    )


def test_each_adversary_row_counts_its_rejections_by_first_failed_check():
    rows = V.adversary_rows(run_result("adversary run", [5.6, 5.0, 4.5]))
    assert [row[0] for row in rows] == ["lazy", "badsig"]  # in the order of `ADVERSARIES`, present only
    lazy, badsig = rows
    # caught by, rejections by check, rejected, share rejected, share of all emission, vs mean honest
    assert lazy[1:] == ["replay", "replay ×2", "2/4", "50%", f"{100 * 0.1 / 0.9:.2f}%", "25.00%"]
    assert badsig[1:] == ["manifest", "manifest ×2", "4/4", "100%", "0.00%", "0.00%"]
    assert len(V.ADVERSARY_HEADERS) == len(lazy)


def test_honest_rows_count_false_rejections_and_replays():
    clean = run_result("no adversaries", [5.6, 5.0, 4.5])
    wronged = run_result("adversary run", [5.6, 5.0, 4.5], false_rejection="replay: 1.2e-07 from the end")
    assert V.honest_counts([wronged, clean]) == [
        ["adversary run", "8", "8", "1", "replay: 1.2e-07 from the end"],
        ["no adversaries", "8", "8", "0", "—"],
    ]
    assert len(V.HONEST_HEADERS) == 5


def test_the_cost_is_each_validators_replay_over_the_training_of_the_same_windows():
    rows, fractions = V.cost_rows(run_result("adversary run", [5.6, 5.0, 4.5]))
    # per validator and window: two honest replays of 1.5 s and lazy's of 0.5 s in window 2;
    # training: 2 miners × 2 windows × 50 s and 160 steps (window 0's 99 s lie outside)
    seconds, steps = 2 * 2 * 1.5 + 0.5, 2 * 2 * 5 + 5
    assert fractions == {
        "validator0": pytest.approx(seconds / 200.0),
        "validator1": pytest.approx(seconds / 200.0),
    }
    row = ["6.5", "200.0", f"{100 * seconds / 200:.2f}%", f"{steps} / 640 = {100 * steps / 640:.2f}%"]
    assert rows == [["validator0", *row], ["validator1", *row]]
    assert len(V.COST_HEADERS) == len(rows[0])


def test_revealed_bytes_are_the_honest_miners_medians():
    assert V.revealed_bytes(run_result("adversary run", [5.6])) == (11_500_000, 160_000)


def test_the_loss_table_compares_the_same_windows_and_counts_what_the_damaging_passed():
    with_30 = run_result("30% adversarial", [5.6, 5.0, 4.6])
    honest_only = run_result("no adversaries", [5.6, 5.0, 4.5, 4.1])
    text = V.loss_table(with_30, honest_only)
    rows = [line.split(" | ") for line in text.splitlines() if line[:3] in ("| 0", "| 1", "| 2", "| 3")]
    assert [row[0].strip("| ") for row in rows] == ["0", "1", "2"]  # the shorter curve's windows
    assert rows[2][3].strip(" |") == f"{4.6 / 4.5:.4f}"
    assert text.endswith("that passed (not challenged, and useful enough): scaled 0/0, noise 0/0, lazy 2/4.")


def test_the_odds_of_catching_a_quarter_faker():
    config = load_run_config(V.BENCH_CONFIG)
    n = config.train.inner_steps // config.train.segment_steps
    faked = round(V.FAKED_SHARE * n)
    for per_miner, share in ((1, 1.0), (2, 1.0), (3, 0.5)):
        p = share * (faked + per_miner - 1) / n  # docs/verification.md's p = q · (m + s − 1) / n
        expected = 1 - (1 - p) ** V.CATCH_WINDOWS
        assert V.catch_probability(n, faked, per_miner, share, V.CATCH_WINDOWS) == pytest.approx(expected)
    miners, trials = 2 + len(V.ADVERSARIES), 2000
    predicted = V.catch_probability(n, faked, config.verification.challenge_segments, 1.0, V.CATCH_WINDOWS)
    measured = V.measured_catch_rate(config, miners, trials)
    assert abs(measured - predicted) < 5 * math.sqrt(predicted * (1 - predicted) / trials)


def test_the_cost_of_a_validator_that_replayed_nothing_is_not_measured():
    run = run_result("adversary run", [5.6])
    for r in run.reports:
        for e in r.miners.values():
            e.numbers.pop("replay_seconds", None)
            e.numbers.pop("replay_steps", None)
    _, fractions = V.cost_rows(run)
    assert fractions.keys() == {"validator0", "validator1"}
    assert all(math.isnan(f) for f in fractions.values())


def verdicts(honest, fractions, predicted=0.995, measured=0.993):
    return [t.met for t in V.targets(honest, fractions, predicted, measured)]


def test_each_target_is_met_missed_or_not_measured():
    enough = [["adversary run", "150", "150", "0", "—"], ["no adversaries", "60", "60", "0", "—"]]
    cheap = {"validator0": 0.003, "validator1": 0.049}
    assert verdicts(enough, cheap) == [True, True, True, True]
    # one false rejection misses however few verifications there were
    wronged = [["adversary run", "12", "12", "1", "replay: 1.2e-07 from the end"]]
    assert verdicts(wronged, cheap)[0] is False
    # no false rejection over too few verifications judges nothing
    few = [["adversary run", "199", "199", "0", "—"]]
    assert verdicts(few, cheap)[0] is None
    # a validator over 5% misses; one that replayed nothing is not measured (not met by construction)
    assert verdicts(enough, {"validator0": 0.051, "validator1": math.nan})[1:3] == [False, None]
    # the catch target takes the lower of the computed and measured odds
    assert verdicts(enough, cheap, predicted=0.995, measured=0.989)[-1] is False
    assert verdicts(enough, cheap, predicted=0.989, measured=0.995)[-1] is False


def test_the_target_lines_say_the_verdict_after_the_measurement():
    lines = [
        t.line() for t in V.targets([["r", "206", "206", "0", "—"]], {"validator1": 0.0027}, 0.9437, 0.9431)
    ]
    assert lines == [
        "- Honest false rejections: 0 over 206 honest window-verifications; target 0 over at least 200: met.",
        "- Verification cost of validator1: 0.27% of the miners' training time; target ≤ 5%: met.",
        "- Catching a quarter-faker within 10 windows: 0.9437 computed, 0.9431 measured; target ≥ 0.99: MISSED.",
    ]
    assert V.Target("x", None).line() == "- x: not measured."


def test_help_names_the_quick_run_and_the_output(capsys):
    with pytest.raises(SystemExit) as done:
        V.main(["--help"])
    assert done.value.code == 0
    shown = capsys.readouterr().out
    assert "--quick" in shown and "--output" in shown and "python bench/verification.py --quick" in shown


@pytest.mark.parametrize("plan", [V.Plan(), V.QUICK], ids=["full", "quick"])
def test_the_plan_is_the_adversary_run_and_two_loss_runs_apart_only_in_the_damaging_adversaries(plan):
    adversary_run, with_30, honest_only = V.networks(plan)
    assert (adversary_run.config, adversary_run.honest, adversary_run.windows) == (
        V.BENCH_CONFIG,
        plan.honest,
        plan.windows,
    )
    assert adversary_run.adversaries == tuple(ADVERSARIES)
    # the loss table compares the global model with and without the damaging ones, nothing else apart
    assert dataclasses.replace(with_30, name="", folder="", adversaries=()) == dataclasses.replace(
        honest_only, name="", folder=""
    )
    assert with_30.config == shipped_config_path("cpu-localnet")
    assert (with_30.honest, with_30.windows) == (plan.loss_honest, plan.loss_windows)
    assert with_30.adversaries == V.DAMAGING and honest_only.adversaries == ()
    assert set(V.DAMAGING) <= set(ADVERSARIES)
    assert len({n.name for n in (adversary_run, with_30, honest_only)}) == 3
    assert len({n.folder for n in (adversary_run, with_30, honest_only)}) == 3


def test_the_full_plans_loss_run_is_the_30_percent_adversarial_one_it_is_named():
    _, with_30, _ = V.networks(V.Plan())
    assert with_30.name == "30% adversarial"
    assert len(with_30.adversaries) / (with_30.honest + len(with_30.adversaries)) == pytest.approx(0.3)


def test_a_network_whose_nodes_exit_with_an_error_is_refused_with_their_names(tmp_path, monkeypatch):
    """`run_network`, which `run_all` runs for each planned network: launched, waited for, and refused
    by `finished` when its nodes did not all exit cleanly, naming each. Here every node inherits a
    setting it cannot read (`DISTRAI_DEVICE_MEMORY_GIB`, which the local network passes no flag
    for), so each exits at once. (The quick plan's first network has 21 nodes: the same refusal of
    it costs 5 CPU-s more.)"""
    monkeypatch.setenv("DISTRAI_DEVICE_MEMORY_GIB", "lots")
    spec = V.NetworkPlan("bad run", "net", shipped_config_path("cpu-localnet"), 1, ("lazy",), 1)
    logs = tmp_path / "net" / "logs"
    names = ["validator0", "validator1", "miner0", "adversary-lazy"]
    with pytest.raises(SystemExit) as refused:
        V.run_network(spec, tmp_path)
    assert str(refused.value) == f"bad run: {names} exited with an error; logs in {logs}"
    assert all("--device.memory_gib must be a number" in (logs / f"{n}.log").read_text() for n in names)
