"""Replay tolerance calibration: honest windows trained with the project's inner loop, every
segment replayed from its start state, and how far each replay lands from the trained end state;
writes docs/replay-tolerance.md.

A validator accepts a replayed segment when replay_distance = ‖θ_replayed − θ_claimed‖ /
‖θ_claimed − θ_start‖ is at most the run config's `[verification] replay_tolerance` (with 0.0 the
replayed and claimed states must hash the same). This script measures the distances of honest
replays on one device and recommends tolerance = max(observed) × --safety-factor.

    python bench/calibrate_replay.py                     # shipped cpu-localnet config, CPU (about a minute on 2 cores)
    python bench/calibrate_replay.py --device cuda --run.config RUN.toml      # on the GPU, before launch
    python bench/calibrate_replay.py --quick             # seconds; every code path, for the smoke test

Across processes or machines: `--save-states DIR` also writes every trained boundary state and an
index; a later run with `--replay-states DIR` (a fresh process, or another machine or GPU model)
trains nothing and replays those states against their recorded ends.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import shlex
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

import torch
from _report import NOTES_MARKER, Machine, kept_notes
from rich.console import Console
from rich.table import Table

from distrai.localnet.network import local_runtime
from distrai.protocol.globalmodel import outer_config
from distrai.protocol.run import load_run_config, shipped_config_path
from distrai.protocol.runtime import Runtime, model_spec
from distrai.train.assignment import batch_indices
from distrai.train.determinism import configure_determinism, fingerprint
from distrai.train.inner import InnerConfig, inner_loop
from distrai.train.model import count_parameters, load_model
from distrai.train.outer import Contribution, OuterState, outer_step
from distrai.train.replay import replay_distance, replay_segment
from distrai.train.train_state import TrainState, load_state, save_state, state_hash

ROOT = Path(__file__).resolve().parent.parent
DEFAULT_OUTPUT = ROOT / "docs" / "replay-tolerance.md"
DEFAULT_CONFIG = shipped_config_path("cpu-localnet")
INDEX_FILE = "index.json"
INDEX_FORMAT = "distrai.replay_calibration/2"
HEADERS = (
    "trained on",
    "replayed on",
    "replay",
    "segments",
    "bit-exact states",
    "median",
    "p99",
    "max",
    "recommended tolerance",
    "run config's tolerance",
    "max loss drift",
    "recommended loss tolerance",
    "control on other data (min)",
)
SEGMENT_HEADERS = ("segment", "inner steps", "replays", "bit-exact states", "median", "max")


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--device", default="cpu", help="torch device to train and replay on: cpu, cuda, cuda:1 …"
    )
    parser.add_argument(
        "--run.config",
        dest="run_config",
        type=Path,
        default=DEFAULT_CONFIG,
        help="run config TOML (default: the shipped cpu-localnet config)",
    )
    parser.add_argument(
        "--data.store",
        dest="data_store",
        default=None,
        help="where the run's prepared data is (default: the run config's data.store; the shipped CPU "
        "config's built-in corpus is prepared into a temporary folder)",
    )
    parser.add_argument(
        "--data.endpoint", dest="data_endpoint", default=None, help="S3 endpoint of --data.store"
    )
    parser.add_argument("--windows", type=int, default=4, help="windows to train (default 4)")
    parser.add_argument(
        "--hotkeys", type=int, default=3, help="honest miners training in each window (default 3)"
    )
    parser.add_argument(
        "--inner-steps",
        type=int,
        default=None,
        help="inner steps per window, a multiple of the run's segment_steps (default: the run's H)",
    )
    parser.add_argument(
        "--safety-factor",
        type=float,
        default=10.0,
        help="recommended tolerance = max distance × this (default 10)",
    )
    parser.add_argument(
        "--save-states",
        type=Path,
        default=None,
        help="also write every trained boundary state to this folder",
    )
    parser.add_argument(
        "--replay-states",
        type=Path,
        default=None,
        help="train nothing: replay the states a --save-states run wrote to this folder",
    )
    parser.add_argument(
        "--quick", action="store_true", help="1 window, 2 hotkeys, 2 segments each: the smoke test"
    )
    parser.add_argument("--output", type=Path, default=DEFAULT_OUTPUT, help="markdown file to write")
    args = parser.parse_args(argv)
    if args.quick:
        args.windows, args.hotkeys = 1, 2
    for name in ("windows", "hotkeys"):
        if getattr(args, name) < 1:
            parser.error(f"--{name} must be at least 1")
    if not args.safety_factor >= 1.0:
        parser.error("--safety-factor must be at least 1")
    if args.save_states is not None and args.replay_states is not None:
        parser.error("--save-states and --replay-states exclude each other")
    return args


@dataclass(frozen=True)
class Measured:
    """One replayed segment: its distance from the claimed end, and whether the replayed state
    (parameters, optimizer state and step) hashes the same as the claimed one."""

    window: int
    hotkey: str
    segment: int
    distance: float
    exact: bool
    loss_drift: float
    """the largest |replayed loss − trained loss| / |trained loss| over the segment's steps"""


