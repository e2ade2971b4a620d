"""Utilization benchmark: sequential against pipelined windows on a local network; writes docs/utilization.md.

Three miners and two validators run as separate processes through the real entry points, twice, one
run after the other: with sequential windows (bench/utilization-sequential.toml: train, reveal,
validate and set weights inside each window) and with pipelined ones (bench/utilization-pipelined.toml:
train through the whole window while the previous window is revealed and checked). Same model, data,
batch, train phase and number of windows. In both, a miner trains whole segments until its commit
deadline (`miners/pacing.py`), at most H = 960 steps, a cap no window reaches here; so the tokens a
window trains are measured, and the held-out losses are compared at equal tokens.

1. The link. Every miner's store is throttled so that a challenged miner's reveal takes the same share
   of the bench's window as the GPU config's reveal (distrai/configs/gpu-subnet.toml, two validators)
   takes of its 20-minute window on a 100 Mbit/s link (`distrai.node.linkcheck`).
2. Calibration (unless --no-calibrate): a short pipelined run with longer windows measures the
   miners' seconds per step side by side, and how long the validators take to check a window; the
   train phase W is set to hold 480 steps at the median pace plus the window's fixed cost, the reveal
   and validate phases to the throttled reveal and the measured validation, with margins.
3. The two runs. Per miner: utilization (train seconds over wall seconds, the first window left out),
   windows committed, steps per window, updates dropped, reveals late, upload seconds; per protocol:
   the held-out loss of the global model at equal tokens, and wall seconds per window.

    python bench/utilization.py                   # calibration and both runs: about 30 minutes on 2 cores
    python bench/utilization.py --no-calibrate    # the bench TOMLs' windows as they are
"""

from __future__ import annotations

import argparse
import contextlib
import math
import re
import shlex
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

from rich.console import Console
from rich.table import Table

from distrai.localnet.network import Localnet, LocalnetOptions
from distrai.localnet.view import heldout_curve, node_records, utilization
from distrai.node import linkcheck
from distrai.node.metrics_records import (
    LostRecord,
    MetricsLine,
    RevealRecord,
    TrainRecord,
    ValidatorWindowRecord,
)
from distrai.protocol.run import RunConfig, load_run_config, shipped_config_path
from distrai.protocol.windows import WindowConfig

ROOT = Path(__file__).resolve().parent.parent
BENCH = Path(__file__).resolve().parent
SEQUENTIAL_CONFIG = BENCH / "utilization-sequential.toml"
PIPELINED_CONFIG = BENCH / "utilization-pipelined.toml"
DEFAULT_OUTPUT = ROOT / "docs" / "utilization.md"
NOTES_MARKER = "<!-- Notes below this line are kept when the benchmark rewrites this file. -->"

MINERS = 3
VALIDATORS = 2
BLOCK_TIME = 1.0
"""Seconds per block of the bench's embedded chain."""
GPU_LINK_BITS_PER_S = 100e6
"""The link the GPU config's reveal is measured against: 100 Mbit/s."""
UTILIZATION_TARGET = 0.95
LOSS_TARGET = 1.02

TARGET_STEPS = 480
"""The train phase holds this many steps at the median calibrated pace: the tokens a window trains,
as many as the bench's fixed H = 480 gave before miners trained until their deadline."""
START_SLACK_S = 0.5
"""The train phase holds TARGET_STEPS steps, the window's slowest fixed cost (sync, encode, stage,
commit) and this much. A slower window trains fewer steps (`miners/pacing.py`); none is dropped."""
REVEAL_MARGIN = 1.3
"""The reveal phase holds this many times the reveal: the throttled worst case, or the slowest
calibrated upload at the run's rate if longer (the GPU config gives its reveal 1.97×, with a window
twice as long as its reveal and validate phases need)."""
VALIDATE_MARGIN = 1.4
"""The validate phase holds this many times the slowest calibrated validation, plus a block: beside
the training miners for the pipelined schedule, with the miners idle for the sequential one."""
WEIGHTS_BLOCKS = 2
"""Sequential windows end with this many blocks after the aggregate deadline for weights."""
CALIBRATION_STRETCH = 1.6
"""The calibration run's train phase, as a multiple of the bench TOML's: long enough that no update
is dropped however far the TOML is off, so every window's training time is logged."""
AGGREGATE_LATE = "validation finished after the aggregate deadline"


# -- the link -------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Link:
    """The GPU config's reveal on a 100 Mbit/s link, and the bench's reveal at the same share of its window."""

    gpu_params: int
    gpu_reveal: linkcheck.RevealBytes
    gpu_window_s: float
    gpu_reveal_window_s: float
    """the reveal phase the GPU config gives a challenged miner"""
    bench_params: int
    bench_reveal: linkcheck.RevealBytes
    bench_window_s: float
    """the bench's train phase W: the pipelined window, and the sequential window's train phase"""
    link_bytes_per_s: float = GPU_LINK_BITS_PER_S / 8
    validators: int = VALIDATORS

    @property
    def gpu_reveal_s(self) -> float:
        return self.gpu_reveal.total / self.link_bytes_per_s

    @property
    def share(self) -> float:
        """The GPU reveal's seconds over the GPU window's seconds."""
        return self.gpu_reveal_s / self.gpu_window_s

    @property
    def bench_reveal_s(self) -> float:
        return self.share * self.bench_window_s

    @property
    def bandwidth(self) -> float:
        """Bytes per second of every miner's store: the bench reveal in `bench_reveal_s`."""
        return self.bench_reveal.total / self.bench_reveal_s


def link_for(
    gpu: RunConfig,
    bench: RunConfig,
    bench_window_s: float,
    *,
    gpu_params: int | None = None,
    bench_params: int | None = None,
    validators: int = VALIDATORS,
) -> Link:
    gpu_params = linkcheck.parameter_count(gpu) if gpu_params is None else gpu_params
    bench_params = linkcheck.parameter_count(bench) if bench_params is None else bench_params
    return Link(
        gpu_params=gpu_params,
        gpu_reveal=linkcheck.reveal_bytes(gpu, gpu_params, validators),
        gpu_window_s=gpu.windows.blocks_per_window * linkcheck.DEFAULT_BLOCK_TIME,
        gpu_reveal_window_s=linkcheck.reveal_seconds(gpu),
        bench_params=bench_params,
        bench_reveal=linkcheck.reveal_bytes(bench, bench_params, validators),
        bench_window_s=bench_window_s,
        validators=validators,
    )


