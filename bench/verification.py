"""Verification benchmark: every adversary against two validators on a local network; writes
docs/verification.md.

1. The adversary run (bench/verification.toml: each validator replays one segment of 32 of every
   miner): honest miners beside one miner per adversary type, all as separate processes through
   the real entry points. Per type: the share of its window-verifications rejected, the check that
   rejected it, and its share of the emissions. Honest miners: window-verifications and false
   rejections. Each validator's verification time (revealed states read and hashed, segments
   replayed, update re-encoded) as a fraction of the miners' training time, from the validators'
   reports and the miners' metrics of the same run; the bytes a challenged miner reveals.
2. Held-out loss of the global model with 30% adversarial miners (scaled, noise, lazy) against the
   same honest miners alone, on the shipped CPU run config.
3. The odds of catching a miner that fakes a quarter of its segments within 10 windows with two
   validators: the calculation, and the rate measured over the project's own challenge draws.

    python bench/verification.py            # about 35 minutes on 2 cores
    python bench/verification.py --quick    # a few minutes; every code path, meaningless numbers
"""

from __future__ import annotations

import argparse
import math
import secrets
import shlex
import statistics
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

from _report import NOTES_MARKER, Machine, kept_notes
from rich.console import Console
from rich.table import Table

from distrai.localnet.network import Localnet, LocalnetOptions
from distrai.localnet.view import heldout_curve, processed_windows, signed_reports
from distrai.node.metrics import read_metrics
from distrai.node.metrics_records import MetricsLine, RevealRecord, TrainRecord
from distrai.node.wallets import open_wallet
from distrai.protocol.run import RunConfig, load_run_config, shipped_config_path
from distrai.protocol.windows import ChallengeInputs, challenge_count, challenged, miner_segments
from distrai.wire.window_documents import MinerEntry, WindowReport
from miners.adversaries import ADVERSARIES, EXPECTED_CHECK

ROOT = Path(__file__).resolve().parent.parent
DEFAULT_OUTPUT = ROOT / "docs" / "verification.md"
BENCH_CONFIG = Path(__file__).resolve().parent / "verification.toml"
DAMAGING = ("scaled", "noise", "lazy")
VALIDATORS = 2
BLOCK_TIME = 1.0
STARTUP_S = 180.0
"""How long a network's nodes may take to start, beyond its windows, before it counts as stuck."""
CATCH_WINDOWS = 10
FAKED_SHARE = 0.25


@dataclass(frozen=True)
class Plan:
    honest: int = 4
    windows: int = 10
    loss_honest: int = 7
    loss_windows: int = 6
    catch_trials: int = 20_000


QUICK = Plan(honest=2, windows=2, loss_honest=2, loss_windows=2, catch_trials=500)


@dataclass
class RunResult:
    name: str
    windows: list[int]
    reports: list[WindowReport]
    hotkeys: dict[str, str]
    """neuron name → hotkey"""
    emission: dict[str, float]
    miner_metrics: dict[str, list[MetricsLine]]
    heldout: list[float]
    """held-out loss of G at the first window's start, then after each validated window"""
    seconds: float
    behaviour: dict[str, str] = field(default_factory=dict)
    """hotkey → 'honest' or the adversary type"""


def network(
    work: Path,
    config: Path,
    honest: int,
    adversaries: tuple[str, ...],
    windows: int,
    warm_start: bool = False,
) -> Localnet:
    """A network of the bench, not yet set up: `honest` miners and one miner per adversary type in
    `adversaries`, `VALIDATORS` validators, `windows` windows at 1 s per block (the suite's adversary
    network is one, `tests/support/adversary_net.py`, its nodes forked from a warm interpreter)."""
    return Localnet(
        LocalnetOptions(
            work=work,
            miners=honest,
            validators=VALIDATORS,
            windows=windows,
            block_time=BLOCK_TIME,
            adversaries=adversaries,
            run_config=config,
            warm_start=warm_start,
        )
    )


