"""Shared verification at scale; writes docs/verification-scale.md.

1. A real run on CPU (bench/verification-scale.toml, tiny model): 60 honest miners and 4 that cheat
   in ways only a replay catches, 4 validators sharing the replays, as separate processes through
   the real entry points (the honest miners 8 to a process, `bench/_miner_swarm.py`: a process per
   miner would need 32 GB; each cheater in a process of its own, with a store of its own). Per
   validator and window, from its signed report and metrics: the miners it replayed, the bytes it
   downloaded, its seconds, the findings it published and re-checked; per window, the share of the
   miners replayed by anyone and the miners' median steps.
2. The same accounting computed for the GPU config at 256 miners and 16 validators
   (`bench/_scale_accounting.py`), with the targets.

    python bench/verification_scale.py            # about 15 minutes on 2 cores
    python bench/verification_scale.py --quick    # 8 honest miners, the 4 cheaters, 2 validators, 2 short windows

A --quick run writes the whole page, but whether a cheater is challenged (and so caught) is drawn each
window. Its blocks are 0.5 s (the bench config's phases are sized for 64 miners at 1-s blocks; a dozen
need half): alone on 2 cores, `--quick --warm-start` took 144 s and 53 CPU-s (282 s and 55 CPU-s at
1-s blocks; 281 s and 109 CPU-s at 1-s blocks without the warm start). The test suite runs it so, as
a background job that tests/test_bench_verification_scale.py reads.
"""

from __future__ import annotations

import argparse
import dataclasses
import shlex
import statistics
import sys
import tempfile
import time
from collections import defaultdict
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from _report import NOTES_MARKER, Machine, kept_notes
from _scale_accounting import ScaleAccounting, account
from rich.console import Console
from rich.table import Table

from distrai.localnet.network import REPO, Localnet, LocalnetOptions
from distrai.localnet.view import processed_windows, signed_reports
from distrai.node import linkcheck
from distrai.node.metrics import read_metrics
from distrai.node.metrics_records import MetricsLine, TrainRecord, ValidatorWindowRecord
from distrai.node.wallets import open_wallet
from distrai.protocol.run import load_run_config, shipped_config_path
from distrai.wire.window_documents import MinerEntry, WindowReport

ROOT = Path(__file__).resolve().parent.parent
DEFAULT_OUTPUT = ROOT / "docs" / "verification-scale.md"
BENCH_CONFIG = Path(__file__).resolve().parent / "verification-scale.toml"
SWARM = Path(__file__).resolve().parent / "_miner_swarm.py"
CHEATERS = ("wrongdata", "lazy", "oldbase", "forged")
GPU_MINERS, GPU_VALIDATORS = 256, 16
GPU_STEPS = 1840
"""an H100 miner's steps per window on the shipped step: 46 segments of 40 at 0.643 s a step, measured
(docs/gpu.md; docs/protocol.md, "How long a miner trains")"""
LINK_BITS = 200e6
GPU_BLOCK_SECONDS = 12.0


@dataclass(frozen=True)
class Plan:
    honest: int = 60
    validators: int = 4
    windows: int = 5
    per_process: int = 8
    block_time: float = 1.0
    """seconds a block of the embedded chain: the bench config's phases are sized for 64 miners at 1 s"""


QUICK = Plan(honest=8, validators=2, windows=2, per_process=6, block_time=0.5)


class SwarmLocalnet(Localnet):
    """A local network whose honest miners run several to a process (`bench/_miner_swarm.py`).

    `Localnet.setup` adds every node through `_add`; an honest single-process miner is held back
    here with its flags, and the held miners with the same flags are then added in groups, each
    group as one `_add` of Localnet's whose script is swapped for the swarm's. Every other node (the
    validators, and the cheaters, each with a store of its own) is added by Localnet unchanged."""

    def __init__(self, options: LocalnetOptions, per_process: int):
        super().__init__(options)
        self.per_process = per_process
        self.held: dict[tuple[str, ...], list[str]] = defaultdict(list)
        """a miner's extra flags → the names of the honest miners added with them"""

    def _add(
        self, role: str, name: str, extra: list[str], ranks: int = 1, store_url: str | None = None
    ) -> None:
        if role == "miner" and ranks == 1 and store_url is None and "--miner.adversary" not in extra:
            self.held[tuple(extra)].append(name)
            return
        super()._add(role, name, extra, ranks, store_url)

    def setup(self) -> None:
        super().setup()
        for extra, names in self.held.items():
            for i in range(0, len(names), self.per_process):
                group = names[i : i + self.per_process]
                super()._add("miner", f"swarm-{group[0]}", list(extra))
                host = self.neurons[-1]
                args = list(host.args)
                for flag in ("--wallet.name", "--work.dir"):
                    at = args.index(flag)
                    del args[at : at + 2]
                at = args.index(str(REPO / "neurons" / "miner.py"))
                args[at : at + 1] = [str(SWARM), *group]
                self.neurons[-1] = dataclasses.replace(
                    host, args=[*args, "--work.root", str(self.work / "nodes")]
                )