def link_lines(link: Link) -> list[str]:
    """The arithmetic, one sentence per step."""
    g, b = link.gpu_reveal, link.bench_reveal
    mbit = linkcheck.mbit_per_s(link.link_bytes_per_s)
    return [
        f"GPU config (`distrai/configs/gpu-subnet.toml`): {link.gpu_params:,} parameters; a miner challenged "
        f"by {link.validators} validators reveals {g.n_states} boundary states × {linkcheck.format_bytes(g.state)} "
        f"+ trajectory {linkcheck.format_bytes(g.trajectory)} + update {linkcheck.format_bytes(g.update)} = "
        f"{g.total / 1e9:.2f} GB (`linkcheck.reveal_bytes`).",
        f"At {mbit:.0f} Mbit/s that takes {g.total:,} / {link.link_bytes_per_s:,.0f} B/s = {link.gpu_reveal_s:.0f} s, "
        f"{link.share:.1%} of its {link.gpu_window_s:.0f}-s window (100 blocks × 12 s); its reveal phase gives "
        f"{link.gpu_reveal_window_s:.0f} s ({link.gpu_reveal_window_s / link.gpu_reveal_s:.2f}× the reveal).",
        f"Bench config: {link.bench_params:,} parameters; the same functions give {b.n_states} states × "
        f"{linkcheck.format_bytes(b.state)} + trajectory {linkcheck.format_bytes(b.trajectory)} + update "
        f"{linkcheck.format_bytes(b.update)} = {b.total / 1e6:.1f} MB.",
        f"The same share of the bench's train phase W = {link.bench_window_s:.0f} s is {link.bench_reveal_s:.1f} s, "
        f"so every miner's store is throttled to {b.total / 1e6:.1f} MB / {link.bench_reveal_s:.1f} s = "
        f"{link.bandwidth / 1e6:.2f} MB/s ({linkcheck.format_rate(link.bandwidth)}), in each direction.",
    ]


# -- the windows ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Calibration:
    """What the calibration run measured (the first window of every node left out)."""

    windows: WindowConfig
    bandwidth: float
    train_s: list[float]
    step_s: list[float]
    """per window, a miner's training seconds over the steps it trained"""
    other_s: list[float]
    """per window, a miner's seconds neither idle nor training: sync, encode, stage, commit"""
    validate_s: list[float]
    """validations of a window while the miners trained the next (pipelined)"""
    validate_idle_s: list[float]
    """validations of a window while no miner trained (the last window): what a sequential window sees"""
    upload_s: list[float]
    seconds: float

    @property
    def step_median(self) -> float:
        return statistics.median(self.step_s)


def calibration_windows(pipelined: WindowConfig, stretch: float = CALIBRATION_STRETCH) -> WindowConfig:
    """The pipelined windows with the train phase stretched and the reveal and validate phases kept."""
    w = math.ceil(pipelined.blocks_per_window * stretch)
    shift = w - pipelined.blocks_per_window
    return pipelined.model_copy(
        update={
            "blocks_per_window": w,
            "commit_offset": w,
            "reveal_offset": pipelined.reveal_offset + shift,
            "aggregate_offset": pipelined.aggregate_offset + shift,
        }
    )


@dataclass(frozen=True)
class Plan:
    train_blocks: int
    reveal_blocks: int
    validate_blocks: int
    """pipelined"""
    validate_idle_blocks: int
    """sequential"""
    reveal_s: float
    validate_s: float
    validate_idle_s: float
    pipelined: WindowConfig
    sequential: WindowConfig


def train_blocks(train_s: float, other_s: float, block_time: float = BLOCK_TIME) -> int:
    """The train phase W in blocks: `train_s` of training, the window's slowest fixed cost and the
    start slack."""
    return math.ceil((train_s + other_s + START_SLACK_S) / block_time)


def plan_windows(
    template: WindowConfig,
    *,
    train: int,
    reveal_s: float,
    validate_s: float,
    validate_idle_s: float,
    block_time: float = BLOCK_TIME,
) -> Plan:
    """Both protocols' windows around a train phase of `train` blocks: the reveal phase holds the
    reveal (`reveal_s`), the validate phase the slowest validation, with margins: `validate_s`
    beside the training miners (pipelined), `validate_idle_s` with the miners idle (sequential).
    Pipelined: `train` blocks, reveal and validate in the next window. Sequential: train + reveal +
    validate + weights blocks."""
    reveal = math.ceil(reveal_s * REVEAL_MARGIN / block_time) + 1
    validate = math.ceil(validate_s * VALIDATE_MARGIN / block_time) + 1
    validate_idle = math.ceil(validate_idle_s * VALIDATE_MARGIN / block_time) + 1
    if reveal + validate >= train:
        raise ValueError(
            f"reveal ({reveal} blocks) and validation ({validate} blocks) do not fit in a pipelined window of "
            f"{train} blocks: the aggregate must be in place before the window after next starts"
        )
    pipelined = WindowConfig(
        blocks_per_window=train,
        pipelined=True,
        commit_offset=train,
        reveal_offset=train + reveal,
        aggregate_offset=train + reveal + validate,
        checkpoint_every=template.checkpoint_every,
    )
    sequential = WindowConfig(
        blocks_per_window=train + reveal + validate_idle + WEIGHTS_BLOCKS,
        pipelined=False,
        commit_offset=train,
        reveal_offset=train + reveal,
        aggregate_offset=train + reveal + validate_idle,
        checkpoint_every=template.checkpoint_every,
    )
    return Plan(
        train, reveal, validate, validate_idle, reveal_s, validate_s, validate_idle_s, pipelined, sequential
    )


def windows_toml(windows: WindowConfig) -> str:
    return "\n".join(
        [
            "[windows]",
            f"blocks_per_window = {windows.blocks_per_window}",
            f"pipelined = {'true' if windows.pipelined else 'false'}",
            f"commit_offset = {windows.commit_offset}",
            f"reveal_offset = {windows.reveal_offset}",
            f"aggregate_offset = {windows.aggregate_offset}",
            f"checkpoint_every = {windows.checkpoint_every}",
        ]
    )