def launch(name: str, net: Localnet, env: Mapping[str, str] | None = None) -> Localnet:
    """Set `net` up, say what it runs and start its nodes (in `env`, else this process's environment)."""
    net.setup()
    adversaries = list(net.options.adversaries) or "none"
    Console().print(
        f"[bold]{name}[/]: {net.options.miners} honest miners, adversaries {adversaries}, "
        f"{net.options.windows} windows; logs in {net.work / 'logs'}"
    )
    net.start(env)
    return net


def finished(name: str, net: Localnet, seconds: float) -> RunResult:
    """What the tables read of a network that has ended; SystemExit naming every node that exited
    with an error."""
    failed = net.failed()
    if failed:
        raise SystemExit(f"{name}: {failed} exited with an error; logs in {net.work / 'logs'}")
    return network_result(name, net, seconds)


@dataclass(frozen=True)
class NetworkPlan:
    """One of the bench's networks: its name in the report, its folder under the bench's work folder,
    its run config, its honest miners, one miner per adversary type in `adversaries`, and its windows."""

    name: str
    folder: str
    config: Path
    honest: int
    adversaries: tuple[str, ...]
    windows: int


def run_network(spec: NetworkPlan, work: Path) -> RunResult:
    """`spec`'s network launched in `work / spec.folder`, waited for until its nodes have exited (its
    windows and `STARTUP_S`, else SystemExit), stopped, and read by `finished`."""
    started = time.perf_counter()
    folder = work / spec.folder
    net = launch(spec.name, network(folder, spec.config, spec.honest, spec.adversaries, spec.windows))
    try:
        if not net.wait(STARTUP_S + (spec.windows + 2) * net.config.windows.blocks_per_window * BLOCK_TIME):
            raise SystemExit(
                f"{spec.name}: the network did not finish its windows; logs in {folder / 'logs'}"
            )
    finally:
        net.stop()
    return finished(spec.name, net, time.perf_counter() - started)


def network_result(name: str, net: Localnet, seconds: float) -> RunResult:
    """What the tables read of a finished network: its validators' signed reports of the windows they
    processed, the emission of every miner (`miner{i}` honest, `adversary-{type}` the adversaries), the
    miners' metrics and the held-out loss of each window's global model."""
    done = processed_windows(net)
    hotkeys = {
        n.name: open_wallet(n.name, "default", str(net.wallet_path)).hotkey.ss58_address for n in net.neurons
    }
    mg = net.chain.metagraph()
    behaviour = {hotkeys[f"miner{i}"]: "honest" for i in range(net.options.miners)}
    behaviour.update({hotkeys[f"adversary-{a}"]: a for a in net.options.adversaries})
    return RunResult(
        name=name,
        windows=done,
        reports=signed_reports(net, done),
        hotkeys=hotkeys,
        emission={hk: mg.neuron(hk).total_emission for hk in behaviour},
        miner_metrics={
            hotkeys[n.name]: read_metrics(n.work_dir / "metrics.jsonl")
            for n in net.neurons
            if n.role == "miner" and (n.work_dir / "metrics.jsonl").exists()
        },
        heldout=heldout_curve(net, done),
        seconds=seconds,
        behaviour=behaviour,
    )


# -- the adversary run's tables -------------------------------------------------------------------


def verdict_entries(run: RunResult) -> list[tuple[int, str, str, MinerEntry]]:
    """(window, validator, miner hotkey, report entry) for every window-verification."""
    return [(r.window, r.validator, hk, entry) for r in run.reports for hk, entry in r.miners.items()]


def adversary_rows(run: RunResult) -> list[list[str]]:
    total = sum(run.emission.values()) or 1.0
    honest = [e for hk, e in run.emission.items() if run.behaviour[hk] == "honest"]
    honest_mean = statistics.mean(honest) if honest else 0.0
    rows = []
    for kind in ADVERSARIES:
        hk = next((h for h, b in run.behaviour.items() if b == kind), None)
        if hk is None:
            continue
        entries = [e for _, _, miner, e in verdict_entries(run) if miner == hk]
        reasons = [e.reason for e in entries if e.reason is not None]
        first_checks = Counter(r.split(":", 1)[0] for r in reasons if not r.startswith("banned"))
        rows.append(
            [
                kind,
                EXPECTED_CHECK[kind],
                ", ".join(f"{c} ×{n}" for c, n in first_checks.most_common()) or "—",
                f"{len(reasons)}/{len(entries)}",
                f"{100 * len(reasons) / len(entries):.0f}%" if entries else "—",
                f"{100 * run.emission[hk] / total:.2f}%",
                f"{100 * run.emission[hk] / honest_mean:.2f}%" if honest_mean else "—",
            ]
        )
    return rows