@dataclass
class Run:
    windows: list[int]
    reports: list[WindowReport]
    validator_metrics: dict[str, list[MetricsLine]]
    """validator hotkey → its metrics records"""
    miner_steps: dict[int, list[int]]
    """window → every miner's steps trained"""
    behaviour: dict[str, str]
    """miner hotkey → "honest" or its adversary type"""
    seconds: float


def swarm_network(plan: Plan, work: Path, warm_start: bool = False) -> SwarmLocalnet:
    """The bench's network for `plan` in folder `work`, not yet set up."""
    return SwarmLocalnet(
        LocalnetOptions(
            work=work,
            miners=plan.honest,
            validators=plan.validators,
            windows=plan.windows,
            block_time=plan.block_time,
            adversaries=CHEATERS,
            run_config=BENCH_CONFIG,
            warm_start=warm_start,
        ),
        plan.per_process,
    )


def run_network(plan: Plan, work: Path, console: Console, warm_start: bool = False) -> Run:
    started = time.perf_counter()
    net = swarm_network(plan, work, warm_start)
    net.setup()
    bpw = net.config.windows.blocks_per_window
    console.print(
        f"[bold]{plan.honest} honest miners and {len(CHEATERS)} cheaters in "
        f"{len(net.neurons) - plan.validators} processes, {plan.validators} validators, {plan.windows} windows[/]"
    )
    net.start()
    try:
        if not net.wait(240 + (plan.windows + 2) * bpw * plan.block_time):
            raise SystemExit(f"the network did not finish its windows; logs in {work / 'logs'}")
    finally:
        net.stop()
    failed = [n.name for n in net.neurons if n.process.returncode != 0]
    if failed:
        raise SystemExit(f"{failed} exited with an error; logs in {work / 'logs'}")
    windows = processed_windows(net)

    def hotkey(name: str) -> str:
        return open_wallet(name, "default", str(net.wallet_path)).hotkey.ss58_address

    behaviour = {hotkey(f"miner{i}"): "honest" for i in range(plan.honest)}
    behaviour.update({hotkey(f"adversary-{a}"): a for a in CHEATERS})
    validator_metrics = {
        hotkey(n.name): read_metrics(n.work_dir / "metrics.jsonl")
        for n in net.neurons
        if n.role == "validator"
    }
    miner_steps: dict[int, list[int]] = defaultdict(list)
    for path in (work / "nodes").glob("*/metrics.jsonl"):
        for line in read_metrics(path):
            if isinstance(line.record, TrainRecord):
                miner_steps[line.window].append(line.record.steps_trained)
    return Run(
        windows=windows,
        reports=signed_reports(net, windows),
        validator_metrics=validator_metrics,
        miner_steps=dict(miner_steps),
        behaviour=behaviour,
        seconds=time.perf_counter() - started,
    )


# -- what the run measured ------------------------------------------------------------------------


def replayed(entry: MinerEntry) -> bool:
    return entry.numbers.get("replay_steps", 0.0) > 0 or "replay_seconds" in entry.numbers