def with_windows(toml_text: str, windows: WindowConfig) -> str:
    """The run config's text with its [windows] section replaced (comments in it dropped)."""
    pattern = re.compile(r"^\[windows\]\n.*?(?=^\[|\Z)", re.S | re.M)
    if not pattern.search(toml_text):
        raise ValueError("the run config has no [windows] section")
    return pattern.sub(lambda _: windows_toml(windows) + "\n\n", toml_text, count=1)


def config_differences(a: RunConfig, b: RunConfig) -> list[str]:
    """Top-level settings in which two run configs differ, besides their name and windows."""
    da, db = a.model_dump(mode="json"), b.model_dump(mode="json")
    return sorted(k for k in da.keys() | db.keys() if k not in ("name", "windows") and da.get(k) != db.get(k))


def same_but_momentum(a: RunConfig, b: RunConfig) -> bool:
    """Whether two configs' outer steps differ in their momentum alone."""
    return a.outer.model_copy(update={"momentum": b.outer.momentum}) == b.outer


# -- one network ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class MinerStats:
    name: str
    committed: int
    dropped: int
    utilization: float | None
    steps: dict[int, int]
    """steps trained, per committed window (the first included)"""
    train_s: list[float]
    step_s: list[float]
    wall_s: list[float]
    other_s: list[float]
    reveals: int
    late: int
    upload_s: list[float]
    revealed_bytes: list[int]
    upload_rate: list[float]
    rate_needed: list[float]


def miner_stats(name: str, records: list[MetricsLine]) -> MinerStats:
    """A miner's windows from its metrics: every `TrainRecord` is a window whose commitment landed in
    time; the first is left out of the times (it has no idle time: nothing before it is a window)."""
    trains = [(r.window, r.record) for r in records if isinstance(r.record, TrainRecord)]
    reveals = [r.record for r in records if isinstance(r.record, RevealRecord)]
    measured = [t for _, t in trains[1:]]
    return MinerStats(
        name=name,
        committed=len(trains),
        dropped=sum(
            1 for r in records if isinstance(r.record, LostRecord) and r.record.why.startswith("dropped")
        ),
        utilization=utilization(records),
        steps={w: t.steps_trained for w, t in trains},
        train_s=[t.train_seconds for t in measured],
        step_s=[t.train_seconds / t.steps_trained for t in measured if t.steps_trained],
        wall_s=[t.wall_seconds for t in measured],
        other_s=[t.other_seconds for t in measured],
        reveals=len(reveals),
        late=sum(1 for r in reveals if r.reveal_late),
        upload_s=[r.upload_seconds for r in reveals if r.revealed_bytes],
        revealed_bytes=[r.revealed_bytes for r in reveals if r.revealed_bytes],
        upload_rate=[r.upload_rate for r in reveals if r.upload_rate],
        rate_needed=[r.upload_rate_needed for r in reveals if r.upload_rate_needed],
    )


@dataclass(frozen=True)
class ValidatorStats:
    name: str
    windows: list[int]
    validate_s: list[float]
    updates: dict[int, int]
    accepted: dict[int, int]
    late_aggregates: int
    refused: int


def validator_stats(name: str, records: list[MetricsLine], log_text: str = "") -> ValidatorStats:
    windows = [(r.window, r.record) for r in records if isinstance(r.record, ValidatorWindowRecord)]
    return ValidatorStats(
        name=name,
        windows=[w for w, _ in windows],
        validate_s=[r.validate_seconds for _, r in windows],
        updates={w: r.updates for w, r in windows},
        accepted={w: r.accepted for w, r in windows},
        late_aggregates=log_text.count(AGGREGATE_LATE),
        refused=sum(r.aggregates_refused for _, r in windows),
    )


@dataclass
class RunResult:
    label: str
    config: RunConfig
    bandwidth: float
    miners: list[MinerStats]
    validators: list[ValidatorStats]
    windows: list[int]
    """the windows the miners trained, first to last"""
    heldout: list[float] = field(default_factory=list)
    """held-out loss of the global model at the start of `windows[0]`, then after each of `windows`"""
    seconds: float = 0.0

    @property
    def window_s(self) -> float:
        return self.config.windows.blocks_per_window * BLOCK_TIME

    @property
    def accepted(self) -> int:
        """Updates in the global model: the leader's accepted count over the miners' windows."""
        leader = self.validators[0].accepted if self.validators else {}
        return sum(leader.get(w, 0) for w in self.windows)

    @property
    def tokens_per_step(self) -> int:
        return self.config.train.batch_size * self.config.data.seq_len

    @property
    def tokens(self) -> list[int]:
        """Tokens in the global model, aligned with `heldout`: 0, then after each of `windows` (the
        steps of every update committed, which `all_accepted` checks the aggregate took)."""
        curve = [0]
        for w in self.windows:
            curve.append(curve[-1] + sum(m.steps.get(w, 0) for m in self.miners) * self.tokens_per_step)
        return curve

    @property
    def all_accepted(self) -> bool:
        """Whether the leader's aggregate of every window took every update committed in it."""
        leader = self.validators[0].accepted if self.validators else {}
        return all(leader.get(w, 0) == sum(w in m.steps for m in self.miners) for w in self.windows)


def _set_arg(args: list[str], flag: str, value: str) -> None:
    args[args.index(flag) + 1] = value


def _logs(net: Localnet, name: str) -> str:
    path = net.neuron(name).log_path
    return path.read_text(errors="replace") if path.exists() else ""


def caught_up(net: Localnet) -> bool:
    """Whether every miner has exited and each validator has reported the last window a miner
    committed, or has exited: what the bench waits for before it stops the validators (they may
    check up to two windows more)."""
    if any(n.running() for n in net.neurons if n.role == "miner"):
        return False
    trained = max(trained_windows(net), default=-1)
    validators = [n for n in net.neurons if n.role == "validator"]
    return all(
        not v.running() or max(validated_windows(net, v.name), default=-1) >= trained for v in validators
    )


