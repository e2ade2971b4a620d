"""bench/utilization.py's reading of a finished local network, run on the suite's restart network
(`support.restart_net`): `network_result` builds the bench's numbers from the nodes' metrics.jsonl
and logs and the held-out curve over the miners' windows, and its tables render them. The bench's
own three networks take half an hour; this network has the shape of one of them (the shipped CPU
config's pipelined windows, three honest miners, two validators, every node's metrics and log on
disk), plus an idle miner and a validator restarted mid-run, neither of which the reading may trip on.

Each number is checked against what the network's files and config say independently of the bench:
the metrics lines parsed as plain JSON, the config's steps, tokens and phases, and the validators'
validate seconds against the late-aggregate lines the bench counts in their logs. The test starts no
process; the held-out curve (5 evaluations of the micro model) is its only cost."""

from __future__ import annotations

import dataclasses
import importlib.util
import json
import math
import statistics
import sys
from pathlib import Path

import pytest

from distrai.protocol.run import load_run_config

ROOT = Path(__file__).resolve().parent.parent
_spec = importlib.util.spec_from_file_location("bench_utilization", ROOT / "bench" / "utilization.py")
U = importlib.util.module_from_spec(_spec)
sys.modules["bench_utilization"] = U
_spec.loader.exec_module(U)

pytestmark = pytest.mark.e2e


def raw_lines(path: Path) -> list[dict]:
    """A node's metrics lines as plain JSON, without the project's models."""
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def committed_windows(net) -> set[int]:
    """The windows of the miners' train records, read as plain JSON."""
    return {
        line["window"]
        for n in net.neurons
        if n.role == "miner"
        for line in raw_lines(n.work_dir / "metrics.jsonl")
        if line.get("event") == "train"
    }


@pytest.fixture(scope="module")
def run(restart_net):
    assert restart_net.finished, "the restart network did not finish its windows"
    return U.network_result("restart", restart_net.net, math.inf)  # its miners' stores are not throttled


@pytest.fixture(scope="module")
def honest(restart_net) -> list[str]:
    o = restart_net.net.options
    return [f"miner{i}" for i in range(o.miners - o.idle_miners)]


def test_every_miner_and_validator_is_read_and_the_windows_are_the_committed_ones(restart_net, run):
    net = restart_net.net
    assert [m.name for m in run.miners] == [n.name for n in net.neurons if n.role == "miner"]
    assert [v.name for v in run.validators] == [n.name for n in net.neurons if n.role == "validator"]
    assert len(run.miners) == net.options.miners and len(run.validators) == net.options.validators
    committed = committed_windows(net)
    assert committed, "no miner's metrics hold a committed window"
    assert run.windows == list(range(min(committed), max(committed) + 1))
    assert run.config == net.config and run.seconds == 0.0


def test_what_the_bench_waits_for_reads_the_committed_and_reported_windows(restart_net):
    """`caught_up`, the bench's cue to stop a network's validators once each has reported the last
    window a miner committed, reads the committed and the reported windows that the nodes' metrics
    hold read as plain JSON. That it holds at this network's end is by construction (every node has
    exited); its validators stop by themselves after `--max.windows` windows, here one before the
    last committed one, which the bench's validators get two windows more to report."""
    net = restart_net.net
    committed = committed_windows(net)
    assert U.trained_windows(net) == committed and committed
    for v in (n for n in net.neurons if n.role == "validator"):
        reported = {
            line["window"]
            for line in raw_lines(v.work_dir / "metrics.jsonl")
            if "event" not in line  # a validator's window record has none
        }
        assert U.validated_windows(net, v.name) == reported and reported, v.name
    assert U.caught_up(net) and not net.failed()