def honest_counts(runs: list[RunResult]) -> list[list[str]]:
    rows = []
    for run in runs:
        entries = [e for _, _, hk, e in verdict_entries(run) if run.behaviour.get(hk) == "honest"]
        false = [e.reason for e in entries if e.reason is not None]
        replayed = sum(1 for e in entries if "replay" in e.verdicts)
        rows.append(
            [run.name, str(len(entries)), str(replayed), str(len(false)), "; ".join(false[:3]) or "—"]
        )
    return rows


def cost_rows(run: RunResult) -> tuple[list[list[str]], dict[str, float]]:
    """Per validator: verification seconds over the miners' training seconds, same windows (NaN where
    it replayed no step or the miners trained none: nothing was measured)."""
    windows = set(run.windows)
    trains = [
        r.record
        for records in run.miner_metrics.values()
        for r in records
        if r.window in windows and isinstance(r.record, TrainRecord)
    ]
    train_seconds = sum(t.train_seconds for t in trains)
    train_steps = sum(t.steps_trained for t in trains)
    rows, fractions = [], {}
    for validator in sorted({r.validator for r in run.reports}):
        mine = [r for r in run.reports if r.validator == validator]
        seconds = sum(e.numbers.get("replay_seconds", 0.0) for r in mine for e in r.miners.values())
        steps = sum(e.numbers.get("replay_steps", 0.0) for r in mine for e in r.miners.values())
        name = next(n for n, hk in run.hotkeys.items() if hk == validator)
        fractions[name] = seconds / train_seconds if train_seconds and steps else math.nan
        rows.append(
            [
                name,
                f"{seconds:.1f}",
                f"{train_seconds:.1f}",
                f"{100 * fractions[name]:.2f}%",
                f"{steps:.0f} / {train_steps:.0f} = {100 * steps / max(train_steps, 1):.2f}%",
            ]
        )
    return rows, fractions


def revealed_bytes(run: RunResult) -> tuple[float, float]:
    """Median bytes an honest miner revealed per window beyond its update, and its median update."""
    honest = [hk for hk, b in run.behaviour.items() if b == "honest"]
    records = [
        r.record for hk in honest for r in run.miner_metrics.get(hk, []) if r.window in set(run.windows)
    ]
    revealed = [r.revealed_bytes for r in records if isinstance(r, RevealRecord)]
    update = [r.bytes_sent for r in records if isinstance(r, TrainRecord)]
    return (statistics.median(revealed) if revealed else 0.0, statistics.median(update) if update else 0.0)


def loss_table(with_adversaries: RunResult, without: RunResult) -> str:
    """Held-out loss after the same number of validated windows, and what the adversaries got in."""
    rows = []
    for j in range(min(len(with_adversaries.heldout), len(without.heldout))):
        a, b = with_adversaries.heldout[j], without.heldout[j]
        rows.append([str(j), f"{a:.4f}", f"{b:.4f}", f"{a / b:.4f}"])
    entries = [(hk, e) for _, _, hk, e in verdict_entries(with_adversaries)]
    accepted = Counter(with_adversaries.behaviour[hk] for hk, e in entries if e.reason is None)
    checked = Counter(with_adversaries.behaviour[hk] for hk, _ in entries)
    summary = ", ".join(f"{kind} {accepted[kind]}/{checked[kind]}" for kind in DAMAGING)
    return (
        md_table(["validated windows", "30% adversarial", "no adversaries", "ratio"], rows)
        + f"\n\nWindow-verifications of the adversaries that passed (not challenged, and useful enough): {summary}."
    )


# -- the odds of catching a partial faker ---------------------------------------------------------