def trained_windows(net: Localnet) -> set[int]:
    return {
        r.window
        for n in net.neurons
        if n.role == "miner"
        for r in node_records(n.work_dir / "metrics.jsonl")
        if isinstance(r.record, TrainRecord)
    }


def validated_windows(net: Localnet, name: str) -> set[int]:
    return {
        r.window
        for r in node_records(net.neuron(name).work_dir / "metrics.jsonl")
        if isinstance(r.record, ValidatorWindowRecord)
    }


def run_network(
    label: str,
    config_path: Path,
    work: Path,
    windows: int,
    bandwidth: float,
    console: Console,
    curve: bool = True,
) -> RunResult:
    """One localnet: the miners train `windows` windows; the validators may check up to two more (they
    may start a window before the miners do) and are stopped once they have `caught_up`."""
    started = time.perf_counter()
    net = Localnet(
        LocalnetOptions(
            work=work,
            miners=MINERS,
            validators=VALIDATORS,
            windows=windows,
            block_time=BLOCK_TIME,
            run_config=config_path,
            miner_bandwidth=bandwidth,
        )
    )
    net.setup()
    for neuron in net.neurons:
        if neuron.role == "validator":
            _set_arg(neuron.args, "--max.windows", str(windows + 2))
    cfg = net.config.windows
    console.print(
        f"[bold]{label}[/]: {MINERS} miners, {VALIDATORS} validators, {windows} windows of "
        f"{cfg.blocks_per_window} blocks (train phase {cfg.commit_offset}), miners' store at "
        f"{bandwidth / 1e6:.2f} MB/s; logs in {net.work / 'logs'}"
    )

    def poll() -> None:
        failed = net.failed()
        if failed:
            raise SystemExit(f"{label}: {failed} exited with an error; logs in {net.work / 'logs'}")
        if caught_up(net):
            net.stop()

    timeout = 240 + (windows + 4) * cfg.blocks_per_window * BLOCK_TIME
    net.start()
    try:
        if not net.wait(timeout, poll):
            raise SystemExit(f"{label}: not done after {timeout:.0f} s; logs in {net.work / 'logs'}")
    finally:
        net.stop()
    result = network_result(label, net, bandwidth, curve)
    result.seconds = time.perf_counter() - started
    console.print(f"{label}: done in {result.seconds:.0f} s")
    return result


def network_result(label: str, net: Localnet, bandwidth: float, curve: bool = True) -> RunResult:
    """The bench's numbers of a finished localnet, read from its folder: each miner's and validator's
    metrics.jsonl and log, the windows the miners trained (first to last committed) and, with
    `curve`, the global model's held-out loss over them (`heldout_curve`, which evaluates the model
    after each window). `bandwidth` is the miners' store's rate, kept with the numbers; `seconds` is
    left at 0 (`run_network` times the run)."""
    trained = sorted(trained_windows(net))
    if not trained:
        raise SystemExit(f"{label}: no miner committed a window; logs in {net.work / 'logs'}")
    result = RunResult(
        label=label,
        config=net.config,
        bandwidth=bandwidth,
        miners=[
            miner_stats(n.name, node_records(n.work_dir / "metrics.jsonl"))
            for n in net.neurons
            if n.role == "miner"
        ],
        validators=[
            validator_stats(n.name, node_records(n.work_dir / "metrics.jsonl"), _logs(net, n.name))
            for n in net.neurons
            if n.role == "validator"
        ],
        windows=list(range(trained[0], trained[-1] + 1)),
    )
    if curve:
        result.heldout = heldout_curve(net, result.windows)
    return result


def calibrate(
    pipelined_path: Path, work: Path, windows: int, bandwidth: float, console: Console
) -> Calibration:
    """The calibration run: the pipelined config with its train phase stretched
    (`calibration_windows`), `windows` windows at the miners' `bandwidth`, read by `calibration_of`."""
    text = pipelined_path.read_text()
    stretched = calibration_windows(load_run_config(pipelined_path).windows)
    path = work / "calibration.toml"
    path.write_text(with_windows(text, stretched))
    run = run_network("calibration", path, work / "calibration", windows, bandwidth, console, curve=False)
    return calibration_of(run)


def calibration_of(run: RunResult) -> Calibration:
    """What a finished run measured for the plan: each miner's seconds per window (training, per
    step, fixed costs, uploads) and each validator's validations of a window that held updates,
    beside the training of the next window or, for the run's last window, with the miners idle."""
    trained = set(run.windows)
    beside, idle = [], []
    for v in run.validators:
        for w, seconds in zip(v.windows, v.validate_s, strict=True):
            if v.updates.get(w):
                (beside if w + 1 in trained else idle).append(seconds)
    return Calibration(
        windows=run.config.windows,
        bandwidth=run.bandwidth,
        train_s=[s for m in run.miners for s in m.train_s],
        step_s=[s for m in run.miners for s in m.step_s],
        other_s=[s for m in run.miners for s in m.other_s],
        validate_s=beside,
        validate_idle_s=idle,
        upload_s=[s for m in run.miners for s in m.upload_s],
        seconds=run.seconds,
    )


def calibrated_plan(calibration: Calibration, template: WindowConfig, link: Callable[[int], Link]) -> Plan:
    """Both protocols' windows from a calibration: a train phase of `TARGET_STEPS` steps at the
    median pace and the slowest fixed cost, the reveal phase the longer of the throttled reveal at
    that window's `link` and the slowest calibrated upload at that link's rate, the validate phases
    the slowest calibrated validations (`plan_windows`; ValueError when they do not fit)."""
    if not calibration.step_s or not calibration.validate_s:
        raise ValueError("no window was measured")
    train = train_blocks(TARGET_STEPS * calibration.step_median, _max(calibration.other_s))
    at_train = link(train)
    measured_reveal = _max(calibration.upload_s) * calibration.bandwidth / at_train.bandwidth
    return plan_windows(
        template,
        train=train,
        reveal_s=max(at_train.bench_reveal_s, measured_reveal),
        validate_s=_max(calibration.validate_s),
        validate_idle_s=_max(calibration.validate_idle_s or calibration.validate_s),
    )


