"""The parts of bench/utilization.py that start no network: the two bench run configs, the link
arithmetic, the window plan and the calibrated plan written as the bench TOMLs, the per-miner and
per-validator accounting, the report and its calibration section, and the command's refusals before
it starts anything. Then the command itself to its first network, whose nodes are given a setting
they cannot read and exit at once: it is refused, naming the nodes that failed, and writes no report.

The benchmark itself runs three localnets (calibration, sequential, pipelined) for half an hour, and
no smaller run of it fits a test's CPU. Its reading of a finished network (`network_result` and
`calibration_of`: the nodes' metrics and logs, the held-out curve) and its tables run in
tests/test_bench_utilization_e2e.py on the suite's restart network; the log lines it counts are
checked here to be the ones the nodes write."""

from __future__ import annotations

import ast
import dataclasses
import importlib.util
import math
import re
import sys
import tomllib
from pathlib import Path

import pytest
from support.metrics_lines import line as metrics_line
from support.metrics_lines import reveal_record, train_record, validator_record

from distrai.node.linkcheck import CODED_STATE_BYTES_PER_PARAM
from distrai.node.metrics_records import LostRecord, MetricsLine
from distrai.protocol.run import load_run_config, parse_run_config, shipped_config_path
from distrai.protocol.windows import WindowConfig

ROOT = Path(__file__).resolve().parent.parent
_spec = importlib.util.spec_from_file_location("bench_utilization", ROOT / "bench" / "utilization.py")
U = importlib.util.module_from_spec(_spec)
sys.modules["bench_utilization"] = U
_spec.loader.exec_module(U)

GPU_PARAMS = 257_092_608
"""`linkcheck.parameter_count` of the GPU config (test_link_uses_linkcheck checks it once)."""


@pytest.fixture(scope="module")
def configs():
    return (
        load_run_config(U.SEQUENTIAL_CONFIG),
        load_run_config(U.PIPELINED_CONFIG),
        load_run_config(shipped_config_path("cpu-localnet")),
        load_run_config(shipped_config_path("gpu-subnet")),
    )


def test_bench_configs_differ_only_in_their_windows_and_outer_momentum(configs):
    seq, pipe, cpu, _ = configs
    assert U.config_differences(seq, pipe) == ["outer"]
    assert (seq.outer.momentum, pipe.outer.momentum) == (0.9, cpu.outer.momentum)
    assert U.same_but_momentum(seq, pipe)
    assert not U.same_but_momentum(
        seq, seq.model_copy(update={"outer": seq.outer.model_copy(update={"lr": 0.5})})
    )
    assert not seq.windows.pipelined and pipe.windows.pipelined
    assert seq.windows.commit_offset == pipe.windows.blocks_per_window == pipe.windows.commit_offset
    assert seq.windows.aggregate_offset < seq.windows.blocks_per_window
    # from the shipped CPU config only H changes (besides the windows and the name)
    assert U.config_differences(pipe, cpu) == ["train"]
    changed = {k for k, v in pipe.train.model_dump().items() if cpu.train.model_dump()[k] != v}
    assert changed == {"inner_steps"}


def test_link_uses_linkcheck_and_keeps_the_gpu_share(configs):
    _, pipe, _, gpu = configs
    window = pipe.windows.blocks_per_window * U.BLOCK_TIME
    link = U.link_for(gpu, pipe, window)
    assert link.gpu_params == GPU_PARAMS
    assert link.gpu_reveal.n_states == 1  # the start of the one challenged segment, whatever the validators
    fraction = gpu.verification.trajectory_fraction
    # the fp32 state coded against the base (linkcheck's 6.5 B/param with its moments rounded to bf16 at
    # the boundary, 10 without); the fp32 + fp32 residual sample
    coded = CODED_STATE_BYTES_PER_PARAM[("float32", gpu.train.boundary_moments)]
    lean = (coded + 8 * fraction) * GPU_PARAMS + link.gpu_reveal.update
    assert link.gpu_reveal.total == pytest.approx(lean, rel=1e-6)
    assert link.gpu_reveal_s == pytest.approx(link.gpu_reveal.total / 12.5e6)
    assert link.share == pytest.approx(link.gpu_reveal_s / 1200.0)
    assert link.bench_reveal_s / window == pytest.approx(link.share)
    assert link.bandwidth * link.bench_reveal_s == pytest.approx(link.bench_reveal.total)
    for line in U.link_lines(link):
        assert line.endswith(".")


