"""Bounded chaos run of a localnet; writes docs/reliability.md.

Three miners and two validators run the pipelined cpu-localnet config (or `--run-config`'s) as
separate processes (the real entry points, `distrai.localnet`). While they run, the harness

- SIGKILLs a miner or a validator at `--kills` moments drawn with `random.Random(--seed)`, spread
  over the run's windows and over every phase (`distrai.protocol.windows.activities` at the kill's block:
  the train phase alone, the previous window's reveal beside it, or its validation beside it;
  every (role, phase) pair at least once, one miner kill aimed at the block its reveal uploads
  in), and restarts it at once with the same command (`Localnet.restart`);
- puts each outage of `--outage KIND:PHASE:SECONDS` in a window of its own (one of half a window
  or more with two windows free of outages on each side, so no window is counted against two
  outages), starting in the phase
  named (`outage_start`: the train phase alone, across the window's first block; the reveal
  phase in the second half of the commit deadline's block, so it is in place when every miner
  uploads its update blob and the challenged ones their reveals, at the next block; the validate
  phase at the reveal deadline, when the validators list the reveals), each a window long at
  most:
  - `store`: the store unreachable. In a file store the store directory is moved aside and a
    symbolic link that points at itself takes its place, so every put and get fails with a
    `StoreError` (ELOOP) until the directory is moved back (chmod 000 does not stop root, and a
    directory merely moved away is silently re-created by the next put). In a run on S3 (below)
    the TCP gate in front of the S3 server shuts (`distrai.localnet.tcp_gate`): new connections
    are refused and open ones reset, as with a host gone from the network, while the server and
    what it holds run on;
  - `s3`: the S3 server paused: a run with this kind keeps the nodes' store in a bucket of a moto
    server the harness starts on 127.0.0.1 (`distrai.localnet.s3server`; moto is a development
    dependency), reached through a TCP gate, and the outage stops the server's process with
    SIGSTOP, then continues it with SIGCONT; the kernel still accepts connections on its port, so
    requests hang unanswered until the server continues or a client's read timeout passes;
  - `chain`: the embedded chain locked: a separate sqlite3 connection holds `BEGIN EXCLUSIVE` on
    chain.db, then commits; meanwhile it samples which nodes sit in sqlite's busy wait.

No kill falls within `RESTART_S` (plus a few blocks) before an outage or a few blocks after it, so
each effect has one cause. Then it checks what the nodes left behind (`run_checks`): no validator
state lost, no reveal in flight or codec residual lost, no honest miner marked fraud, every node on
one global model, no partial object or temp file in the store (read through the store's API, file
or S3; a temp file is one of an interrupted write in a file store, an unfinished multipart upload
in a bucket), every outage survived and told in
the logs, and what each outage cost (`outage_costs`): windows lost (at most one), honest miners
barred (none), and the lines the nodes logged about it (no line repeated as the nodes retry).

A node restarted with the same command counts its `--max.windows` again from its restart, so it
would run past the others; once the run's own windows are done (every validator has folded the
last of them, every reveal of the miners' last window is due) the harness stops such nodes with
SIGINT and requires them to exit 0 like the rest.

    python bench/chaos.py                                   # 20 kills, 4 outages over 8 windows, ~5 min
    python bench/chaos.py --kills 6                         # the outages' costs with fewer kills around them
    python bench/chaos.py --kills 8 --windows 5 --seed 3 --block-time 0.7 --output /tmp/r.md
    python bench/chaos.py --outage store:reveal:8 --outage store:validate:2
    python bench/chaos.py --kills 4 --windows 5 --outage s3:validate:8  # the store on a moto server
"""

from __future__ import annotations

import argparse
import shlex
import shutil
import sys
import tempfile
import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path

from _chaos_checks import run_checks
from _chaos_plan import DEFAULT_OUTAGES, ChaosOptions, OutageSpec
from _chaos_records import ChaosResult
from _chaos_report import DEFAULT_OUTPUT, checks_table, kept_notes, kills_table, markdown
from _chaos_run import Harness
from rich.console import Console
from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

from distrai.protocol.run import shipped_config_path