def validator_rows(run: Run) -> list[dict]:
    """One row per validator and window."""
    rows = []
    metrics = {
        (hk, r.window): r.record
        for hk, records in run.validator_metrics.items()
        for r in records
        if isinstance(r.record, ValidatorWindowRecord)
    }
    for report in sorted(run.reports, key=lambda r: (r.window, r.validator)):
        entries = report.miners.values()
        mine = [e for e in entries if replayed(e)]
        record = metrics.get((report.validator, report.window))
        revealed = sum(e.numbers.get("revealed_bytes", 0.0) for e in mine)
        updates = sum(e.numbers.get("update_bytes", 0.0) for e in entries)
        steps = run.miner_steps.get(report.window, [])
        rows.append(
            {
                "window": report.window,
                "validator": report.validator,
                "miners": len(report.miners),
                "replays": len(mine),
                "replayed_steps": sum(e.numbers.get("replay_steps", 0.0) for e in mine),
                "replay_seconds": sum(e.numbers.get("replay_seconds", 0.0) for e in mine),
                "revealed_bytes": revealed,
                "update_bytes": updates,
                "validate_seconds": float("nan") if record is None else record.validate_seconds,
                "published": 0 if record is None else record.findings_published,
                "rechecks": report.rechecks,
                "median_miner_steps": statistics.median(steps) if steps else float("nan"),
            }
        )
    return rows


def coverage(run: Run) -> dict[int, tuple[int, int]]:
    """Window → (miners replayed by any validator, miners whose update reached the checks)."""
    out = {}
    for w in run.windows:
        reports = [r for r in run.reports if r.window == w]
        checked = {hk for r in reports for hk, e in r.miners.items() if e.verdicts.get("update") == "pass"}
        replays = {hk for r in reports for hk, e in r.miners.items() if replayed(e)}
        out[w] = (len(replays & checked), len(checked))
    return out


def cheater_rows(run: Run) -> list[list[str]]:
    rows = []
    for hk, name in sorted(run.behaviour.items(), key=lambda kv: kv[1]):
        if name == "honest":
            continue
        caught = sorted(
            (
                r.window,
                r.validator[:8],
                next(c for c, v in r.miners[hk].verdicts.items() if v != "pass"),
            )
            for r in run.reports
            if hk in r.miners and replayed(r.miners[hk]) and r.miners[hk].reason
        )
        adopted = sorted(
            (r.window, r.validator[:8])
            for r in run.reports
            for c in r.rechecks
            if c.miner == hk and c.outcome == "adopted"
        )
        scored = sum(1 for r in run.reports if hk in r.miners and r.miners[hk].score > 0)
        rows.append(
            [
                name,
                ", ".join(f"w{w} by {v} ({check})" for w, v, check in caught) or "not replayed",
                ", ".join(f"w{w} by {v}" for w, v in adopted) or "—",
                str(scored),
            ]
        )
    return rows


def honest_false_rejections(run: Run) -> tuple[int, int]:
    verified = rejected = 0
    for r in run.reports:
        for hk, e in r.miners.items():
            if run.behaviour.get(hk) == "honest":
                verified += 1
                rejected += e.reason is not None
    return rejected, verified


# -- the report -----------------------------------------------------------------------------------


def md_table(headers: list[str], rows: list[list[str]]) -> str:
    lines = ["| " + " | ".join(headers) + " |", "|" + "---|" * len(headers)]
    return "\n".join(lines + ["| " + " | ".join(row) + " |" for row in rows])


VALIDATOR_HEADERS = [
    "window",
    "validator",
    "miners checked",
    "replays",
    "replayed steps",
    "of a miner's steps",
    "replay s",
    "validate s",
    "reveals downloaded",
    "updates downloaded",
    "findings published",
    "re-checks (adopted / refuted / not)",
]


def validator_table(rows: list[dict]) -> list[list[str]]:
    out = []
    for row in rows:
        outcomes = [c.outcome for c in row["rechecks"]]
        out.append(
            [
                str(row["window"]),
                row["validator"][:8],
                str(row["miners"]),
                str(row["replays"]),
                f"{row['replayed_steps']:.0f}",
                f"{row['replayed_steps'] / row['median_miner_steps']:.0%}"
                if row["median_miner_steps"]
                else "—",
                f"{row['replay_seconds']:.1f}",
                f"{row['validate_seconds']:.1f}",
                linkcheck.format_bytes(row["revealed_bytes"]),
                linkcheck.format_bytes(row["update_bytes"]),
                str(row["published"]),
                f"{outcomes.count('adopted')} / {outcomes.count('refuted')} / {outcomes.count('not re-checked')}",
            ]
        )
    return out