def test_bench_tomls_hold_the_throttled_reveal_and_the_schedule(configs):
    seq, pipe, _, gpu = configs
    link = U.link_for(gpu, pipe, pipe.windows.blocks_per_window * U.BLOCK_TIME, gpu_params=GPU_PARAMS)
    for cfg in (seq, pipe):
        seconds = (cfg.windows.reveal_offset - cfg.windows.commit_offset - 1) * U.BLOCK_TIME
        assert seconds >= link.bench_reveal_s, cfg.name
    assert seq.windows.reveal_offset == pipe.windows.reveal_offset
    assert seq.windows.aggregate_offset <= pipe.windows.aggregate_offset
    assert seq.windows.blocks_per_window == seq.windows.aggregate_offset + U.WEIGHTS_BLOCKS
    # the pipelined aggregate is in place before the window after next trains from it
    assert pipe.windows.aggregate_offset < 2 * pipe.windows.blocks_per_window


def test_plan_windows_builds_valid_twins():
    template = load_run_config(U.PIPELINED_CONFIG).windows
    w = U.train_blocks(40.0, 0.7)
    assert w == math.ceil(40.0 + 0.7 + U.START_SLACK_S)
    plan = U.plan_windows(template, train=w, reveal_s=14.0, validate_s=9.0, validate_idle_s=3.0)
    assert plan.reveal_blocks == math.ceil(14.0 * U.REVEAL_MARGIN) + 1
    assert plan.validate_blocks == math.ceil(9.0 * U.VALIDATE_MARGIN) + 1
    assert plan.validate_idle_blocks == math.ceil(3.0 * U.VALIDATE_MARGIN) + 1
    p, s = plan.pipelined, plan.sequential
    assert p.pipelined and not s.pipelined
    assert p.blocks_per_window == p.commit_offset == s.commit_offset == w
    assert p.reveal_offset == s.reveal_offset == w + plan.reveal_blocks
    assert p.aggregate_offset == p.reveal_offset + plan.validate_blocks
    assert s.aggregate_offset == s.reveal_offset + plan.validate_idle_blocks
    assert s.blocks_per_window == w + plan.reveal_blocks + plan.validate_idle_blocks + U.WEIGHTS_BLOCKS
    WindowConfig.model_validate(p.model_dump())
    WindowConfig.model_validate(s.model_dump())
    with pytest.raises(ValueError, match="do not fit"):
        U.plan_windows(template, train=20, reveal_s=10.0, validate_s=5.0, validate_idle_s=2.0)


def test_with_windows_replaces_only_the_windows():
    text = U.PIPELINED_CONFIG.read_text()
    stretched = U.calibration_windows(load_run_config(U.PIPELINED_CONFIG).windows, 1.5)
    original = load_run_config(U.PIPELINED_CONFIG).windows
    assert (
        stretched.reveal_offset - stretched.commit_offset == original.reveal_offset - original.commit_offset
    )
    assert (
        stretched.aggregate_offset - stretched.reveal_offset
        == original.aggregate_offset - original.reveal_offset
    )
    rewritten = parse_run_config(tomllib.loads(U.with_windows(text, stretched)))
    assert rewritten.windows == stretched
    assert U.config_differences(rewritten, load_run_config(U.PIPELINED_CONFIG)) == []
    with pytest.raises(ValueError):
        U.with_windows("name = 'x'\n", stretched)


def train(window: int, train_s: float, idle_s: float, other_s: float = 1.0, steps: int = 480) -> MetricsLine:
    record = train_record(
        steps_trained=steps,
        train_seconds=train_s,
        idle_seconds=idle_s,
        wall_seconds=train_s + idle_s + other_s,
    )
    return metrics_line(window, record)


def reveal(window: int, seconds: float, late: bool = False, n_bytes: int = 110_000_000) -> MetricsLine:
    record = reveal_record(
        upload_seconds=seconds,
        revealed_bytes=n_bytes,
        upload_rate=n_bytes / seconds,
        upload_rate_needed=n_bytes / 20,
        reveal_late=late,
    )
    return metrics_line(window, record)


def test_miner_stats_leave_out_the_first_window():
    records = [
        train(3, 40.0, 0.0, steps=400),
        reveal(3, 17.0),
        train(4, 46.0, 2.0, steps=460),
        reveal(4, 18.0, late=True),
        train(5, 47.0, 1.0, steps=470),
        metrics_line(6, LostRecord(why="dropped: training ended after the commit deadline")),
        metrics_line(7, LostRecord(why="skipped: its base model stayed out of reach until too late")),
    ]
    m = U.miner_stats("miner0", records)
    assert m.committed == 3 and m.dropped == 1
    assert m.utilization == pytest.approx((46.0 + 47.0) / (49.0 + 49.0))
    assert m.train_s == [46.0, 47.0] and m.wall_s == [49.0, 49.0]
    assert m.steps == {3: 400, 4: 460, 5: 470} and m.step_s == pytest.approx([0.1, 0.1])
    assert (m.reveals, m.late, m.upload_s) == (2, 1, [17.0, 18.0])