@dataclass(frozen=True)
class Summary:
    count: int
    exact: int
    median: float
    p99: float
    max: float
    max_loss_drift: float


def percentile(values: Sequence[float], q: float) -> float:
    """The nearest-rank q-th percentile (an observed value, never interpolated)."""
    ordered = sorted(values)
    return ordered[max(1, math.ceil(q / 100 * len(ordered))) - 1]


def summarize(measured: Sequence[Measured]) -> Summary:
    distances = [m.distance for m in measured]
    return Summary(
        count=len(measured),
        exact=sum(m.exact for m in measured),
        median=statistics.median(distances),
        p99=percentile(distances, 99),
        max=max(distances),
        max_loss_drift=max(m.loss_drift for m in measured),
    )


def recommend(max_distance: float, safety_factor: float) -> float:
    """max × factor, rounded up to two significant digits so it can be written into a config as is."""
    value = max_distance * safety_factor
    if value == 0.0 or not math.isfinite(value):
        return value
    scale = 10.0 ** (math.floor(math.log10(value)) - 1)
    return float(f"{math.ceil(value / scale - 1e-9) * scale:.2g}")


def distance_text(value: float) -> str:
    return "0.0" if value == 0.0 else f"{value:.3e}"


def tolerance_text(value: float) -> str:
    return "0.0" if value == 0.0 else f"{value:g}"


def batch_source(
    rt: Runtime, window: int, hotkey: str, miners: Sequence[str]
) -> Callable[[int], torch.Tensor]:
    """The batch of `hotkey`'s inner step t in `window`: the data assignment every node computes."""
    size = rt.config.train.batch_size

    def batch_for_step(step: int) -> torch.Tensor:
        return rt.data.batch(
            batch_indices(rt.run_id, window, hotkey, step, size, rt.data.n_train, list(miners), rt.data.unit)
        )

    return batch_for_step