def gpu_rows(a: ScaleAccounting, config) -> list[list[str]]:
    w = config.windows
    window_s = w.blocks_per_window * GPU_BLOCK_SECONDS
    validate_s = (w.aggregate_offset - w.reveal_offset) * GPU_BLOCK_SECONDS
    download_s = a.seconds_at(LINK_BITS)
    return [
        [
            "miners challenged per window",
            f"{a.challenged} of {a.miners} ({a.challenged / a.miners:.2%})",
            "—",
            "",
        ],
        [
            "replays per validator (most), and receipts replayed again",
            f"{a.replays_per_validator} + {a.receipts_rechecked:g}",
            "—",
            "",
        ],
        [
            "replay compute per validator",
            f"{a.replay_steps:g} steps = {a.replay_share:.1%} of a miner's {a.steps_per_window}",
            "≤ 5%",
            "met" if a.replay_share <= 0.05 else "MISSED",
        ],
        [
            f"usefulness scoring per validator ({a.measured_per_validator} updates: its share and re-checks)",
            f"{a.scoring_share:.1%} of a miner's compute",
            "(outside the target)",
            "",
        ],
        [
            "reveal per challenged miner, beyond the update",
            f"{linkcheck.format_bytes(a.reveal_bytes)} = {a.reveal_per_param:.2f} B/param",
            "≤ 8 B/param",
            "met" if a.reveal_per_param <= 8 else "MISSED",
        ],
        [
            "download per validator per window",
            f"{linkcheck.format_bytes(a.download_bytes)}: {download_s:.0f} s at 200 Mbit/s",
            f"≤ the window ({window_s:.0f} s)",
            "met" if download_s <= window_s else "MISSED",
        ],
        [
            "… within the validate phase alone",
            f"{download_s:.0f} s of {validate_s:.0f} s",
            "—",
            "fits" if download_s <= validate_s else "does not fit",
        ],
        [
            "traffic per miner per window, verification included",
            f"{linkcheck.format_bytes(a.miner_traffic_bytes)} against DDP's {linkcheck.format_bytes(a.ddp_bytes)}: "
            f"{a.reduction:,.0f}× less",
            "≥ 1,000× less",
            "met" if a.reduction >= 1000 else "MISSED",
        ],
    ]