def run_result(
    label: str, pipelined: bool, loss_drop: float, utilization_train: float, steps: int = 480
) -> object:
    template = load_run_config(U.PIPELINED_CONFIG)
    plan = U.plan_windows(template.windows, train=50, reveal_s=17.5, validate_s=10.0, validate_idle_s=4.0)
    config = template.model_copy(update={"windows": plan.pipelined if pipelined else plan.sequential})
    wall = config.windows.blocks_per_window * U.BLOCK_TIME
    records = [train(w, utilization_train, wall - utilization_train - 1.0, steps=steps) for w in range(2, 9)]
    records += [reveal(w, 17.0) for w in range(2, 9)]
    miners = [U.miner_stats(f"miner{i}", records) for i in range(U.MINERS)]
    validator = [
        metrics_line(w, validator_record(validate_seconds=8.0, updates=3, accepted=3, aggregates_refused=0))
        for w in range(1, 9)
    ]
    validators = [U.validator_stats(f"validator{i}", validator) for i in range(U.VALIDATORS)]
    heldout = [5.5 - loss_drop * j for j in range(8)]
    return U.RunResult(label, config, 6.3e6, miners, validators, list(range(2, 9)), heldout, 600.0)


def test_report_tables_and_targets():
    seq = run_result("sequential", False, 0.30, 48.0)
    pipe = run_result("pipelined", True, 0.29, 48.0)
    link = U.link_for(
        load_run_config(shipped_config_path("gpu-subnet")),
        seq.config,
        50.0,
        gpu_params=GPU_PARAMS,
        bench_params=985_536,
    )
    report = U.Report(
        "python bench/utilization.py", "2026-01-01 00:00 UTC", "test CPU", link, None, None, seq, pipe, 1.0
    )
    text = U.markdown(report, "kept notes\n")
    assert "```\npython bench/utilization.py\n```" in text and text.endswith(
        U.NOTES_MARKER + "\nkept notes\n"
    )
    for header in (U.MINER_HEADERS, U.VALIDATOR_HEADERS, U.SUMMARY_HEADERS, U.SCHEDULE_HEADERS):
        assert "| " + " | ".join(header) + " |" in text
    assert len(U.miner_rows([seq, pipe])) == 2 * U.MINERS
    at, loss_seq, loss_pipe = U.loss_at_equal_tokens(seq, pipe)
    assert at == 7 * 3 * 480 * seq.tokens_per_step
    assert loss_pipe / loss_seq == pytest.approx((5.5 - 0.29 * 7) / (5.5 - 0.30 * 7))
    assert U.median_utilization(pipe) == pytest.approx(48.0 / 50.0)
    assert U.median_utilization(seq) == pytest.approx(48.0 / seq.window_s)
    targets = U.target_sentences(seq, pipe)
    assert "target ≥ 95%: met" in targets[0]
    assert "MISSED" in targets[1]  # 3.50 / 3.40 > 1.02
    assert seq.accepted == pipe.accepted == 3 * 7
    assert seq.all_accepted and pipe.all_accepted


def test_losses_are_compared_at_the_tokens_the_shorter_run_reached():
    seq = run_result("sequential", False, 0.30, 48.0, steps=500)
    pipe = run_result("pipelined", True, 0.30, 48.0, steps=400)
    per_window = 3 * seq.tokens_per_step
    assert seq.tokens == [j * 500 * per_window for j in range(8)]
    assert pipe.tokens[-1] == 7 * 400 * per_window
    at, loss_seq, loss_pipe = U.loss_at_equal_tokens(seq, pipe)
    assert at == pipe.tokens[-1]
    assert loss_pipe == pytest.approx(5.5 - 0.30 * 7)
    # the sequential run reached those tokens 5.6 windows in: 5.5 − 0.30 × 5.6
    assert loss_seq == pytest.approx(5.5 - 0.30 * 5.6)
    assert U.loss_at_tokens([0, 10, 30], [4.0, 3.0, 1.0], 20) == pytest.approx(2.0)
    with pytest.raises(ValueError, match="outside"):
        U.loss_at_tokens([0, 10], [4.0, 3.0], 11)


