"""How long a node takes to start: the CPU seconds (user + sys of the child) and the wall time of the
commands below, the median of `--runs` runs each; writes docs/startup.md.

    python bench/startup.py                                   # this checkout, 5 runs each
    python bench/startup.py --quick                           # 1 run each, none unrecorded before it
    python bench/startup.py --repo /tmp/wt-before --repo .    # two checkouts side by side (before, after)

Each command runs in a fresh interpreter (this one's `sys.executable`) from the checkout's root, with
the checkout (and its tests/) first on PYTHONPATH, so an editable install of another checkout does not
answer for it:

- `neurons/miner.py --help` and `neurons/validator.py --help`: what an operator waits for before the
  flags are read;
- `import distrai.node.build`: what a node imports before its checks that need no model (run config, work
  folder, wallet, registration, the owner's run commitment);
- `import distrai.node.build, distrai.protocol.runtime, distrai.protocol.sync, miners.miner, validators.validator`: what a
  running node has imported by the time it trains (the runtime builds the transformers model), the
  floor a node that builds a model pays;
- the same imports in a process forked by a local network's warm server (`distrai.localnet.warm_start`,
  which the test suite's networks use): the server has imported torch and transformers' modelling code
  once (its own start costs about the row above, once per network), so the child's CPU seconds are
  its own rusage from the fork on and its wall the time from the request to its exit. A checkout
  without a warm server shows "—".

The page's table is rewritten; the text after the notes marker is kept.
"""

from __future__ import annotations

import argparse
import os
import platform
import resource
import shlex
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from rich.console import Console
from rich.table import Table

ROOT = Path(__file__).resolve().parents[1]
OUTPUT = ROOT / "docs" / "startup.md"
NOTES_MARKER = "<!-- Notes below this line are kept when the benchmark rewrites this file. -->"
"""The marker of `bench/_report.py`, written out: that module imports torch, which this one does not need."""

NODE_IMPORTS = "import distrai.node.build, distrai.protocol.runtime, distrai.protocol.sync, miners.miner, validators.validator"
COMMANDS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("miner --help", ("neurons/miner.py", "--help")),
    ("validator --help", ("neurons/validator.py", "--help")),
    ("import distrai.node.build", ("-c", "import distrai.node.build")),
    ("a running node's imports", ("-c", NODE_IMPORTS)),
)


WARM_ROW = "the same, forked by a warm server"
WARM_SCRIPT = f"""import resource, sys
{NODE_IMPORTS}
usage = resource.getrusage(resource.RUSAGE_SELF)
print(usage.ru_utime + usage.ru_stime)
"""
"""What a forked child runs: the node's imports, then its own CPU seconds since the fork."""


@dataclass(frozen=True)
class Timing:
    cpu_s: float
    wall_s: float


def run_once(repo: Path, args: tuple[str, ...]) -> Timing:
    """One run of `python ARGS` in `repo`: the child's user + sys CPU seconds and the wall time."""
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(repo), str(repo / "tests")]))
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    done = subprocess.run(
        [sys.executable, *args], cwd=repo, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE
    )
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if done.returncode != 0:
        raise SystemExit(f"{shlex.join(['python', *args])} in {repo} failed:\n{done.stderr.decode()[-2000:]}")
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return Timing(cpu, wall)


def measure_warm(repo: Path, runs: int, warm_up: bool) -> Timing | None:
    """`WARM_SCRIPT` forked by a warm server of `repo` (started once, not counted), the medians over
    `runs` runs, after one unrecorded if `warm_up`; None for a checkout without one."""
    if not (repo / "distrai" / "localnet" / "warm_start.py").exists():
        return None
    from distrai.localnet.warm_start import WarmStarter

    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(repo), str(repo / "tests")]))
    with tempfile.TemporaryDirectory(prefix="distrai-startup-") as folder:
        script, log = Path(folder) / "imports.py", Path(folder) / "child.log"
        script.write_text(WARM_SCRIPT)
        server = WarmStarter(env, repo, Path(folder) / "server.log")
        timings = []
        try:
            for _ in range(runs + int(warm_up)):
                log.unlink(missing_ok=True)
                start = time.perf_counter()
                code = server.start([str(script)], env, repo, log).wait()
                wall = time.perf_counter() - start
                if code != 0:
                    raise SystemExit(f"the forked imports in {repo} failed:\n{log.read_text()[-2000:]}")
                timings.append(Timing(float(log.read_text().split()[-1]), wall))
        finally:
            server.stop()
    timings = timings[int(warm_up) :]
    return Timing(statistics.median(t.cpu_s for t in timings), statistics.median(t.wall_s for t in timings))