def synchronize(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


class Calibration:
    """Trains and replays on one runtime, accumulating measurements and timings."""

    def __init__(self, rt: Runtime, inner: InnerConfig, replay_model: torch.nn.Module):
        self.rt = rt
        self.inner = inner
        self.replay_model = replay_model
        self.measured: list[Measured] = []
        self.controls: list[float] = []
        self.train_seconds = 0.0
        self.replay_seconds = 0.0

    def replay_window(
        self,
        window: int,
        hotkey: str,
        miners: Sequence[str],
        states: Sequence[TrainState],
        losses: Sequence[float],
    ) -> None:
        """Replay every segment of one trained window from its start state on the same batches, anchored
        to the window's base (boundary 0's parameters), comparing its end and every step's loss with the
        trained ones (`losses`, one per inner step); then, as a control, its last segment on other data
        (the miner's batches of the next window)."""
        k = self.inner.segment_steps
        source = batch_source(self.rt, window, hotkey, miners)
        base = states[0].params
        for segment in range(self.inner.n_segments):
            start, claimed = states[segment], states[segment + 1]
            batches = [source(t) for t in range(segment * k, (segment + 1) * k)]
            started = time.perf_counter()
            replay = replay_segment(self.replay_model, start, batches, self.rt.loss_fn, self.inner, base=base)
            synchronize(self.rt.device)
            self.replay_seconds += time.perf_counter() - started
            trained = losses[segment * k : (segment + 1) * k]
            self.measured.append(
                Measured(
                    window=window,
                    hotkey=hotkey,
                    segment=segment,
                    distance=replay_distance(start, claimed, replay.end),
                    exact=state_hash(replay.end) == state_hash(claimed),
                    loss_drift=loss_drift(trained, replay.losses),
                )
            )
        last = self.inner.n_segments - 1
        other = batch_source(self.rt, window + 1, hotkey, miners)
        wrong = [other(t) for t in range(last * k, (last + 1) * k)]
        replayed = replay_segment(
            self.replay_model, states[last], wrong, self.rt.loss_fn, self.inner, base=base
        ).end
        self.controls.append(replay_distance(states[last], states[last + 1], replayed))

    def train_windows(self, windows: int, miners: Sequence[str], save: Path | None) -> list[dict]:
        """Train `windows` windows of every miner from the run's initial model, chained by the run's
        outer step, replaying each miner's window as soon as it is trained; returns the index of the
        saved states (empty when `save` is None)."""
        rt = self.rt
        global_params = rt.initial_params()
        outer = OuterState(momentum={})
        trials = []
        for window in range(windows):
            contributions = []
            for hotkey in miners:
                rt.load_params(global_params)
                started = time.perf_counter()
                result = inner_loop(
                    rt.model, batch_source(rt, window, hotkey, miners), rt.loss_fn, self.inner
                )
                synchronize(rt.device)
                self.train_seconds += time.perf_counter() - started
                states = [b.state for b in result.boundaries if b.state is not None]
                if save is not None:
                    trials.append(save_window(save, window, hotkey, miners, states, result.losses))
                self.replay_window(window, hotkey, miners, states, result.losses)
                contributions.append(
                    Contribution(key=hotkey, pseudo_gradient=result.pseudo_gradient, weight=1.0)
                )
            stepped = outer_step(global_params, contributions, outer, outer_config(rt.config.outer))
            global_params, outer = stepped.params, stepped.state
        return trials


def loss_drift(trained: Sequence[float], replayed: Sequence[float]) -> float:
    """The largest relative difference of a replayed step's loss from the trained one, as validators
    compare them (`validators/replay_check.py`)."""
    return max(abs(r - t) / max(abs(t), 1e-12) for t, r in zip(trained, replayed, strict=True))


def save_window(
    folder: Path,
    window: int,
    hotkey: str,
    miners: Sequence[str],
    states: Sequence[TrainState],
    losses: Sequence[float],
) -> dict:
    paths = []
    for state in states:
        path = Path(f"w{window:04d}") / hotkey / f"{state.step:06d}.safetensors"
        (folder / path).parent.mkdir(parents=True, exist_ok=True)
        save_state(state, folder / path)
        paths.append(str(path))
    return {
        "window": window,
        "hotkey": hotkey,
        "miners": list(miners),
        "states": paths,
        "losses": list(losses),
    }


def table_device(found: dict[str, str]) -> str:
    """The device model as the run config's tolerance table names it (`replay_class.device_name`)."""
    return found["gpu"] if found["device"] == "cuda" else f"cpu ({found['cpu_capability']})"


def tolerance_row(report: Report) -> list[str]:
    """The run config's `[[verification.tolerances]]` row for the two device models measured."""
    devices = json.dumps([table_device(report.trained_on), table_device(report.here)])
    return [
        "[[verification.tolerances]]",
        f"devices = {devices}",
        f"replay = {tolerance_text(report.recommended)}",
        f"loss = {tolerance_text(report.recommended_loss)}",
        f'measured = "bench/calibrate_replay.py, {report.date}, {report.rt.config.model.dtype}, torch {torch.__version__}"',
    ]


def device_label(found: dict[str, str]) -> str:
    return f"cuda ({found['gpu']})" if found["device"] == "cuda" else f"cpu ({found['cpu_capability']})"


def fingerprint_text(found: dict[str, str]) -> str:
    return ", ".join(f"{key} `{value}`" for key, value in found.items() if value)


def shown_path(path: Path) -> str:
    resolved = path.resolve()
    return str(resolved.relative_to(ROOT)) if resolved.is_relative_to(ROOT) else str(path)


@dataclass(frozen=True)
class Report:
    command: str
    date: str
    machine: Machine
    config_path: str
    rt: Runtime
    parameters: int
    inner: InnerConfig
    windows: int
    miners: tuple[str, ...]
    here: dict[str, str]
    trained_on: dict[str, str]
    replay: str
    safety_factor: float
    measured: list[Measured]
    controls: list[float]
    train_seconds: float
    replay_seconds: float
    total_seconds: float

    @property
    def summary(self) -> Summary:
        return summarize(self.measured)

    @property
    def recommended(self) -> float:
        return recommend(self.summary.max, self.safety_factor)

    @property
    def recommended_loss(self) -> float:
        return recommend(self.summary.max_loss_drift, self.safety_factor)

    @property
    def configured(self) -> float:
        return self.rt.config.verification.replay_tolerance

    @property
    def cross_device(self) -> bool:
        return table_device(self.here) != table_device(self.trained_on)

    @property
    def on_cpu(self) -> bool:
        return self.here["device"] == "cpu" and self.trained_on["device"] == "cpu"


def table_row(report: Report) -> list[str]:
    s = report.summary
    return [
        device_label(report.trained_on),
        device_label(report.here),
        report.replay,
        str(s.count),
        str(s.exact),
        distance_text(s.median),
        distance_text(s.p99),
        distance_text(s.max),
        f"{tolerance_text(report.recommended)} (max × {report.safety_factor:g})",
        tolerance_text(report.configured),
        distance_text(s.max_loss_drift),
        f"{tolerance_text(report.recommended_loss)} (max × {report.safety_factor:g})",
        distance_text(min(report.controls)),
    ]


def segment_rows(report: Report) -> list[list[str]]:
    k = report.inner.segment_steps
    rows = []
    for segment in range(report.inner.n_segments):
        these = [m for m in report.measured if m.segment == segment]
        s = summarize(these)
        rows.append(
            [
                str(segment),
                f"{segment * k}–{(segment + 1) * k}",
                str(s.count),
                str(s.exact),
                distance_text(s.median),
                distance_text(s.max),
            ]
        )
    return rows


def verdict_sentences(report: Report) -> list[str]:
    s, recommended, configured = report.summary, report.recommended, report.configured
    sentences = []
    if report.on_cpu:
        if s.max == 0.0 and s.exact == s.count:
            sentences.append(
                f"On the CPU the replay is bit-exact: all {s.count} replayed segments reached exactly the trained "
                "state (parameters, optimizer state and step hash the same), so the tolerance is 0.0 and "
                "validators compare state hashes."
            )
        else:
            differing = sorted(k for k in report.here if report.here[k] != report.trained_on.get(k))
            if differing:
                sentences.append(
                    f"Training and replay ran with different fingerprints ({', '.join(differing)} differ), "
                    "so bit equality is not expected."
                )
            sentences.append(
                f"On the CPU the replay was NOT bit-exact: {s.count - s.exact} of {s.count} segments differ "
                f"(max distance {distance_text(s.max)}). The project guarantees bit-exact CPU replays with equal "
                "fingerprints; check the thread count, ATEN_CPU_CAPABILITY and MKL_CBWR (distrai/train/determinism.py)."
            )
    else:
        sentences.append(
            f"Largest distance of {s.count} honest replays: {distance_text(s.max)}; recommended "
            f"`replay_tolerance = {tolerance_text(recommended)}` (max × {report.safety_factor:g}, rounded up)."
        )
        if s.max == 0.0:
            sentences.append(
                "Every replay was bit-exact on this device, which shows only that this GPU, driver and torch build "
                "repeat themselves; measure across the GPU models miners and validators will use "
                "(`--save-states` on one, `--replay-states` on the other) before setting 0.0."
            )
    control = min(report.controls)
    if recommended < control:
        sentences.append(
            f"Control: the last segment of every trained window ({len(report.controls)}), replayed on other data "
            f"(the same miner's batches of the next window), lands at least {distance_text(control)} away"
            + (f", {control / recommended:.3g}× the recommended tolerance" if recommended > 0 else "")
            + ", so the distance tells honest replays from training on other data."
        )
    else:
        sentences.append(
            f"Control: a replay on other data (the same miner's batches of the next window) lands as close as "
            f"{distance_text(control)}, within the recommended tolerance {tolerance_text(recommended)}: "
            "that tolerance would accept training on other data; lower --safety-factor or find the source of "
            "the honest distances."
        )
    if configured == recommended:
        sentences.append(f"The run config's `replay_tolerance` is already {tolerance_text(configured)}.")
    elif configured < s.max:
        sentences.append(
            f"The run config's `replay_tolerance` is {tolerance_text(configured)}, below the largest honest "
            f"distance: validators would reject honest miners. Set it to {tolerance_text(recommended)}."
        )
    else:
        sentences.append(
            f"The run config's `replay_tolerance` is {tolerance_text(configured)}; the measurement recommends "
            f"{tolerance_text(recommended)}."
        )
    drift = distance_text(s.max_loss_drift)
    if report.cross_device and recommended == 0.0:
        sentences.append(
            f"Replays between {table_device(report.trained_on)} and {table_device(report.here)} were bit-exact, "
            f"every step's loss included (drift {drift}): no row is needed for the pair, and none can ask for "
            "less than a positive bound; validators holding another class than the miner's compare within the "
            "run's default tolerance."
        )
    elif report.cross_device:
        sentences.append(
            f"Every replayed step's loss lies within {drift} of the trained one (relative); the row below, for "
            "the run config's `[[verification.tolerances]]`, holds the pair to "
            f"{tolerance_text(recommended)} at the end and {tolerance_text(report.recommended_loss)} per loss."
        )
    else:
        sentences.append(
            f"Trained and replayed on one device model ({table_device(report.here)}): every replayed step's loss "
            f"lies within {drift} of the trained one, and a validator holding the miner's replay class compares "
            "bit for bit, so the tolerance table needs no row for it; measure a pair of device models with "
            "`--save-states` on one and `--replay-states` on the other."
        )
    return sentences


def _markdown_table(headers: Sequence[str], rows: list[list[str]]) -> str:
    lines = ["| " + " | ".join(headers) + " |", "|" + "---|" * len(headers)]
    return "\n".join(lines + ["| " + " | ".join(row) + " |" for row in rows])


def _setup_lines(report: Report) -> list[str]:
    c, m, inner = report.rt.config, report.machine, report.inner
    t = c.train
    model = f"preset `{c.model.preset}`" if c.model.preset is not None else f"`{c.model.path_or_id}`"
    if report.trained_on == report.here:
        devices = [f"- device, training and replay: {fingerprint_text(report.here)}"]
    else:
        devices = [
            f"- trained on: {fingerprint_text(report.trained_on)}",
            f"- replayed on: {fingerprint_text(report.here)}",
        ]
    return [
        f"- date: {report.date}; total wall time of the command: {report.total_seconds:.0f} s "
        f"(training {report.train_seconds:.1f} s, replays {report.replay_seconds:.1f} s)",
        f"- machine: {m.cpu}, {m.cores} cores (shared); torch {m.torch}; Python {m.python}",
        *devices,
        f"- run config: `{report.config_path}` (name `{c.name}`, run id `{report.rt.run_id[:16]}…`): model "
        f"{model} ({c.model.dtype}, {report.parameters:,} parameters), task `{c.task.kind}`, seq_len "
        f"{c.data.seq_len}, batch {t.batch_size} in {inner.step.micro_batches} micro-batch(es), cpu_threads "
        f"{inner.step.cpu_threads}, inner AdamW lr {t.lr}",
        f"- trials: {report.windows} window(s) × {len(report.miners)} honest miner(s), each window H = "
        f"{inner.inner_steps} inner steps (the run's H is {t.inner_steps}) in {inner.n_segments} segments of "
        f"k = {inner.segment_steps}; windows chained by the run's outer step",
    ]


def procedure_lines(report: Report) -> list[str]:
    gpu = (
        "**GPU figures have not been measured yet**: the table above was measured on the CPU, and no GPU was "
        "used for this file. Step 1 is the command that produces them."
        if report.on_cpu
        else ""
    )
    lines = [
        "## Procedure",
        "",
        "For each of the trials the script trains one honest window with the project's `inner_loop` on the "
        "miner's assigned batches (`batch_indices`), keeping the state at every boundary (every k steps), then "
        "replays every segment with `replay_segment` from its start state on the same batches on the same "
        "device, in a separate model instance built from the run config (as a validator holds its own model), "
        "and measures `replay_distance(start, trained end, replayed end)` = ‖θ_replayed − θ_claimed‖ / "
        "‖θ_claimed − θ_start‖. A window's miners start from the global model, which the run's outer step "
        "moves between windows, so later windows start from a trained model. `configure_determinism(device)` "
        "is on (deterministic algorithms; on CUDA also `CUBLAS_WORKSPACE_CONFIG`, no TF32, no cuDNN "
        "autotuning). `--save-states DIR` writes every trained state; `--replay-states DIR` in another process "
        "or on another machine replays them there instead of training. The recommendation is the largest "
        "observed distance × the safety factor (`--safety-factor`, default 10), rounded up to two digits.",
        "",
        "## Calibrating the GPU tolerance before launch",
        "",
    ]
    if gpu:
        lines += [gpu, ""]
    lines += [
        "1. On a machine with the GPU model, driver, CUDA and torch build your nodes run, with the run config "
        "you will publish:",
        "",
        "   ```",
        "   python bench/calibrate_replay.py --device cuda --run.config path/to/run.toml",
        "   ```",
        "",
        "   This rewrites docs/replay-tolerance.md (`--output` writes elsewhere) with that machine's table. The "
        "script builds the run's data and model as nodes do (a hub dataset is streamed). It keeps one window's "
        "H/k + 1 boundary states in host memory at a time (parameters and both AdamW moments each); "
        "`--inner-steps`, `--windows` and `--hotkeys` make the run shorter.",
        "2. Miners and validators on different GPU models, drivers or torch builds do not repeat each other's "
        "bits. For every pair you expect (for example miners on A100s, validators on H100s), train and save "
        "on one and replay on the other:",
        "",
        "   ```",
        "   python bench/calibrate_replay.py --device cuda --run.config path/to/run.toml --save-states states/",
        "   # copy states/ to the other machine, then there:",
        "   python bench/calibrate_replay.py --device cuda --run.config path/to/run.toml --replay-states states/",
        "   ```",
        "",
        "   Take the largest recommended tolerance over all pairs. The folder holds (H/k + 1) states per "
        "trial; fewer `--windows`, `--hotkeys` or `--inner-steps` keep it small.",
        "3. Put the recommended value into the run config:",
        "",
        "   ```toml",
        "   [verification]",
        f"   replay_tolerance = {tolerance_text(report.recommended) if not report.on_cpu else '<recommended tolerance>'}",
        "   ```",
        "",
        "   The tolerance is part of the run id: changing it changes the run commitment the owner publishes, "
        "so set it before launch. A tolerance of 0.0 makes validators compare state hashes (right on the "
        "CPU, where the replay is bit-exact: the shipped cpu-localnet config has 0.0). A larger tolerance "
        "lets a miner's segment drift further from the honest computation unnoticed, so keep the safety "
        "factor no larger than needed for honest replays on the hardware mix you expect.",
    ]
    return lines


def markdown(report: Report, notes: str = "") -> str:
    lines = [
        "# Replay tolerance",
        "",
        "Written by `bench/calibrate_replay.py`. The command that produced these numbers:",
        "",
        "```",
        report.command,
        "```",
        "",
        *_setup_lines(report),
        "",
        "## Measured distances",
        "",
        _markdown_table(HEADERS, [table_row(report)]),
        "",
        "Distances are `replay_distance` of each replayed segment; p99 is the nearest-rank percentile; "
        '"bit-exact states" counts replays whose state (parameters, optimizer state, step) hashes the same '
        "as the trained one.",
        "",
        "## By segment",
        "",
        _markdown_table(SEGMENT_HEADERS, segment_rows(report)),
        "",
        "## Recommendation",
        "",
        *[f"- {sentence}" for sentence in verdict_sentences(report)],
        "",
        *(
            ["```toml", *tolerance_row(report), "```", ""]
            if report.cross_device and report.recommended
            else []
        ),
        *procedure_lines(report),
        "",
        NOTES_MARKER,
    ]
    return "\n".join(lines) + "\n" + notes


def print_tables(report: Report, console: Console) -> None:
    table = Table(title=f"Replay distances ({report.summary.count} honest segments)")
    for header in HEADERS:
        table.add_column(header, justify="left" if header in HEADERS[:3] else "right")
    table.add_row(*table_row(report))
    console.print(table)
    for sentence in verdict_sentences(report):
        console.print(f"• {sentence}")
    if report.cross_device and report.recommended:
        console.print("\n".join(tolerance_row(report)), markup=False)


def replay_saved(calibration: Calibration, folder: Path, rt: Runtime) -> dict:
    """Replay the states of a --save-states run; returns its index."""
    index = json.loads((folder / INDEX_FILE).read_text())
    if index.get("format") != INDEX_FORMAT:
        raise SystemExit(f"{folder / INDEX_FILE} is not an index written by --save-states")
    if index["run_id"] != rt.run_id:
        raise SystemExit(
            f"{folder} holds states of run {index['run_id'][:16]}…, but the run config is run {rt.run_id[:16]}…: "
            "pass the --run.config the states were trained with"
        )
    for trial in index["trials"]:
        states = [load_state(folder / path) for path in trial["states"]]
        calibration.replay_window(trial["window"], trial["hotkey"], trial["miners"], states, trial["losses"])
    return index


def main(argv: list[str]) -> None:
    args = parse_args(argv)
    started = time.perf_counter()
    configure_determinism(args.device)
    console = Console(width=180)
    config = load_run_config(args.run_config)
    data_folder = tempfile.TemporaryDirectory(prefix="calibrate-data-")  # removed when the run ends
    rt = local_runtime(config, Path(data_folder.name), args.device, args.data_store, args.data_endpoint)
    here = fingerprint(args.device)
    inner_steps = rt.inner.inner_steps
    if args.quick:
        inner_steps = min(inner_steps, 2 * rt.inner.segment_steps)
    if args.inner_steps is not None:
        inner_steps = args.inner_steps
    miners = tuple(f"miner-{i}" for i in range(args.hotkeys))
    windows = args.windows
    if args.replay_states is not None:
        index = json.loads((args.replay_states / INDEX_FILE).read_text())
        inner_steps, windows = index["inner_steps"], index["windows"]
        miners = tuple(index["miners"])
    try:
        inner = dataclasses.replace(rt.inner, inner_steps=inner_steps)
    except ValueError as exc:
        raise SystemExit(f"--inner-steps: {exc}") from None

    if args.replay_states is not None:
        console.print(f"replaying the states in {args.replay_states} on {args.device} …")
        calibration = Calibration(rt, inner, rt.model)
        trained_on = replay_saved(calibration, args.replay_states, rt)["trained_on"]
        replay = "another process, states from --replay-states"
    else:
        console.print(
            f"training {windows} window(s) × {len(miners)} miner(s) of {inner.inner_steps} steps on {args.device}, "
            "replaying every segment …"
        )
        replay_model = load_model(model_spec(config.model), tokenizer=rt.tokenizer, device=args.device)
        calibration = Calibration(rt, inner, replay_model)
        if args.save_states is not None:
            args.save_states.mkdir(parents=True, exist_ok=True)
        trials = calibration.train_windows(windows, miners, args.save_states)
        trained_on = here
        replay = "same process, separate model instance"
        if args.save_states is not None:
            index = {
                "format": INDEX_FORMAT,
                "run_id": rt.run_id,
                "inner_steps": inner.inner_steps,
                "windows": windows,
                "miners": list(miners),
                "trained_on": here,
                "trials": trials,
            }
            (args.save_states / INDEX_FILE).write_text(json.dumps(index, indent=1))

    report = Report(
        command=shlex.join(["python", *sys.argv]),
        date=datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC"),
        machine=Machine.here(),
        config_path=shown_path(args.run_config),
        rt=rt,
        parameters=count_parameters(rt.model),
        inner=inner,
        windows=windows,
        miners=miners,
        here=here,
        trained_on=trained_on,
        replay=replay,
        safety_factor=args.safety_factor,
        measured=calibration.measured,
        controls=calibration.controls,
        train_seconds=calibration.train_seconds,
        replay_seconds=calibration.replay_seconds,
        total_seconds=time.perf_counter() - started,
    )
    print_tables(report, console)
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(markdown(report, kept_notes(args.output)))
    console.print(f"wrote {args.output} in {report.total_seconds:.0f} s")


if __name__ == "__main__":
    main(sys.argv[1:])