def measured_calibration() -> object:
    return U.Calibration(
        windows=U.calibration_windows(load_run_config(U.PIPELINED_CONFIG).windows),
        bandwidth=2.5e6,
        train_s=[60.0, 62.0, 64.0],
        step_s=[0.09, 0.1, 0.11],
        other_s=[1.0, 1.5, 2.0],
        validate_s=[9.0, 11.0],
        validate_idle_s=[4.0],
        upload_s=[12.0, 14.0],
        seconds=300.0,
    )


def test_the_calibration_section_follows_from_its_measurements():
    seq = run_result("sequential", False, 0.30, 48.0)
    pipe = run_result("pipelined", True, 0.29, 48.0)
    calibration = measured_calibration()
    w = U.train_blocks(U.TARGET_STEPS * calibration.step_median, max(calibration.other_s))
    assert w == math.ceil(480 * 0.1 + 2.0 + 0.5)
    template = load_run_config(U.PIPELINED_CONFIG).windows
    plan = U.plan_windows(template, train=w, reveal_s=14.0, validate_s=11.0, validate_idle_s=4.0)
    link = U.link_for(
        load_run_config(shipped_config_path("gpu-subnet")),
        seq.config,
        w * U.BLOCK_TIME,
        gpu_params=GPU_PARAMS,
    )
    report = U.Report(
        "python bench/utilization.py", "now", "test CPU", link, calibration, plan, seq, pipe, 9.0
    )
    section = U.markdown(report).split("## Calibration\n", 1)[1].split("\n## ", 1)[0]
    rows = [[c.strip() for c in row.strip("|").split("|")] for row in section.splitlines() if row[:2] == "| "]
    assert rows[1:] == [
        ["miner: train a window (3 miners side by side), s", "3", "62.0", "64.0"],
        ["miner: a step, ms", "3", "100.0", "110.0"],
        ["miner: other (sync, encode, stage, commit), s", "3", "1.5", "2.0"],
        ["validator: validate a window while the miners train, s", "2", "10.0", "11.0"],
        ["validator: validate a window with the miners idle (the last), s", "1", "4.0", "4.0"],
        ["miner: upload a reveal, s", "2", "13.0", "14.0"],
    ]
    assert f"⌈480 × 0.1000 + 2.0 + 0.5⌉ = **{w} blocks**" in section
    assert f"⌈14.0 s × 1.3⌉ + 1 = **{plan.reveal_blocks} blocks**" in section
    assert f"pipelined window = W = **{w} blocks**" in section
    assert f"for weights = **{plan.sequential.blocks_per_window} blocks**" in section
    # `--calibrate-only` prints the measurements before any plan; `--no-calibrate` has none
    assert U.calibration_lines(calibration, None) == U.calibration_lines(calibration, plan)[:3]
    assert "`--no-calibrate`" in U.calibration_lines(None, None)[0]


def test_the_calibrated_plan_holds_the_slowest_measurements_and_is_written_as_the_bench_tomls(tmp_path):
    """`main`'s step from a calibration to the two networks' configs: the train phase from the median
    step, the reveal phase from the slower of the throttled reveal at that window's link and the
    slowest upload at that link's rate (the calibration ran at `bandwidth`), the validate phases
    from the slowest validations; written as the bench TOMLs that differ from the shipped ones in
    their windows alone. A calibration that measured no window gives no plan."""
    pipelined = load_run_config(U.PIPELINED_CONFIG)
    link = U.bench_link(pipelined)
    bandwidth = link(pipelined.windows.blocks_per_window).bandwidth  # the calibration's link, as in `main`
    calibration = dataclasses.replace(measured_calibration(), bandwidth=bandwidth)
    plan = U.calibrated_plan(calibration, pipelined.windows, link)
    w = math.ceil(480 * 0.1 + 2.0 + 0.5)
    at_w = link(w)
    assert at_w == U.link_for(
        load_run_config(shipped_config_path("gpu-subnet")), pipelined, float(w), gpu_params=GPU_PARAMS
    )
    reveal_s = max(at_w.bench_reveal_s, 14.0 * bandwidth / at_w.bandwidth)
    assert reveal_s > at_w.bench_reveal_s  # the slowest upload decides here
    assert plan == U.plan_windows(
        pipelined.windows, train=w, reveal_s=reveal_s, validate_s=11.0, validate_idle_s=4.0
    )
    sequential_path, pipelined_path = U.planned_configs(plan, tmp_path)
    assert sequential_path.parent == pipelined_path.parent == tmp_path
    written = load_run_config(sequential_path), load_run_config(pipelined_path)
    assert (written[0].windows, written[1].windows) == (plan.sequential, plan.pipelined)
    assert written[0].windows.commit_offset == written[1].windows.blocks_per_window  # what `main` checks
    shipped = load_run_config(U.SEQUENTIAL_CONFIG), pipelined
    assert [U.config_differences(a, b) for a, b in zip(written, shipped, strict=True)] == [[], []]
    for empty in ({"step_s": []}, {"validate_s": []}):
        with pytest.raises(ValueError, match="no window was measured"):
            U.calibrated_plan(dataclasses.replace(calibration, **empty), pipelined.windows, link)