def planned_configs(plan: Plan, work: Path) -> tuple[Path, Path]:
    """The bench TOMLs with the plan's windows, written in `work`: (sequential, pipelined)."""
    sequential, pipelined = work / "sequential.toml", work / "pipelined.toml"
    sequential.write_text(with_windows(SEQUENTIAL_CONFIG.read_text(), plan.sequential))
    pipelined.write_text(with_windows(PIPELINED_CONFIG.read_text(), plan.pipelined))
    return sequential, pipelined


# -- the report -----------------------------------------------------------------------------------


def _median(values: list[float]) -> float:
    return statistics.median(values) if values else math.nan


def _max(values: list[float]) -> float:
    return max(values) if values else math.nan


def _pct(x: float | None) -> str:
    return "—" if x is None or math.isnan(x) else f"{100 * x:.1f}%"


def _s(x: float) -> str:
    return "—" if math.isnan(x) else f"{x:.1f}"


def median_utilization(run: RunResult) -> float:
    values = [m.utilization for m in run.miners if m.utilization is not None]
    return _median(values)


def loss_at_tokens(tokens: list[int], losses: list[float], at: float) -> float:
    """A loss curve's value at `at` tokens, linear between the two windows around it."""
    if not tokens[0] <= at <= tokens[-1]:
        raise ValueError(f"{at:,.0f} tokens is outside the curve's {tokens[0]:,}–{tokens[-1]:,}")
    for j in range(1, len(tokens)):
        if at <= tokens[j]:
            share = (at - tokens[j - 1]) / (tokens[j] - tokens[j - 1]) if tokens[j] > tokens[j - 1] else 1.0
            return losses[j - 1] + share * (losses[j] - losses[j - 1])
    return losses[-1]


def loss_at_equal_tokens(seq: RunResult, pipe: RunResult) -> tuple[int, float, float]:
    """(tokens, sequential loss, pipelined loss) at the tokens the shorter of the two runs reached."""
    n = min(len(seq.heldout), len(pipe.heldout))
    seq_tokens, pipe_tokens = seq.tokens[:n], pipe.tokens[:n]
    at = min(seq_tokens[-1], pipe_tokens[-1])
    return (
        at,
        loss_at_tokens(seq_tokens, seq.heldout[:n], at),
        loss_at_tokens(pipe_tokens, pipe.heldout[:n], at),
    )


MINER_HEADERS = [
    "protocol",
    "miner",
    "windows committed",
    "updates dropped",
    "utilization",
    "median steps",
    "median train s",
    "median wall s",
    "median other s",
    "reveals late",
    "median upload s",
    "max upload s",
    "median reveal MB",
]


def miner_rows(runs: list[RunResult]) -> list[list[str]]:
    rows = []
    for run in runs:
        for m in run.miners:
            rows.append(
                [
                    run.label,
                    m.name,
                    str(m.committed),
                    str(m.dropped),
                    _pct(m.utilization),
                    f"{_median(list(m.steps.values())):.0f}",
                    _s(_median(m.train_s)),
                    _s(_median(m.wall_s)),
                    _s(_median(m.other_s)),
                    f"{m.late}/{m.reveals}",
                    _s(_median(m.upload_s)),
                    _s(_max(m.upload_s)),
                    _s(_median(m.revealed_bytes) / 1e6),
                ]
            )
    return rows


VALIDATOR_HEADERS = [
    "protocol",
    "validator",
    "windows reported",
    "median validate s",
    "max validate s",
    "validate phase s",
    "aggregates late",
    "aggregates refused",
]


def validator_rows(runs: list[RunResult]) -> list[list[str]]:
    rows = []
    for run in runs:
        w = run.config.windows
        phase = (w.aggregate_offset - w.reveal_offset) * BLOCK_TIME
        for v in run.validators:
            rows.append(
                [
                    run.label,
                    v.name,
                    f"{v.windows[0]}–{v.windows[-1]}" if v.windows else "—",
                    _s(_median(v.validate_s)),
                    _s(_max(v.validate_s)),
                    f"{phase:.0f}",
                    str(v.late_aggregates),
                    str(v.refused),
                ]
            )
    return rows


SUMMARY_HEADERS = ["", "sequential", "pipelined", "pipelined / sequential"]


def summary_rows(seq: RunResult, pipe: RunResult) -> list[list[str]]:
    at, loss_seq, loss_pipe = loss_at_equal_tokens(seq, pipe)
    u_seq, u_pipe = median_utilization(seq), median_utilization(pipe)
    wall_seq = _median([s for m in seq.miners for s in m.wall_s])
    wall_pipe = _median([s for m in pipe.miners for s in m.wall_s])
    train_seq = _median([s for m in seq.miners for s in m.train_s])
    train_pipe = _median([s for m in pipe.miners for s in m.train_s])
    tok_seq, tok_pipe = seq.tokens[-1], pipe.tokens[-1]
    steps_seq = _median([n for m in seq.miners for n in m.steps.values()])
    steps_pipe = _median([n for m in pipe.miners for n in m.steps.values()])
    return [
        ["median miner utilization", _pct(u_seq), _pct(u_pipe), f"{u_pipe / u_seq:.2f}×"],
        [
            "window (schedule), s",
            f"{seq.window_s:.0f}",
            f"{pipe.window_s:.0f}",
            f"{pipe.window_s / seq.window_s:.2f}×",
        ],
        ["median wall s per window (miners)", _s(wall_seq), _s(wall_pipe), f"{wall_pipe / wall_seq:.2f}×"],
        ["median train s per window", _s(train_seq), _s(train_pipe), f"{train_pipe / train_seq:.2f}×"],
        [
            "median steps per window",
            f"{steps_seq:.0f}",
            f"{steps_pipe:.0f}",
            f"{steps_pipe / steps_seq:.2f}×",
        ],
        [
            "windows trained (by the miners)",
            f"{len(seq.windows)} ({seq.windows[0]}–{seq.windows[-1]})",
            f"{len(pipe.windows)} ({pipe.windows[0]}–{pipe.windows[-1]})",
            "",
        ],
        [
            "updates in the global model (all committed?)",
            f"{seq.accepted} ({'yes' if seq.all_accepted else 'no'})",
            f"{pipe.accepted} ({'yes' if pipe.all_accepted else 'no'})",
            "",
        ],
        ["tokens in the global model", f"{tok_seq:,}", f"{tok_pipe:,}", f"{tok_pipe / max(tok_seq, 1):.2f}×"],
        [
            "tokens per wall second (schedule)",
            f"{tok_seq / (len(seq.windows) * seq.window_s):,.0f}",
            f"{tok_pipe / (len(pipe.windows) * pipe.window_s):,.0f}",
            f"{(tok_pipe / pipe.window_s) / max(tok_seq / seq.window_s, 1e-9):.2f}×",
        ],
        [
            f"held-out loss at {at:,} tokens",
            f"{loss_seq:.4f}",
            f"{loss_pipe:.4f}",
            f"{loss_pipe / loss_seq:.4f}",
        ],
        [
            "run wall time, s",
            f"{seq.seconds:.0f}",
            f"{pipe.seconds:.0f}",
            f"{pipe.seconds / seq.seconds:.2f}×",
        ],
    ]