def catch_probability(n_segments: int, faked: int, per_miner: int, miner_share: float, windows: int) -> float:
    """P(the faker's last `faked` segments are replayed within `windows`): a window challenges the
    miner with `miner_share`, and its replay is one cyclic run of `per_miner` consecutive segments
    from a uniform first one, the same for every validator whose share holds the miner."""
    run_hits = sum(
        any((first + i) % n_segments >= n_segments - faked for i in range(per_miner))
        for first in range(n_segments)
    )
    per_window = miner_share * run_hits / n_segments
    return 1.0 - (1.0 - per_window) ** windows


def measured_catch_rate(config, miners: int, trials: int) -> float:
    """The same event over the project's own challenge draws, with random block hashes."""
    n = config.train.inner_steps // config.train.segment_steps
    faked = set(range(n - round(FAKED_SHARE * n), n))
    hotkeys = tuple(f"5{secrets.token_hex(23)}" for _ in range(miners))
    target = hotkeys[0]
    caught = 0
    for _ in range(trials):
        for w in range(CATCH_WINDOWS):
            inputs = ChallengeInputs(
                block_hash="0x" + secrets.token_hex(32),
                run_id="bench",
                window=w,
                miner_hotkeys=hotkeys,
                miners_challenged=config.verification.challenge_miners,
                segments_per_miner=config.verification.challenge_segments,
            )
            if target in challenged(inputs) and faked & set(miner_segments(inputs, target, n)):
                caught += 1
                break
    return caught / trials


# -- the targets ---------------------------------------------------------------------------------

HONEST_VERIFICATIONS = 200
"""Honest window-verifications the false-rejection target needs before it can be judged."""
COST_TARGET = 0.05
CATCH_TARGET = 0.99


@dataclass(frozen=True)
class Target:
    text: str
    """what was measured and what the target is"""
    met: bool | None
    """None: not measured (too few verifications, nothing replayed)"""

    def line(self) -> str:
        verdict = "not measured" if self.met is None else "met" if self.met else "MISSED"
        return f"- {self.text}: {verdict}."


def targets(
    honest: list[list[str]], fractions: dict[str, float], predicted: float, measured: float
) -> list[Target]:
    """The verdicts of docs/verification.md's Targets from the honest rows (`honest_counts`), each
    validator's cost fraction (`cost_rows`) and the computed and measured odds of catching a
    quarter-faker. A target whose measurement is missing or too small to judge is not measured."""
    verifications = sum(int(row[1]) for row in honest)
    false = sum(int(row[3]) for row in honest)
    lines = [
        Target(
            f"Honest false rejections: {false} over {verifications} honest window-verifications; "
            f"target 0 over at least {HONEST_VERIFICATIONS}",
            False if false else (True if verifications >= HONEST_VERIFICATIONS else None),
        )
    ]
    for name, f in fractions.items():
        text = f"Verification cost of {name}: {100 * f:.2f}% of the miners' training time; target ≤ {100 * COST_TARGET:.0f}%"
        lines.append(Target(text, None if math.isnan(f) else f <= COST_TARGET))
    lines.append(
        Target(
            f"Catching a quarter-faker within {CATCH_WINDOWS} windows: {predicted:.4f} computed, "
            f"{measured:.4f} measured; target ≥ {CATCH_TARGET}",
            min(predicted, measured) >= CATCH_TARGET,
        )
    )
    return lines


# -- the report -----------------------------------------------------------------------------------


def md_table(headers: list[str], rows: list[list[str]]) -> str:
    lines = ["| " + " | ".join(headers) + " |", "|" + "---|" * len(headers)]
    return "\n".join(lines + ["| " + " | ".join(row) + " |" for row in rows])


ADVERSARY_HEADERS = [
    "adversary",
    "caught by",
    "rejections by check (first failed)",
    "window-verifications rejected",
    "share rejected",
    "share of all emission",
    "emission vs mean honest miner",
]
HONEST_HEADERS = ["run", "honest window-verifications", "with replay", "false rejections", "reasons"]
COST_HEADERS = [
    "validator",
    "verification s",
    "miners' training s",
    "fraction",
    "replayed steps / trained steps",
]


