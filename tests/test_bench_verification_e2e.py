"""bench/verification.py's reading and tables on a real network: the suite's adversary network
(`support.adversary_net`: 3 honest miners and one miner per adversary type as processes through the
real entry points, two validators) has the shape of the bench's adversary run, so the bench's
`network_result` reads it as it reads its own (the validators' signed reports, the chain's emission,
the miners' metrics, the held-out loss of each window's global model) and its tables and Targets are
built from what the nodes really wrote. A reworded report, a renamed metrics field or a reason
whose first word is no longer its check fails here, not in the next half-hour bench run.

The adversary network is the bench's own, from its `network` (with the suite's config and windows, its
nodes forked from a warm interpreter), set up and started by its `launch` and read by its `finished`;
its report is what the bench writes of three runs, this network standing for each. The bench's plan
of three networks (`networks`, `run_all`) and its wait for a network (`run_network`) run in
tests/test_bench_verification.py, to a network whose nodes exit at once."""

from __future__ import annotations

import math
import re

import pytest
from support.adversary_net import CONFIG, HONEST, NAME, WINDOWS
from support.bench_jobs import bench_module

from distrai.protocol.run import load_run_config
from miners.adversaries import ADVERSARIES, EXPECTED_CHECK

V = bench_module("verification")


@pytest.fixture(scope="module")
def run(adversary_net):
    assert adversary_net.finished, "the network did not finish its windows"
    return V.finished(NAME, adversary_net.net, seconds=math.nan)


def test_the_bench_reads_every_miner_and_both_validators(run, adversary_net):
    assert run.windows, "no window was reported"
    assert {r.validator for r in run.reports} == {
        hk for name, hk in run.hotkeys.items() if name.startswith("validator")
    }
    assert sorted(run.behaviour.values()) == sorted(["honest"] * 3 + list(ADVERSARIES))
    honest = [hk for hk, b in run.behaviour.items() if b == "honest"]
    assert all(run.miner_metrics.get(hk) for hk in honest), "an honest miner's metrics were not read"
    assert len(run.heldout) == len(run.windows) + 1 and all(math.isfinite(x) for x in run.heldout)


def test_each_adversary_row_names_its_check_and_shows_it_unpaid(run):
    rows = {row[0]: row for row in V.adversary_rows(run)}
    assert rows.keys() == set(ADVERSARIES)
    for kind, row in rows.items():
        caught_by, by_check, rejected = row[1], row[2], row[3]
        assert caught_by == EXPECTED_CHECK[kind]
        assert caught_by in by_check, (kind, by_check)
        assert int(rejected.split("/")[0]) > 0, (kind, rejected)
        assert float(row[6].rstrip("%")) < 1.0, (kind, row[6])  # of the mean honest miner's emission


def test_the_honest_miners_are_replayed_and_never_rejected(run):
    [(name, verifications, replayed, false, reasons)] = V.honest_counts([run])
    assert name == "adversary run" and int(verifications) > 0
    assert int(replayed) == int(verifications)  # the network's config challenges every segment
    assert (false, reasons) == ("0", "—")


def test_each_validators_cost_and_the_reveal_are_measured(run):
    rows, fractions = V.cost_rows(run)
    assert {row[0] for row in rows} == set(fractions) == {"validator0", "validator1"}
    assert all(0 < f < math.inf for f in fractions.values()), fractions
    revealed, update = V.revealed_bytes(run)
    assert revealed > 0 and update > 0
    verdicts = V.targets(V.honest_counts([run]), fractions, 0.99, 0.99)
    assert verdicts[0].met is not False  # no false rejection; judged once there are 200
    assert all(t.met is not None for t in verdicts[1:])  # each cost was measured


def test_the_report_has_every_section_and_a_verdict_per_target(run):
    """What `bench/verification.py` writes above its kept notes, from this network standing for its
    three runs (the suite runs one; a plan of the suite's shape, 200 draws of the catch odds)."""
    plan = V.Plan(honest=HONEST, windows=WINDOWS, loss_honest=HONEST, loss_windows=WINDOWS, catch_trials=200)
    found = V.findings(V.Runs(run, run, run), plan, load_run_config(CONFIG))
    machine = V.Machine("a CPU", 2, "2.x", "3.11")
    text = V.markdown(
        found, V.Runs(run, run, run), plan, "python bench/verification.py --quick", 61.0, machine
    )
    headings = re.findall(r"^## (.+)$", text, re.M)
    assert headings == [
        "Adversaries",
        "Honest miners",
        "Validator cost",
        "The global model with 30% adversarial miners",
        "Catching a miner that fakes a quarter of its segments",
        "Targets",
    ]
    assert "python bench/verification.py --quick" in text and "total wall time: 61 s" in text
    assert f"windows {run.windows[0]}–{run.windows[-1]}" in text
    for kind in V.ADVERSARIES:
        assert re.search(rf"^\| {kind} \| {V.EXPECTED_CHECK[kind]} \|", text, re.M), kind
    for title, headers, rows in found.tables():
        assert rows and all(len(row) == len(headers) for row in rows), title
    assert [line for line in text.splitlines() if line.startswith("- ") and line.endswith(".")][
        -len(found.targets) :
    ] == [t.line() for t in found.targets]
    assert 0.0 <= found.measured <= 1.0 and 0.0 < found.predicted <= 1.0
    assert text.endswith(V.NOTES_MARKER + "\n")