def measure(repo: Path, args: tuple[str, ...], runs: int, warm_up: bool) -> Timing:
    """The medians over `runs` runs (after one unrecorded run that warms the file cache, if `warm_up`)."""
    if warm_up:
        run_once(repo, args)
    timings = [run_once(repo, args) for _ in range(runs)]
    return Timing(statistics.median(t.cpu_s for t in timings), statistics.median(t.wall_s for t in timings))


def label(repo: Path) -> str:
    """The checkout's branch and commit (its folder's name outside git)."""

    def git(*args: str) -> str:
        return subprocess.run(["git", "-C", str(repo), *args], capture_output=True, text=True).stdout.strip()

    head = git("log", "-1", "--format=%h")
    return f"{git('rev-parse', '--abbrev-ref', 'HEAD')} {head}" if head else repo.name


def cells(t: Timing | None) -> list[str]:
    return ["—", "—"] if t is None else [f"{t.cpu_s:.2f}", f"{t.wall_s:.2f}"]


def row_names() -> list[str]:
    return [name for name, _ in COMMANDS] + [WARM_ROW]


def markdown(
    repos: list[Path],
    results: dict[tuple[Path, str], Timing | None],
    runs: int,
    warm_up: bool,
    command: str,
) -> str:
    names = [label(r) for r in repos]
    header = ["command"] + [f"{n}: {part}" for n in names for part in ("CPU s", "wall s")]
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for name in row_names():
        lines.append(
            "| " + " | ".join([name] + [c for repo in repos for c in cells(results[(repo, name)])]) + " |"
        )
    cpu = platform.processor() or platform.machine()
    return (
        "# Node start-up\n\n"
        "Written by `bench/startup.py` (its docstring says what it runs):\n\n"
        f"    {command}\n\n"
        f"Medians of {runs} run(s) per command{'' if warm_up else ' (no unrecorded run before them)'}, "
        f"each in a fresh interpreter (Python {platform.python_version()}, "
        f"{cpu}, {os.cpu_count()} cores, load average {os.getloadavg()[0]:.1f} at the end); CPU is the "
        "child's user + sys seconds, wall the time until it exited. On a shared machine the wall times "
        "vary with its load, the CPU seconds much less.\n\n" + "\n".join(lines) + "\n"
    )


def kept_notes(path: Path) -> str:
    if not path.exists():
        return ""
    _, marker, rest = path.read_text().partition(NOTES_MARKER + "\n")
    return rest if marker else ""


def main(argv: list[str]) -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--repo",
        type=Path,
        action="append",
        help="a checkout to measure (repeat for a side-by-side table; default: this one)",
    )
    parser.add_argument("--runs", type=int, default=5, help="runs per command (the median is reported)")
    parser.add_argument(
        "--quick", action="store_true", help="one run per command, and no unrecorded run before it"
    )
    parser.add_argument("--output", type=Path, default=OUTPUT)
    args = parser.parse_args(argv)
    repos = [r.resolve() for r in (args.repo or [ROOT])]
    runs, warm_up = (1, False) if args.quick else (args.runs, True)
    results: dict[tuple[Path, str], Timing | None] = {}
    for name, command in COMMANDS:
        for repo in repos:
            results[(repo, name)] = measure(repo, command, runs, warm_up)
            print(f"{label(repo)}: {name}: {results[(repo, name)]}", flush=True)
    for repo in repos:
        results[(repo, WARM_ROW)] = measure_warm(repo, runs, warm_up)
        print(f"{label(repo)}: {WARM_ROW}: {results[(repo, WARM_ROW)]}", flush=True)
    table = Table(title=f"Node start-up (medians of {runs} runs; seconds)")
    table.add_column("command")
    for repo in repos:
        table.add_column(f"{label(repo)}\nCPU", justify="right")
        table.add_column(f"{label(repo)}\nwall", justify="right")
    for name in row_names():
        table.add_row(name, *(c for r in repos for c in cells(results[(r, name)])))
    Console().print(table)
    shown = ["python", "bench/startup.py", *argv]
    text = markdown(repos, results, runs, warm_up, shlex.join(shown))
    notes = kept_notes(args.output)
    args.output.write_text(text + "\n" + NOTES_MARKER + "\n" + notes)
    print(f"wrote {args.output}")


if __name__ == "__main__":
    main(sys.argv[1:])