CURVE_HEADERS = [
    "windows",
    "sequential tokens",
    "sequential loss",
    "pipelined tokens",
    "pipelined loss",
    "pipelined / sequential (same windows)",
]


def curve_rows(seq: RunResult, pipe: RunResult) -> list[list[str]]:
    rows = []
    for j in range(min(len(seq.heldout), len(pipe.heldout))):
        a, b = seq.heldout[j], pipe.heldout[j]
        rows.append(
            [str(j), f"{seq.tokens[j]:,}", f"{a:.4f}", f"{pipe.tokens[j]:,}", f"{b:.4f}", f"{b / a:.4f}"]
        )
    return rows


def schedule_rows(runs: list[RunResult]) -> list[list[str]]:
    rows = []
    for run in runs:
        w = run.config.windows
        rows.append(
            [
                run.label,
                str(w.blocks_per_window),
                f"[0, {w.commit_offset})",
                f"[{w.commit_offset}, {w.reveal_offset})",
                f"[{w.reveal_offset}, {w.aggregate_offset})",
                f"[{w.aggregate_offset}, …)",
                "w − 1 (one aggregate behind)" if w.pipelined else "w (after w − 1's aggregate)",
            ]
        )
    return rows


SCHEDULE_HEADERS = [
    "protocol",
    "blocks per window",
    "train",
    "reveal",
    "validate",
    "weights",
    "trains from model",
]


def target_sentences(seq: RunResult, pipe: RunResult) -> list[str]:
    at, loss_seq, loss_pipe = loss_at_equal_tokens(seq, pipe)
    u = median_utilization(pipe)
    worst = min((m.utilization for m in pipe.miners if m.utilization is not None), default=math.nan)
    ratio = loss_pipe / loss_seq
    return [
        f"Pipelined utilization: median {_pct(u)} over the miners (lowest {_pct(worst)}); target ≥ "
        f"{UTILIZATION_TARGET:.0%}: {'met' if u >= UTILIZATION_TARGET else 'MISSED'}.",
        f"Held-out loss at {at:,} tokens, pipelined / sequential: {loss_pipe:.4f} / {loss_seq:.4f} = "
        f"{ratio:.4f}; target ≤ {LOSS_TARGET:.2f}: {'met' if ratio <= LOSS_TARGET else 'MISSED'}.",
    ]


def md_table(headers: list[str], rows: list[list[str]]) -> str:
    lines = ["| " + " | ".join(headers) + " |", "|" + "---|" * len(headers)]
    return "\n".join(lines + ["| " + " | ".join(row) + " |" for row in rows])


def rich_table(title: str, headers: list[str], rows: list[list[str]]) -> Table:
    table = Table(title=title)
    for h in headers:
        table.add_column(h, justify="left" if h in ("protocol", "miner", "validator", "") else "right")
    for row in rows:
        table.add_row(*row)
    return table


def _row(label: str, values: list[float]) -> list[str]:
    return [label, str(len(values)), _s(_median(values)), _s(_max(values))]


def calibration_lines(cal: Calibration | None, plan: Plan | None) -> list[str]:
    if cal is None:
        return [
            "No calibration in this invocation (`--no-calibrate`): the windows are the bench TOMLs' as they are."
        ]
    w = cal.windows
    measured = [
        f"A pipelined run of the same network with the train phase stretched to {w.blocks_per_window} blocks "
        f"(×{CALIBRATION_STRETCH}, so no update is dropped) and the reveal and validate phases of the bench "
        f"TOML, the miners' store at {cal.bandwidth / 1e6:.2f} MB/s (the link for the TOML's window); "
        f"{cal.seconds:.0f} s. Every miner's first window left out:",
        "",
        md_table(
            ["measured", "samples", "median", "max"],
            [
                _row("miner: train a window (3 miners side by side), s", cal.train_s),
                _row("miner: a step, ms", [1000 * s for s in cal.step_s]),
                _row("miner: other (sync, encode, stage, commit), s", cal.other_s),
                _row("validator: validate a window while the miners train, s", cal.validate_s),
                _row("validator: validate a window with the miners idle (the last), s", cal.validate_idle_s),
                _row("miner: upload a reveal, s", cal.upload_s),
            ],
        ),
    ]
    if plan is None:
        return measured
    return [
        *measured,
        "",
        f"- train phase W = ⌈{TARGET_STEPS} × median s per step + max other + {START_SLACK_S} s⌉ = "
        f"⌈{TARGET_STEPS} × {cal.step_median:.4f} + {_max(cal.other_s):.1f} + {START_SLACK_S}⌉ = "
        f"**{plan.train_blocks} blocks**; a miner trains whole segments until its commit deadline, so a slower "
        "window trains fewer steps",
        f"- reveal phase = ⌈{plan.reveal_s:.1f} s × {REVEAL_MARGIN}⌉ + 1 = **{plan.reveal_blocks} blocks**: the "
        "longer of the throttled reveal at W and the slowest calibrated upload at W's rate; the upload starts one "
        "block after the commit deadline",
        f"- validate phase = ⌈max validate × {VALIDATE_MARGIN}⌉ + 1: pipelined (beside training) ⌈{plan.validate_s:.1f} s "
        f"× {VALIDATE_MARGIN}⌉ + 1 = **{plan.validate_blocks} blocks**, sequential (miners idle) "
        f"⌈{plan.validate_idle_s:.1f} s × {VALIDATE_MARGIN}⌉ + 1 = **{plan.validate_idle_blocks} blocks**",
        f"- pipelined window = W = **{plan.pipelined.blocks_per_window} blocks**, its reveal and validate phases in "
        f"the next window ({plan.pipelined.blocks_per_window - plan.reveal_blocks - plan.validate_blocks} blocks to "
        "spare before the window after next starts from the aggregate)",
        f"- sequential window = W + reveal + validate + {WEIGHTS_BLOCKS} blocks for weights = "
        f"**{plan.sequential.blocks_per_window} blocks**",
    ]