def test_the_log_lines_counted_are_the_ones_the_nodes_write():
    """The bench counts late aggregates by their words in the validators' logs: a reworded log line
    would count nothing, silently."""
    validator = (ROOT / "validators" / "validator.py").read_text()
    assert U.AGGREGATE_LATE in validator


def test_validator_rows_count_late_and_refused_aggregates():
    records = [
        metrics_line(w, validator_record(validate_seconds=s, aggregates_refused=refused))
        for w, s, refused in ((2, 8.0, 0), (3, 12.0, 1), (4, 10.0, 2))
    ]
    log = f"window 3: {U.AGGREGATE_LATE} (block 380)\nwindow 4: aggregate published\n"
    stats = U.validator_stats("validator0", records, log)
    assert (stats.windows, stats.late_aggregates, stats.refused) == ([2, 3, 4], 1, 3)
    run = run_result("sequential", False, 0.30, 48.0)
    run.validators = [stats]
    phase = (run.config.windows.aggregate_offset - run.config.windows.reveal_offset) * U.BLOCK_TIME
    assert U.validator_rows([run]) == [
        ["sequential", "validator0", "2–4", "10.0", "12.0", f"{phase:.0f}", "1", "3"]
    ]


@pytest.mark.parametrize(
    ("argv", "says"),
    [
        (["--calibrate-only", "--no-calibrate"], "exclude each other"),
        (["--windows", "1"], "must be at least 2"),
        (["--calibration-windows", "1"], "must be at least 2"),
    ],
)
def test_the_command_refuses_what_cannot_run_before_it_starts_a_network(argv, says, capsys):
    with pytest.raises(SystemExit) as done:
        U.main(argv)
    assert done.value.code == 2 and says in capsys.readouterr().err


@pytest.mark.parametrize("calibrated", [True, False], ids=["calibration", "no-calibrate"])
def test_the_command_stops_at_its_first_network_whose_nodes_exit_with_an_error(
    calibrated, tmp_path, monkeypatch, capsys
):
    """`main` as an operator runs it, to its first network: the calibration run (the bench TOML's
    windows stretched, written beside the networks' folders) or, with `--no-calibrate`, the sequential
    run; its miners' store at the link for the TOML's window; refused, naming the nodes that exited
    with an error, and no report written. Here every node inherits a setting it cannot
    read (`DISTRAI_DEVICE_MEMORY_GIB`, which the local network passes no flag for)."""
    monkeypatch.setenv("DISTRAI_DEVICE_MEMORY_GIB", "lots")
    work, output = tmp_path / "work", tmp_path / "utilization.md"
    argv = ["--work", str(work), "--output", str(output), *([] if calibrated else ["--no-calibrate"])]
    with pytest.raises(SystemExit) as refused:
        U.main(argv)
    first = "calibration" if calibrated else "sequential"
    nodes = [f"validator{i}" for i in range(U.VALIDATORS)] + [f"miner{i}" for i in range(U.MINERS)]
    logs = work / first / "logs"
    # the bench stops the network at the first poll that finds a node exited with an error: the
    # nodes that had by then (on a busy machine, not always all of them)
    said = re.fullmatch(rf"{first}: (\[.*\]) exited with an error; logs in (.+)", str(refused.value))
    assert said and said[2] == str(logs), refused.value
    named = ast.literal_eval(said[1])
    assert named and set(named) <= set(nodes), named
    assert all("--device.memory_gib must be a number" in (logs / f"{n}.log").read_text() for n in named)
    pipelined = load_run_config(U.PIPELINED_CONFIG)
    bandwidth = U.bench_link(pipelined)(pipelined.windows.blocks_per_window).bandwidth
    assert f"miners' store at {bandwidth / 1e6:.2f} MB/s" in capsys.readouterr().out
    if calibrated:
        stretched = load_run_config(work / "calibration.toml").windows
        assert stretched == U.calibration_windows(pipelined.windows)
    assert not output.exists()