def run_chaos(
    options: ChaosOptions, say: Callable[[str], None] = print, progress=None, harness: Harness | None = None
) -> ChaosResult:
    """The chaos run of `options`, by `harness` if given (one built on the same options, whose network
    a caller may stop early), else by a harness of its own."""
    started = datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC")
    h = harness if harness is not None else Harness(options, say)
    clock = time.monotonic()
    try:
        try:
            h.run(progress)
        finally:
            h.net.stop()
        checks = run_checks(h)
    finally:
        h.stop_s3()
    return ChaosResult(
        options=options,
        command="",
        started=started,
        seconds=time.monotonic() - clock,
        windows=(h.first_window, h.last_miner_window),
        kills=h.kills,
        disruptions=h.disruptions,
        crashes=h.crashes,
        problems=h.problems,
        returncodes={n.name: n.process.returncode for n in h.net.neurons},
        stopped_by_harness=h.stopped_by_harness,
        checks=checks,
    )


def _outage_arg(text: str) -> OutageSpec:
    try:
        return OutageSpec.parse(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--kills", type=int, default=20, help="SIGKILLs over the run (default 20)")
    parser.add_argument("--windows", type=int, default=8, help="windows each node runs (default 8)")
    parser.add_argument("--seed", type=int, default=0, help="seed of every random choice (default 0)")
    parser.add_argument("--block-time", type=float, default=0.8, help="seconds per block (default 0.8)")
    parser.add_argument(
        "--outage",
        action="append",
        type=_outage_arg,
        default=None,
        metavar="KIND:PHASE:SECONDS",
        help="an outage: KIND store, s3 or chain, PHASE train, reveal or validate; repeat for more; s3 "
        "keeps the store on a local moto S3 server, where store shuts its TCP gate (default: "
        + ", ".join(map(str, DEFAULT_OUTAGES))
        + ")",
    )
    parser.add_argument("--no-outages", action="store_true", help="no outage, kills only")
    parser.add_argument(
        "--warm-start",
        action="store_true",
        help="fork nodes and restarts from a warm interpreter, as the test suite's short run does "
        "(default: a plain `python` start, what an operator's restart costs)",
    )
    parser.add_argument(
        "--run-config",
        type=Path,
        default=shipped_config_path("cpu-localnet"),
        help="the run config the network runs (default: the shipped cpu-localnet config)",
    )
    parser.add_argument("--work", type=Path, default=None, help="localnet folder (default: a temp dir)")
    parser.add_argument("--output", type=Path, default=DEFAULT_OUTPUT, help="markdown report to write")
    return parser.parse_args(argv)


def main(argv: list[str]) -> int:
    args = parse_args(argv)
    console = Console(width=200)
    work = args.work or Path(tempfile.mkdtemp(prefix="distrai-chaos-")) / "net"
    options = ChaosOptions(
        work=work,
        kills=args.kills,
        windows=args.windows,
        seed=args.seed,
        block_time=args.block_time,
        outages=() if args.no_outages else tuple(args.outage or DEFAULT_OUTAGES),
        warm_start=args.warm_start,
        run_config=args.run_config,
    )
    with Progress(
        TextColumn("[bold]block {task.completed:.0f} of {task.total:.0f}"),
        BarColumn(),
        TimeElapsedColumn(),
        console=console,
        refresh_per_second=2,
    ) as bar:
        task = bar.add_task("run", total=1)
        result = run_chaos(
            options,
            say=lambda text: bar.console.print(text),
            progress=lambda block, end: bar.update(task, completed=block, total=end),
        )
    result.command = shlex.join(["python", "bench/chaos.py", *argv])
    console.print(kills_table(result))
    console.print(checks_table(result))
    for c in result.checks:
        if not c.ok:
            console.print(f"[red]{c.name}[/]")
            for d in c.details[:20]:
                console.print(f"  - {d}")
    args.output.parent.mkdir(parents=True, exist_ok=True)
    notes = kept_notes(args.output)
    args.output.write_text(markdown(result) + notes)
    console.print(f"wrote {args.output}; the localnet's files are in {work}")
    if args.work is None and result.ok:
        shutil.rmtree(work.parent, ignore_errors=True)
    return 0 if result.ok else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