@dataclass(frozen=True)
class Report:
    command: str
    date: str
    machine: str
    link: Link
    calibration: Calibration | None
    plan: Plan | None
    sequential: RunResult
    pipelined: RunResult
    total_seconds: float


def markdown(report: Report, kept: str = "") -> str:
    seq, pipe = report.sequential, report.pipelined
    cfg = seq.config
    t = cfg.train
    at, _, _ = loss_at_equal_tokens(seq, pipe)
    lines = [
        "# Utilization: sequential against pipelined windows",
        "",
        "Written by `bench/utilization.py`. The command that produced these numbers:",
        "",
        f"```\n{report.command}\n```",
        "",
        f"- date: {report.date}; total wall time of the command: {report.total_seconds:.0f} s",
        f"- machine: {report.machine}",
        f"- network: {MINERS} miners and {VALIDATORS} validators as separate processes (`distrai.localnet.network`), "
        f"embedded chain at {BLOCK_TIME:.0f} s per block, file store; the two runs one after the other",
        f"- run configs: `bench/utilization-sequential.toml` and `bench/utilization-pipelined.toml` "
        f"(`distrai/configs/cpu-localnet.toml` with H = {t.inner_steps}; they differ only in [windows] and the "
        f"outer momentum, {cfg.outer.momentum:g} sequential and {pipe.config.outer.momentum:g} pipelined): "
        f"model `{cfg.model.preset}` ({report.link.bench_params:,} parameters), built-in corpus, seq_len "
        f"{cfg.data.seq_len}, batch {t.batch_size}, H = {t.inner_steps}, k = {t.segment_steps}, codec "
        f"`{cfg.codec.name}`; each validator replays {cfg.verification.challenge_segments} segments of "
        f"{cfg.verification.challenge_miners} miners",
        f"- a miner trains whole segments of {t.segment_steps} steps until its commit deadline, at most H = "
        f"{t.inner_steps} (`miners/pacing.py`); an update is its steps × {t.batch_size} × {cfg.data.seq_len} = "
        f"{seq.tokens_per_step:,} tokens per step",
        "",
        "## The link",
        "",
        *[f"- {line}" for line in link_lines(report.link)],
        "",
        "## Calibration",
        "",
        *calibration_lines(report.calibration, report.plan),
        "",
        "## Schedules",
        "",
        "Offsets in blocks from the window's first block (pipelined reveal and validate phases fall in the next window):",
        "",
        md_table(SCHEDULE_HEADERS, schedule_rows([seq, pipe])),
        "",
        "## Summary",
        "",
        md_table(SUMMARY_HEADERS, summary_rows(seq, pipe)),
        "",
        "## Miners",
        "",
        "**Utilization** of a miner: the sum of its `train_seconds` over the sum of its `wall_seconds`, over every "
        "window it committed except its first (`distrai.localnet.view.utilization`). A window's wall seconds run "
        "from the end of the miner's previous commit to the end of this one: idle (waiting for the window to "
        "start, and on sequential windows the reveal, validate and weights phases), sync to the window's base, "
        "training until the deadline or H (`train_seconds`, boundary states saved included), encoding, staging the reveal and "
        "committing (`other`). The first committed window is left out: it has no previous commit, so its wait "
        "for the network to start is not a window's idle time. A window whose update missed the commit "
        "deadline writes no record; its seconds fall into the next window's idle. **Updates dropped**: the "
        "miner's `lost` records of a window it trained and dropped (no segment in time, training past the commit "
        "deadline, its manifest or commitment failed or late). **Reveals late**: `reveal` records "
        "with `reveal_late`, of all reveals. **Upload s**: a reveal's seconds through the throttled store.",
        "",
        md_table(MINER_HEADERS, miner_rows([seq, pipe])),
        "",
        "## Validators",
        "",
        "Validate seconds: from the reveal deadline to the aggregate and weights (`validate_seconds`). "
        "Aggregates late: log lines saying validation finished after the aggregate deadline.",
        "",
        md_table(VALIDATOR_HEADERS, validator_rows([seq, pipe])),
        "",
        "## Held-out loss at equal tokens",
        "",
        "The global model's held-out loss (`distrai.localnet.view.heldout_curve`: followed from the validators' "
        "aggregates, the project's `evaluate` over the held-out split) after each window, and the tokens in it "
        "(the steps of the updates committed in each window, all of which the aggregates took when the summary "
        "says so); 0 is the initial model. The two runs are compared at the tokens the shorter one reached, "
        f"{at:,}, each curve linear between the two windows around it.",
        "",
        md_table(CURVE_HEADERS, curve_rows(seq, pipe)),
        "",
        "## Targets",
        "",
        *[f"- {s}" for s in target_sentences(seq, pipe)],
        "",
        NOTES_MARKER,
    ]
    return "\n".join(lines) + "\n" + kept


def kept_notes(path: Path) -> str:
    if not path.exists():
        return ""
    _, marker, rest = path.read_text().partition(NOTES_MARKER + "\n")
    return rest if marker else ""


def machine_line() -> str:
    import os
    import platform

    import torch

    cpuinfo = Path("/proc/cpuinfo")
    lines = cpuinfo.read_text().splitlines() if cpuinfo.exists() else []
    names = [line.split(":", 1)[1].strip() for line in lines if line.startswith("model name")]
    cpu = names[0] if names else platform.processor() or "unknown CPU"
    return (
        f"{cpu}, {len(os.sched_getaffinity(0))} cores (shared); torch {torch.__version__}; "
        f"Python {platform.python_version()}"
    )


