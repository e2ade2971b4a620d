"""The output of bench/chaos.py: the tables it prints and the page it writes."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

from _chaos_checks import MAX_REPEATS
from _chaos_records import ChaosResult
from rich.table import Table

ROOT = Path(__file__).resolve().parent.parent
DEFAULT_OUTPUT = ROOT / "docs" / "reliability.md"
NOTES_MARKER = "<!-- Notes below this line are kept when bench/chaos.py rewrites this file. -->"


def kills_table(result: ChaosResult) -> Table:
    table = Table(title="kills")
    for col in ("#", "at (s)", "block", "under way", "node", "it was", "outcome"):
        table.add_column(col, overflow="fold")
    for k in result.kills:
        table.add_row(
            str(k.index), f"{k.seconds:.0f}", str(k.block), k.activities, k.node, k.doing, k.outcome
        )
    return table


def checks_table(result: ChaosResult) -> Table:
    table = Table(title="checks")
    for col in ("check", "result", "measured"):
        table.add_column(col, overflow="fold")
    for c in result.checks:
        table.add_row(c.name, "[green]pass[/]" if c.ok else "[red]FAIL[/]", c.summary)
    return table


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def markdown(result: ChaosResult) -> str:
    o = result.options
    lines = [
        "# Reliability: a bounded chaos run",
        "",
        "Written by `bench/chaos.py` (see its docstring for what it does and how). "
        "Rerun it to refresh the measured part; notes after the marker at the end are kept.",
        "",
        f"- command: `{result.command}`",
        f"- date: {result.started}; machine: {os.cpu_count()} CPU cores; code: {code_version()}",
        f"- network: {o.miners} miners, {o.validators} validators, cpu-localnet config (pipelined), "
        f"block time {o.block_time} s, {o.windows} windows (miners' windows {result.windows[0]}–{result.windows[1]}), "
        f"seed {o.seed}; store: {'a bucket of a local moto S3 server' if o.on_s3 else 'a file store'}",
        f"- {len(result.kills)} SIGKILLs, each followed at once by a restart with the same command; "
        f"outages: {', '.join(f'{x.kind} of {x.seconds:g} s in the {x.phase} phase' for x in o.outages) or 'none'}",
        f"- wall time: {result.seconds:.0f} s; exit codes: "
        + ", ".join(f"{n} {c}" for n, c in result.returncodes.items())
        + (
            f"; stopped by SIGINT after the run's windows: {', '.join(result.stopped_by_harness)}"
            if result.stopped_by_harness
            else ""
        ),
        f"- result: **{'all checks pass' if result.ok else 'some checks fail'}**",
        "",
        "## Checks",
        "",
        "| check | result | measured |",
        "|---|---|---|",
    ]
    for c in result.checks:
        lines.append(f"| {c.name} | {'pass' if c.ok else '**FAIL**'} | {_cell(c.summary)} |")
    for c in result.checks:
        if c.details:
            lines += ["", f"### {c.name}", ""]
            lines += [f"- {_cell(d)[:400]}" for d in c.details[:40]]
            if len(c.details) > 40:
                lines.append(f"- … and {len(c.details) - 40} more")
    lines += [
        "",
        "## Kills",
        "",
        "Moment in seconds after the nodes started; `under way` is `distrai.protocol.windows.activities` at the "
        "kill's block; `it was` comes from the node's work dir and its last log record.",
        "",
        "| # | at (s) | block | under way | phase | node | it was | outcome |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for k in result.kills:
        lines.append(
            f"| {k.index} | {k.seconds:.0f} | {k.block} | {k.activities} | {k.phase} | {k.node} | "
            f"{_cell(k.doing)} | {_cell(k.outcome)} |"
        )
    lines += [
        "",
        "## Outages",
        "",
        "`at` in seconds after the nodes started; `windows` are those it can cost (under way during it, "
        "or starting within a window after it); `lost`: those of them in which no validator accepted an "
        "update (target: at most 1); `barred`: honest miners barred in them that no kill explains "
        "(target: 0), and holds for a reveal the outage kept unread that the next window's re-read "
        f"lifted (the window's pay lost; counted, not a target); `log lines`: the nodes' warnings and errors about it, and the line one node "
        f"repeated most (target: at most {MAX_REPEATS}, when it starts and when it ends).",
        "",
        "| what | phase | at (s) | blocks | seconds | windows | lost | barred | log lines | targets | how | outcome |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for d in result.disruptions:
        met = len(d.lost) <= 1 and not d.barred and d.repeated[0] <= MAX_REPEATS
        lines.append(
            f"| {d.kind} | {d.phase} | {d.seconds:.0f} | {d.block}–{d.end_block} | "
            f"{d.wall_end - d.wall_start:.1f} | {', '.join(f'w{w}' for w in d.windows)} | "
            f"{len(d.lost)}{' (' + ', '.join(f'w{w}' for w in d.lost) + ')' if d.lost else ''} | "
            f"{len(d.barred)}{f' ({len(d.held)} held, lifted)' if d.held else ''} | "
            f"{sum(len(x) for x in d.said.values())}"
            f"{f'; {d.repeated[1]} repeated one {d.repeated[0]}×' if d.repeated[0] > 1 else ''} | "
            f"{'met' if met else '**missed**'} | {_cell(d.how)} | "
            f"{_cell(d.outcome)} |"
        )
    if result.crashes or result.problems:
        lines += ["", "## Crashes", ""]
        lines += [f"- {_cell(str(c))}" for c in result.crashes]
        lines += [f"- {_cell(p)}" for p in result.problems]
    return "\n".join(lines) + "\n"


def code_version() -> str:
    """The commit the run's code is at, and whether tracked files differ from it."""
    try:
        head = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True, check=True
        ).stdout.strip()
        changed = subprocess.run(
            ["git", "status", "--porcelain", "--untracked-files=no"], cwd=ROOT, capture_output=True, text=True
        ).stdout.split("\n")
    except (OSError, subprocess.CalledProcessError):
        return "unknown"
    changed = [line[3:] for line in changed if line.strip()]
    return f"commit {head}" + (f" with uncommitted changes to {', '.join(changed)}" if changed else "")


def kept_notes(path: Path) -> str:
    if not path.exists():
        return f"\n{NOTES_MARKER}\n"
    text = path.read_text()
    return (
        "\n" + NOTES_MARKER + text.split(NOTES_MARKER, 1)[1]
        if NOTES_MARKER in text
        else f"\n{NOTES_MARKER}\n"
    )