def test_each_honest_miner_is_measured(restart_net, run, honest):
    net = restart_net.net
    h, k = net.config.train.inner_steps, net.config.train.segment_steps
    miners = {m.name: m for m in run.miners}
    for name in honest:
        m = miners[name]
        trains = [
            r for r in raw_lines(net.neuron(name).work_dir / "metrics.jsonl") if r.get("event") == "train"
        ]
        assert len(trains) >= 2, f"{name} committed {len(trains)} windows: nothing left to measure"
        assert m.committed == len(trains)
        assert m.steps == {r["window"]: r["steps_trained"] for r in trains}
        # whole segments until the commit deadline, at most H
        assert all(0 < s <= h and (s % k == 0 or s == h) for s in m.steps.values()), m.steps
        measured = trains[1:]  # the first window has no idle time before it
        assert m.train_s == [r["train_seconds"] for r in measured]
        assert m.wall_s == [r["wall_seconds"] for r in measured]
        assert len(m.step_s) == len(measured) and all(s > 0 for s in m.step_s)
        expected = sum(r["train_seconds"] for r in measured) / sum(r["wall_seconds"] for r in measured)
        assert m.utilization == pytest.approx(expected)
        assert 0 < m.utilization <= 1
        assert all(0 < t < w for t, w in zip(m.train_s, m.wall_s, strict=True))
        assert all(s >= 0 for s in m.other_s)


def test_the_idle_miner_trains_no_steps(restart_net, run, honest):
    idle = [m for m in run.miners if m.name not in honest]
    assert len(idle) == restart_net.net.options.idle_miners
    for m in idle:
        assert all(s == 0 for s in m.steps.values()), m.steps
        assert m.step_s == []
        assert m.utilization is None or m.utilization < min(
            x.utilization for x in run.miners if x.name in honest
        )


def test_reveals_are_read_with_their_upload_seconds(restart_net, run):
    net = restart_net.net
    assert net.config.verification.challenge_miners > 0
    reveal_phase_s = (net.config.windows.reveal_offset - net.config.windows.commit_offset) * U.BLOCK_TIME
    for m in run.miners:
        reveals = [
            r for r in raw_lines(net.neuron(m.name).work_dir / "metrics.jsonl") if r.get("event") == "reveal"
        ]
        challenged = [r for r in reveals if r["revealed_bytes"] > 0]
        assert m.reveals == len(reveals) and m.late == sum(r["reveal_late"] for r in reveals)
        assert m.upload_s == [r["upload_seconds"] for r in challenged]
        assert m.revealed_bytes == [r["revealed_bytes"] for r in challenged]
        assert all(0 < s < reveal_phase_s for s in m.upload_s), m.upload_s
        assert all(r > 0 for r in m.upload_rate + m.rate_needed)
    # every window challenges a miner, whose reveal then holds states: at least one a window
    assert sum(len(m.upload_s) for m in run.miners) >= len(run.windows)


def test_updates_dropped_are_the_miners_lost_records_of_trained_windows(restart_net, run):
    net = restart_net.net
    for m in run.miners:
        lost = [
            r for r in raw_lines(net.neuron(m.name).work_dir / "metrics.jsonl") if r.get("event") == "lost"
        ]
        assert m.dropped == sum(r["why"].startswith("dropped:") for r in lost), (m.name, lost)


def test_each_validators_counts_are_read(restart_net, run):
    net = restart_net.net
    w = net.config.windows
    phase_s = (w.aggregate_offset - w.reveal_offset) * U.BLOCK_TIME
    for v in run.validators:
        records = [r for r in raw_lines(net.neuron(v.name).work_dir / "metrics.jsonl") if "event" not in r]
        assert v.windows == [r["window"] for r in records]
        assert set(v.windows) & set(run.windows), f"{v.name} reported none of the miners' windows"
        assert v.accepted.keys() == v.updates.keys() == set(v.windows)
        for window in set(v.windows) & set(run.windows):
            committed = sum(window in m.steps for m in run.miners)
            assert v.updates[window] == committed, (v.name, window, v.updates, committed)
            assert 0 < v.accepted[window] <= v.updates[window], (v.name, window, v.accepted)
        assert v.validate_s == [r["validate_seconds"] for r in records]
        # a validation that took more than the validate phase and a block finished after the aggregate
        # deadline, which the validator's log says in the line the bench counts
        overran = sum(s > phase_s + U.BLOCK_TIME for s in v.validate_s)
        assert overran <= v.late_aggregates <= len(v.windows), (v.name, v.validate_s, v.late_aggregates)
        assert v.refused == sum(r["aggregates_refused"] for r in records)