@dataclass(frozen=True)
class Runs:
    """The bench's three networks."""

    adversarial: RunResult
    with_30: RunResult
    """the damaging adversaries beside the loss runs' honest miners, 30% of the miners"""
    honest_only: RunResult


def networks(plan: Plan) -> tuple[NetworkPlan, NetworkPlan, NetworkPlan]:
    """The bench's three networks: the adversary run on `BENCH_CONFIG` with every adversary type, and
    the two loss runs on the shipped CPU config, the same honest miners and windows with and without
    the damaging adversaries."""
    cpu_config = shipped_config_path("cpu-localnet")
    return (
        NetworkPlan("adversary run", "a", BENCH_CONFIG, plan.honest, tuple(ADVERSARIES), plan.windows),
        NetworkPlan("30% adversarial", "b", cpu_config, plan.loss_honest, DAMAGING, plan.loss_windows),
        NetworkPlan("no adversaries", "c", cpu_config, plan.loss_honest, (), plan.loss_windows),
    )


def run_all(plan: Plan, work: Path) -> Runs:
    return Runs(*(run_network(spec, work) for spec in networks(plan)))


@dataclass(frozen=True)
class Findings:
    """What the report says of three finished runs, the adversary run's on `config`."""

    config: RunConfig
    adversaries: list[list[str]]
    honest: list[list[str]]
    cost: list[list[str]]
    fractions: dict[str, float]
    revealed: float
    update: float
    segments: int
    miners: int
    share: float
    predicted: float
    measured: float

    @property
    def targets(self) -> list[Target]:
        return targets(self.honest, self.fractions, self.predicted, self.measured)

    def tables(self) -> list[tuple[str, list[str], list[list[str]]]]:
        return [
            ("adversaries", ADVERSARY_HEADERS, self.adversaries),
            ("honest miners", HONEST_HEADERS, self.honest),
            ("validator cost", COST_HEADERS, self.cost),
        ]


def findings(runs: Runs, plan: Plan, config: RunConfig) -> Findings:
    n = config.train.inner_steps // config.train.segment_steps
    miners = plan.honest + len(ADVERSARIES)
    share = challenge_count(config.verification.challenge_miners, miners) / miners
    cost, fractions = cost_rows(runs.adversarial)
    revealed, update = revealed_bytes(runs.adversarial)
    return Findings(
        config=config,
        adversaries=adversary_rows(runs.adversarial),
        honest=honest_counts([runs.adversarial, runs.with_30, runs.honest_only]),
        cost=cost,
        fractions=fractions,
        revealed=revealed,
        update=update,
        segments=n,
        miners=miners,
        share=share,
        predicted=catch_probability(
            n, round(FAKED_SHARE * n), config.verification.challenge_segments, share, CATCH_WINDOWS
        ),
        measured=measured_catch_rate(config, miners, plan.catch_trials),
    )