# -- main -----------------------------------------------------------------------------------------


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--windows", type=int, default=7, help="windows each miner trains in each run (≥ 2)")
    parser.add_argument("--calibration-windows", type=int, default=4, help="windows of the calibration run")
    parser.add_argument(
        "--no-calibrate",
        action="store_true",
        help="use the bench TOMLs' windows as they are, no calibration run",
    )
    parser.add_argument(
        "--calibrate-only",
        action="store_true",
        help="run the calibration, print the windows it gives, and stop",
    )
    parser.add_argument("--output", type=Path, default=DEFAULT_OUTPUT)
    parser.add_argument(
        "--work",
        type=Path,
        default=None,
        help="keep the networks' folders (logs, metrics) here; default: a temporary folder",
    )
    args = parser.parse_args(argv)
    if args.calibrate_only and args.no_calibrate:
        parser.error("--calibrate-only and --no-calibrate exclude each other")
    if args.windows < 2 or args.calibration_windows < 2:
        parser.error("--windows and --calibration-windows must be at least 2 (the first window is left out)")
    return args


def bench_link(pipelined: RunConfig) -> Callable[[int], Link]:
    """The miners' link for a train phase of so many blocks: the GPU config's share of its window
    (`link_for`). SystemExit if the bench TOMLs differ in more than their windows and outer momentum."""
    sequential = load_run_config(SEQUENTIAL_CONFIG)
    differ = config_differences(sequential, pipelined)
    if differ and not (differ == ["outer"] and same_but_momentum(sequential, pipelined)):
        raise SystemExit(f"the bench TOMLs differ in more than [windows] and the outer momentum: {differ}")
    gpu = load_run_config(shipped_config_path("gpu-subnet"))
    gpu_params, bench_params = linkcheck.parameter_count(gpu), linkcheck.parameter_count(pipelined)

    def link(window_blocks: int) -> Link:
        return link_for(
            gpu, pipelined, window_blocks * BLOCK_TIME, gpu_params=gpu_params, bench_params=bench_params
        )

    return link


def plan_by_calibration(
    windows: int, pipelined: RunConfig, link: Callable[[int], Link], work: Path, console: Console
) -> tuple[Calibration, Plan]:
    """The calibration run of `windows` windows and the windows it gives (SystemExit when it measured
    none or they do not fit), printed."""
    calibration = calibrate(
        PIPELINED_CONFIG, work, windows, link(pipelined.windows.blocks_per_window).bandwidth, console
    )
    for line in calibration_lines(calibration, None)[2:]:
        console.print(line)
    try:
        plan = calibrated_plan(calibration, pipelined.windows, link)
    except ValueError as exc:
        raise SystemExit(f"calibration: {exc}; logs in {work / 'calibration' / 'logs'}") from None
    console.print(f"calibrated windows:\n[sequential]\n{windows_toml(plan.sequential)}")
    console.print(f"[pipelined]\n{windows_toml(plan.pipelined)}")
    for line in calibration_lines(calibration, plan)[-5:]:
        console.print(line)
    return calibration, plan


def command_line(args: argparse.Namespace) -> str:
    return "python bench/utilization.py" + "".join(
        f" {a}"
        for a, on in (
            (f"--windows {args.windows}", args.windows != 7),
            (f"--calibration-windows {args.calibration_windows}", args.calibration_windows != 4),
            ("--no-calibrate", args.no_calibrate),
            (f"--output {shlex.quote(str(args.output))}", args.output != DEFAULT_OUTPUT),
        )
        if on
    )


def print_report(report: Report, console: Console) -> None:
    runs = [report.sequential, report.pipelined]
    console.print(rich_table("schedules", SCHEDULE_HEADERS, schedule_rows(runs)))
    console.print(rich_table("miners", MINER_HEADERS, miner_rows(runs)))
    console.print(rich_table("validators", VALIDATOR_HEADERS, validator_rows(runs)))
    console.print(rich_table("summary", SUMMARY_HEADERS, summary_rows(report.sequential, report.pipelined)))
    for sentence in target_sentences(report.sequential, report.pipelined):
        console.print(f"• {sentence}")


def main(argv: list[str]) -> None:
    args = parse_args(argv)
    console = Console(width=180)
    started = time.perf_counter()
    pipe_cfg = load_run_config(PIPELINED_CONFIG)
    link = bench_link(pipe_cfg)
    if args.work is not None:
        args.work.mkdir(parents=True, exist_ok=True)
    folder = (
        contextlib.nullcontext(str(args.work))
        if args.work is not None
        else tempfile.TemporaryDirectory(prefix="distrai-utilization-")
    )
    with folder as tmp:
        work = Path(tmp).resolve()
        seq_path, pipe_path = SEQUENTIAL_CONFIG, PIPELINED_CONFIG
        calibration = plan = None
        if not args.no_calibrate:
            calibration, plan = plan_by_calibration(args.calibration_windows, pipe_cfg, link, work, console)
            seq_path, pipe_path = planned_configs(plan, work)
            if args.calibrate_only:
                return
        w_blocks = load_run_config(pipe_path).windows.blocks_per_window
        if load_run_config(seq_path).windows.commit_offset != w_blocks:
            raise SystemExit("the sequential train phase must be the pipelined window's length")
        chosen = link(w_blocks)
        for line in link_lines(chosen):
            console.print(f"• {line}")
        sequential = run_network(
            "sequential", seq_path, work / "sequential", args.windows, chosen.bandwidth, console
        )
        pipelined = run_network(
            "pipelined", pipe_path, work / "pipelined", args.windows, chosen.bandwidth, console
        )
    report = Report(
        command=command_line(args),
        date=f"{datetime.now(UTC):%Y-%m-%d %H:%M} UTC",
        machine=machine_line(),
        link=chosen,
        calibration=calibration,
        plan=plan,
        sequential=sequential,
        pipelined=pipelined,
        total_seconds=time.perf_counter() - started,
    )
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(markdown(report, kept_notes(args.output)))
    print_report(report, console)
    console.print(f"wrote {args.output}")


if __name__ == "__main__":
    main(sys.argv[1:])