def test_the_heldout_curve_and_the_tokens(restart_net, run, honest):
    cfg = restart_net.net.config
    assert len(run.heldout) == len(run.windows) + 1
    assert all(math.isfinite(x) and x > 0 for x in run.heldout), run.heldout
    # whether the loss fell is the network's health (tests/test_localnet_e2e.py): on a loaded machine
    # its validations can all miss the aggregate deadline, and the global model then stays
    assert run.tokens_per_step == cfg.train.batch_size * cfg.data.seq_len
    assert len(run.tokens) == len(run.heldout) and run.tokens[0] == 0
    steps = sum(s for m in run.miners for s in m.steps.values())
    assert run.tokens[-1] == steps * run.tokens_per_step
    assert all(a < b for a, b in zip(run.tokens, run.tokens[1:], strict=False)), run.tokens
    assert 0 < run.accepted <= sum(len(m.steps) for m in run.miners)


def test_the_tables_render_what_was_read(restart_net, run, honest):
    w = run.config.windows
    rows = U.miner_rows([run])
    assert [r[1] for r in rows] == [m.name for m in run.miners]
    for row, m in zip(rows, run.miners, strict=True):
        assert len(row) == len(U.MINER_HEADERS) and not any("nan" in cell for cell in row), row
        assert row[2] == str(m.committed) and row[9] == f"{m.late}/{m.reveals}"
        if m.name in honest:
            assert row[4] == U._pct(m.utilization) != "—"
            assert int(row[5]) == round(statistics.median(m.steps.values())) > 0
            assert "—" not in row[6:9], row
    rows = U.validator_rows([run])
    for row, v in zip(rows, run.validators, strict=True):
        assert len(row) == len(U.VALIDATOR_HEADERS) and not any("nan" in cell for cell in row), row
        assert row[2] == f"{v.windows[0]}–{v.windows[-1]}"
        assert row[5] == f"{(w.aggregate_offset - w.reveal_offset) * U.BLOCK_TIME:.0f}"
        assert row[6] == str(v.late_aggregates)
    (schedule,) = U.schedule_rows([run])
    assert schedule[1:5] == [
        str(w.blocks_per_window),
        f"[0, {w.commit_offset})",
        f"[{w.commit_offset}, {w.reveal_offset})",
        f"[{w.reveal_offset}, {w.aggregate_offset})",
    ]
    assert schedule[6] == "w − 1 (one aggregate behind)"  # the network's windows are pipelined
    # the summary compares two protocols; against itself (timed, as `run_network` times it) the
    # held-out loss at its last tokens is the curve's last point
    timed = dataclasses.replace(run, seconds=1.0)
    summary = {row[0]: row[1:] for row in U.summary_rows(timed, timed)}
    loss = summary[f"held-out loss at {run.tokens[-1]:,} tokens"]
    assert loss == [f"{run.heldout[-1]:.4f}", f"{run.heldout[-1]:.4f}", "1.0000"]
    assert summary["median miner utilization"][0] == U._pct(U.median_utilization(run))
    assert summary["tokens in the global model"][0] == f"{run.tokens[-1]:,}"


def test_the_network_read_as_the_benchs_calibration_run(run):
    """`main`'s calibration reads its run with `calibration_of`: here this network stands for it, at
    the bench's link for its window. Each measurement is a node's own, and the validations of windows
    that held updates are split by whether the miners trained the next window (pipelined) or not (the
    last, what a sequential window sees); the plan that follows is tests/test_bench_utilization.py's."""
    pipelined = load_run_config(U.PIPELINED_CONFIG)
    bandwidth = U.bench_link(pipelined)(pipelined.windows.blocks_per_window).bandwidth
    cal = U.calibration_of(dataclasses.replace(run, bandwidth=bandwidth, seconds=1.0))
    assert (cal.windows, cal.bandwidth, cal.seconds) == (run.config.windows, bandwidth, 1.0)
    assert cal.train_s == [s for m in run.miners for s in m.train_s]
    assert cal.step_s == [s for m in run.miners for s in m.step_s]
    assert cal.other_s == [s for m in run.miners for s in m.other_s]
    assert cal.upload_s == [s for m in run.miners for s in m.upload_s]
    assert cal.step_s and cal.upload_s
    validated = [
        (w, s)
        for v in run.validators
        for w, s in zip(v.windows, v.validate_s, strict=True)
        if v.updates.get(w)
    ]
    assert sorted(cal.validate_s + cal.validate_idle_s) == sorted(s for _, s in validated)
    assert len(cal.validate_s) == sum(w + 1 in run.windows for w, _ in validated) > 0
    assert not any("nan" in line for line in U.calibration_lines(cal, None))