def markdown(found: Findings, runs: Runs, plan: Plan, command: str, seconds: float, machine: Machine) -> str:
    """docs/verification.md above its kept notes."""
    bench_config, n, share = found.config, found.segments, found.share
    adversarial, with_30 = runs.adversarial, runs.with_30
    lines = [
        "# Verification by recomputation",
        "",
        "Written by `bench/verification.py`. The command that produced these numbers:",
        "",
        f"```\n{command}\n```",
        "",
        f"- date: {datetime.now(UTC):%Y-%m-%d %H:%M} UTC; total wall time: {seconds:.0f} s",
        f"- machine: {machine.cpu}, {machine.cores} cores (shared); torch {machine.torch}; Python {machine.python}",
        f"- adversary run: `bench/verification.toml` (H = {bench_config.train.inner_steps}, "
        f"k = {bench_config.train.segment_steps}, challenged in each window: "
        f"{bench_config.verification.challenge_miners} of the miners, "
        f"{bench_config.verification.challenge_segments} segment of {n} each, replayed by "
        f"{bench_config.verification.replicas} validator(s); ban "
        f"{bench_config.scoring.ban_windows} windows); {plan.honest} honest miners and one miner per "
        f"adversary type, {VALIDATORS} validators, windows {adversarial.windows[0]}–{adversarial.windows[-1]}, "
        f"{adversarial.seconds:.0f} s",
        f"- loss runs: `distrai/configs/cpu-localnet.toml`, {plan.loss_honest} honest miners with and without "
        f"{', '.join(DAMAGING)} ({100 * len(DAMAGING) / (plan.loss_honest + len(DAMAGING)):.0f}% adversarial), "
        f"{plan.loss_windows} windows each",
        "",
        "## Adversaries",
        "",
        "Every window-verification is one validator's verdict on one miner in one window; a barred",
        "miner's windows count as rejected (`banned`).",
        "",
        md_table(ADVERSARY_HEADERS, found.adversaries),
        "",
        "## Honest miners",
        "",
        md_table(HONEST_HEADERS, found.honest),
        "",
        "## Validator cost",
        "",
        "Verification time per validator (reading, decoding and hashing the revealed states,",
        "replaying the challenged segments, re-encoding the update from the last state) over the",
        "training time of all miners, summed over the same windows of the adversary run.",
        "",
        md_table(COST_HEADERS, found.cost),
        "",
        f"A challenged honest miner reveals a median {found.revealed / 1e6:.1f} MB per window beyond its "
        f"{found.update / 1e3:.0f} kB update and manifest (the start state of its run of challenged segments, "
        "parameters and AdamW moments, unless the run starts at segment 0, and its trajectory reveal).",
        "",
        "## The global model with 30% adversarial miners",
        "",
        "Held-out loss of the global model after the same number of validated windows (0: the",
        "initial model), with the honest miners alone and with three adversaries beside them.",
        "",
        loss_table(with_30, runs.honest_only),
        "",
        "## Catching a miner that fakes a quarter of its segments",
        "",
        f"With n = {n} segments of which the last m = {round(FAKED_SHARE * n)} are faked (as `lazy` does), "
        f"the window's seed challenging a miner with probability q = {share:.2f}, and every "
        f"validator whose share holds it replaying the same run of s = {bench_config.verification.challenge_segments} "
        "consecutive segments from a uniform first one (wrapping round; one draw per window, so the reveal "
        "does not grow with the validators), the faker is caught in one window with probability "
        "p = q · (m + s − 1)/n, and within "
        f"{CATCH_WINDOWS} windows with probability 1 − (1 − p)^{CATCH_WINDOWS} = **{found.predicted:.4f}**. "
        f"Measured over {plan.catch_trials:,} trials of the project's challenge draws "
        f"(`distrai.protocol.windows.challenged` and `miner_segments`, random block hashes, {found.miners} miners): **{found.measured:.4f}**.",
        "",
        "## Targets",
        "",
        *[target.line() for target in found.targets],
        "",
        NOTES_MARKER,
    ]
    return "\n".join(lines) + "\n"


def main(argv: list[str]) -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--quick", action="store_true", help="tiny sizes, for the smoke test")
    parser.add_argument("--output", type=Path, default=DEFAULT_OUTPUT)
    args = parser.parse_args(argv)
    plan = QUICK if args.quick else Plan()
    console = Console(width=160)
    started = time.perf_counter()
    with tempfile.TemporaryDirectory() as tmp:
        runs = run_all(plan, Path(tmp))
    found = findings(runs, plan, load_run_config(BENCH_CONFIG))
    command = "python bench/verification.py" + (" --quick" if args.quick else "")
    if args.output != DEFAULT_OUTPUT:
        command += f" --output {shlex.quote(str(args.output))}"
    text = markdown(found, runs, plan, command, time.perf_counter() - started, Machine.here())
    text += kept_notes(args.output)
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(text)
    for title, headers, rows in found.tables():
        table = Table(title=title)
        for h in headers:
            table.add_column(h)
        for row in rows:
            table.add_row(*row)
        console.print(table)
    for target in found.targets:
        console.print(target.line())
    console.print(f"wrote {args.output}")


if __name__ == "__main__":
    main(sys.argv[1:])