def write_report(path: Path, run: Run, plan: Plan, a: ScaleAccounting, command: str, started: float) -> str:
    machine = Machine.here()
    bench = load_run_config(BENCH_CONFIG)
    gpu = load_run_config(shipped_config_path("gpu-subnet"))
    rows = validator_rows(run)
    cover = coverage(run)
    rejected, verified = honest_false_rejections(run)
    shares = [
        row["replayed_steps"] / row["median_miner_steps"] for row in rows if row["median_miner_steps"] > 0
    ]
    p = bench.verification.challenge_miners
    lines = [
        "# Verification at scale",
        "",
        "Written by `bench/verification_scale.py`. The command that produced these numbers:",
        "",
        f"```\n{command}\n```",
        "",
        f"- date: {datetime.now(UTC):%Y-%m-%d %H:%M} UTC; total wall time: {time.perf_counter() - started:.0f} s",
        f"- machine: {machine.cpu}, {machine.cores} cores (shared); torch {machine.torch}; Python {machine.python}",
        f"- run: `bench/verification-scale.toml` (tiny model, sequential windows of {bench.windows.blocks_per_window} "
        f"{plan.block_time:g}-s blocks, H ≤ {bench.train.inner_steps}, k = {bench.train.segment_steps}; challenged per window: "
        f"{p} of the miners, {bench.verification.challenge_segments} segment each, replicas "
        f"{bench.verification.replicas}); {plan.honest} honest miners and {len(CHEATERS)} cheaters "
        f"({', '.join(CHEATERS)}), {plan.per_process} miners per process; {plan.validators} validators; "
        f"windows {run.windows[0]}–{run.windows[-1]}, {run.seconds:.0f} s",
        "",
        "## Per validator and window (measured)",
        "",
        '"replays" are the miners of the validator\'s share it replayed; "of a miner\'s steps" is its replayed '
        "steps over the miners' median steps that window (2 shared cores: the CPU run's windows are short, so "
        "this share is the bench config's, not the GPU config's); \"reveals downloaded\" are the revealed states "
        'and trajectory samples it read; "updates downloaded" every miner\'s update.',
        "",
        md_table(VALIDATOR_HEADERS, validator_table(rows)),
        "",
        "## Share of the miners replayed by anyone (measured)",
        "",
        md_table(
            ["window", "replayed", "miners checked", "share", "configured"],
            [
                [str(w), str(r), str(n), f"{r / n:.1%}" if n else "—", f"{p}"]
                for w, (r, n) in sorted(cover.items())
            ],
        ),
        "",
        "## The cheaters (measured)",
        "",
        md_table(
            ["cheater", "caught by replay", "finding adopted by", "reports scoring it above 0"],
            cheater_rows(run),
        ),
        "",
        f"Honest false rejections: {rejected} of {verified} honest window-verifications.",
        "",
        f"## The GPU config at {GPU_MINERS} miners and {GPU_VALIDATORS} validators (computed)",
        "",
        f"`distrai/configs/gpu-subnet.toml`: {a.params:,} parameters ({gpu.model.dtype}), a miner trains {a.steps_per_window} "
        f"steps a window (an H100 on the shipped loop), challenged per window: {gpu.verification.challenge_miners} "
        f"miners, {gpu.verification.challenge_segments} segment of {gpu.train.segment_steps} steps each, replicas "
        f"{gpu.verification.replicas}; links of 200 Mbit/s; formulas in `bench/_scale_accounting.py`.",
        "",
        md_table(["", "value", "target", ""], gpu_rows(a, gpu)),
        "",
        "## Targets",
        "",
        f"- Every miner checked with at least the configured probability: the draw gives each miner "
        f"{p} per window by construction (`tests/test_windows.py` checks it over 2,000 windows); measured share "
        f"per window {', '.join(f'{r / n:.0%}' for r, n in cover.values() if n)}.",
        f"- Replay compute per validator at {GPU_MINERS} miners: {a.replay_share:.1%} of a miner's "
        f"({'met' if a.replay_share <= 0.05 else 'MISSED'}; on the CPU run, median "
        f"{statistics.median(shares) if shares else float('nan'):.0%} with its own config).",
        f"- Reveals ≤ 8 B/param: {a.reveal_per_param:.2f} ({'met' if a.reveal_per_param <= 8 else 'MISSED'}).",
        f"- Traffic per miner ≥ 1,000× less than DDP: {a.reduction:,.0f}× ({'met' if a.reduction >= 1000 else 'MISSED'}).",
        f"- Zero honest false rejections: {rejected} ({'met' if rejected == 0 else 'MISSED'}).",
        "",
        NOTES_MARKER,
    ]
    text = "\n".join(lines) + "\n" + kept_notes(path)
    path.write_text(text)
    return text


def print_summary(run: Run, a: ScaleAccounting, console: Console) -> None:
    table = Table(title="per validator and window")
    for header in VALIDATOR_HEADERS:
        table.add_column(header, justify="right")
    for row in validator_table(validator_rows(run)):
        table.add_row(*row)
    console.print(table)
    gpu = Table(title=f"GPU config at {GPU_MINERS} miners, {GPU_VALIDATORS} validators")
    for header in ("", "value", "target", ""):
        gpu.add_column(header)
    for row in gpu_rows(a, load_run_config(shipped_config_path("gpu-subnet"))):
        gpu.add_row(*row)
    console.print(gpu)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--quick", action="store_true", help="a small network: every code path, meaningless numbers"
    )
    parser.add_argument("--output", type=Path, default=DEFAULT_OUTPUT)
    parser.add_argument(
        "--work", type=Path, default=None, help="keep the network's files here (default: a temp dir)"
    )
    parser.add_argument(
        "--warm-start",
        action="store_true",
        help="fork the network's processes from a warm interpreter (distrai.localnet.warm_start), as the "
        "test suite does: what is measured is the same, the start costs ~4 CPU-s less a process",
    )
    args = parser.parse_args(argv)
    plan = QUICK if args.quick else Plan()
    console = Console()
    started = time.perf_counter()
    command = shlex.join(
        ["python", "bench/verification_scale.py", *(argv if argv is not None else sys.argv[1:])]
    )
    accounting = account(
        load_run_config(shipped_config_path("gpu-subnet")), GPU_MINERS, GPU_VALIDATORS, GPU_STEPS
    )
    with tempfile.TemporaryDirectory(prefix="distrai-scale-") as tmp:
        run = run_network(plan, (args.work or Path(tmp)) / "net", console, args.warm_start)
    print_summary(run, accounting, console)
    write_report(args.output, run, plan, accounting, command, started)
    console.print(f"written to {args.output}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
