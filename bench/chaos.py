"""Bounded chaos run of a localnet; writes docs/reliability.md.

Three miners and two validators run the pipelined cpu-localnet config as separate processes (the
real entry points, `distrai.localnet`). While they run, the harness

- SIGKILLs a miner or a validator at `--kills` moments drawn with `random.Random(--seed)`, spread
  over the run's windows and over every phase (`distrai.protocol.windows.activities` at the kill's block:
  the train phase alone, the previous window's reveal beside it, or its validation beside it;
  every (role, phase) pair at least once, one miner kill aimed at the block its reveal uploads
  in), and restarts it at once with the same command (`Localnet.restart`);
- puts each outage of `--outage KIND:PHASE:SECONDS` in a window of its own, starting in the phase
  named (`outage_start`: the train phase alone, across the window's first block; the reveal
  phase in the second half of the commit deadline's block, so it is in place when every miner
  uploads its update blob and the challenged ones their reveals, at the next block; the validate
  phase at the reveal deadline, when the validators list the reveals), each shorter
  than half a window:
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
    python bench/chaos.py --kills 4 --windows 5 --outage s3:validate:5  # the store on a moto server
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import random
import re
import shlex
import shutil
import signal
import sqlite3
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

from rich.console import Console
from rich.markup import escape
from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from distrai.chain.local_db import SLOW_LOCK_SECONDS
from distrai.localnet.network import Localnet, LocalnetOptions
from distrai.localnet.s3server import (
    FAKE_ACCESS_KEY_ID,
    FAKE_SECRET_ACCESS_KEY,
    free_port,
    make_bucket,
    pause,
    resume,
    start_server,
    stop_server,
)
from distrai.localnet.tcp_gate import TcpGate
from distrai.localnet.view import signed_reports
from distrai.node.metrics import read_metrics
from distrai.node.wallets import open_wallet
from distrai.protocol.announce import committed_updates
from distrai.protocol.globalmodel import CHECKPOINT_FORMAT
from distrai.protocol.layout import aggregate_key, manifest_key, window_prefix
from distrai.protocol.run import run_id
from distrai.protocol.trajectory import decode_trajectory
from distrai.protocol.windows import (
    Phase,
    WindowConfig,
    activities,
    aggregate_deadline,
    commit_deadline,
    committed_in_time,
    reveal_deadline,
    window_end,
    window_of,
    window_start,
)
from distrai.store import FileStore, Store, StoreError
from distrai.store.temps import TEMP_SUFFIX
from distrai.train.coded_state import CODED_STATE_FORMAT, check_coded_state
from distrai.train.tensorfile import blob_format
from distrai.train.tensorfile import decode_tensors as decode_record_tensors
from distrai.train.train_state import decode_state
from validators.validator_state import ValidatorState
from validators.validator_state import load_state as load_validator_state

ROOT = Path(__file__).resolve().parent.parent
DEFAULT_OUTPUT = ROOT / "docs" / "reliability.md"
NOTES_MARKER = "<!-- Notes below this line are kept when bench/chaos.py rewrites this file. -->"
PHASES = ("train", "reveal", "validate")
ROLES = ("miner", "validator")
RESTART_S = 12.0
"""About how long a restarted node takes to reach its loop on a loaded 2-core machine."""
MARGIN_BLOCKS = 3
"""No kill within this many blocks after a store outage or a chain stall, nor within this many
blocks plus `RESTART_S` before one, so each effect has one cause."""
MIN_KILL_GAP_BLOCKS = 3
LOG_SLACK_S = 8.0
LOCK_SAMPLE_S = 0.25
"""How often a chain stall samples which nodes wait on its lock."""
"""Log records up to this long after a disruption ends still count as the node's account of it."""


# -- options and plan ---------------------------------------------------------------------------


OUTAGE_KINDS = {"store": "store outage", "s3": "S3 server paused", "chain": "chain stall"}
"""`--outage` KIND → the disruption's name in the checks and the report."""
STORE_KINDS = frozenset({"store outage", "S3 server paused"})
"""The disruptions of the nodes' store."""
S3_BUCKET = "distrai-chaos"
"""The bucket of the nodes' store on the run's moto server (a run with an `s3` outage)."""
OBJECT_LIMIT = 1 << 40
"""The size cap of the checks' reads of store objects: none in practice (the checks read every
object whole, as a node would within its own limits)."""


@dataclass(frozen=True)
class OutageSpec:
    kind: str
    """a value of `OUTAGE_KINDS`"""
    phase: str
    """where it starts (`PHASES`, `outage_start`)"""
    seconds: float

    @classmethod
    def parse(cls, text: str) -> OutageSpec:
        """`KIND:PHASE:SECONDS`, as `--outage` takes it (`store:reveal:8`)."""
        try:
            kind, phase, seconds = text.split(":")
            spec = cls(OUTAGE_KINDS[kind], phase, float(seconds))
        except (ValueError, KeyError):
            raise ValueError(
                f"--outage {text!r}: expected KIND:PHASE:SECONDS, KIND one of {', '.join(OUTAGE_KINDS)}"
            ) from None
        if phase not in PHASES or spec.seconds <= 0:
            raise ValueError(f"--outage {text!r}: PHASE one of {', '.join(PHASES)}, SECONDS above 0")
        return spec

    def __str__(self) -> str:
        kind = next(k for k, v in OUTAGE_KINDS.items() if v == self.kind)
        return f"{kind}:{self.phase}:{self.seconds:g}"


DEFAULT_OUTAGES = (
    OutageSpec("store outage", "reveal", 9.0),
    OutageSpec("S3 server paused", "validate", 5.0),
    OutageSpec("chain stall", "train", 5.0),
    OutageSpec("chain stall", "validate", 3.0),
)
"""Every kind, every phase: the store on S3 (for the pause), unreachable across a reveal phase and
paused in a validate phase. At 0.8 s blocks the reveal phase outlasts its outage (12.8 s); the
validate phase's chain stall ends before the read patience (4 blocks, 3.2 s, after the reveal
deadline), and a paused server's requests wait for it (within the nodes' read timeouts) rather than
fail. A store outage there (`--outage store:validate:2`) makes a challenged reveal withheld when a
validator's first reads end after the read patience (docs/reliability.md, notes)."""


@dataclass(frozen=True)
class ChaosOptions:
    work: Path
    kills: int = 20
    windows: int = 8
    seed: int = 0
    block_time: float = 0.8
    miners: int = 3
    validators: int = 2
    outages: tuple[OutageSpec, ...] = DEFAULT_OUTAGES
    timeout_s: float | None = None
    """the whole run, from the nodes' start; default from the windows and the block time"""
    warm_start: bool = False
    """nodes, restarts included, forked from a warm interpreter (`distrai.localnet.warm_start`), as
    the test suite's short run starts them; a plain `python` start is what an operator's restart costs"""

    @property
    def on_s3(self) -> bool:
        """Whether the nodes' store is a bucket of a local S3 server (the run pauses it)."""
        return any(o.kind == "S3 server paused" for o in self.outages)


@dataclass(frozen=True)
class Planned:
    kind: str
    """"kill" or a value of `OUTAGE_KINDS`"""
    block: float
    """chain block (with a fraction) at which it starts"""
    node: str = ""
    phase: str = ""
    """the phase aimed at (`PHASES`)"""
    seconds: float = 0.0
    """for an outage: how long it lasts"""


def phase_label(under_way: list[tuple[int, Phase]]) -> str:
    """One word for what `activities` says is under way: the older window's reveal or validation
    if one runs beside the training, else the phase itself."""
    phases = [p for _, p in under_way]
    for phase in (Phase.REVEAL, Phase.VALIDATE, Phase.WEIGHTS):
        if phase in phases:
            return phase.value
    return Phase.TRAIN.value


def phase_offsets(cfg: WindowConfig) -> dict[str, list[int]]:
    """Block offsets inside a window (past the first two) at which each label of `phase_label` holds."""
    window = 2
    offsets: dict[str, list[int]] = {}
    for offset in range(cfg.blocks_per_window):
        label = phase_label(activities(cfg, window_start(cfg, window) + offset))
        offsets.setdefault(label, []).append(offset)
    return offsets


def outage_start(cfg: WindowConfig, phase: str, window: int, rng: random.Random) -> float:
    """The block (with a fraction) at which an outage of `phase` in `window` starts: inside the
    train phase's first block alone (on pipelined windows the last of the window, so the outage
    spans the next window's first block, when every node reads or writes the chain: miners start the
    window and read the commitments, validators note the window's miners); in the reveal phase in
    the second half of the commit deadline's block, so the store is already out of reach at the next
    block, when every miner uploads its update blob and the challenged miners their reveals (a
    tiny model's upload takes a fraction of a block: an outage that began inside that block found
    it done in a CI run); in the validate phase inside the reveal deadline's block, when the
    validators list the reveals (a store back before the read patience costs nothing; one still out
    of reach then makes a challenged miner's reveal withheld, docs/protocol.md, "Withheld reveals")."""
    bpw = cfg.blocks_per_window
    offset, fraction = {
        "train": (min(phase_offsets(cfg).get("train", [0])), (0.1, 0.9)),
        "reveal": (cfg.commit_offset % bpw, (0.5, 0.9)),
        "validate": (cfg.reveal_offset % bpw, (0.1, 0.9)),
    }[phase]
    if phase_label(activities(cfg, window_start(cfg, 2) + offset)) != phase:
        raise ValueError(f"the run's windows have no {phase} phase to put an outage in")
    return window_start(cfg, window) + offset + rng.uniform(*fraction)


def plan(
    cfg: WindowConfig,
    options: ChaosOptions,
    nodes: dict[str, str],
    first_window: int,
    rng: random.Random,
) -> list[Planned]:
    """Every kill and disruption of the run, in block order. `nodes` maps each name to its role;
    `first_window` is the miners' first window. Kills fall in the windows after it, spread evenly;
    each (role, phase) pair is hit at least once when there are kills enough, and no node is
    killed again within half a window of its last kill (its restart takes seconds); among the
    nodes of a role, the one killed least often so far is taken."""
    bpw = cfg.blocks_per_window
    offsets = phase_offsets(cfg)
    missing = [p for p in PHASES if p not in offsets]
    if missing:
        raise ValueError(f"the run's windows have no {', '.join(missing)} phase to aim kills at")
    kill_windows = list(range(first_window + 1, first_window + options.windows))
    if not kill_windows:
        raise ValueError("--windows must be at least 2: kills fall after the miners' first window")
    blocked: list[tuple[float, float]] = []
    events: list[Planned] = []
    before = MARGIN_BLOCKS + RESTART_S / options.block_time
    # each outage in a window of its own, before the last (the window after it shows what it cost)
    outage_windows = kill_windows[:-1] or kill_windows
    used: set[int] = set()
    for spec in options.outages:
        if spec.seconds >= bpw * options.block_time / 2:
            raise ValueError(
                f"a {spec.kind} of {spec.seconds:g} s is not shorter than half a window "
                f"({bpw * options.block_time / 2:g} s)"
            )
        length = spec.seconds / options.block_time
        for _ in range(1000):
            window = rng.choice(outage_windows)
            start = outage_start(cfg, spec.phase, window, rng)
            span = (start - before, start + length + MARGIN_BLOCKS)
            if window not in used and not any(_overlap(span, b) for b in blocked):
                break
        else:
            raise ValueError(f"no room for the {spec.kind} in the {spec.phase} phase: add --windows")
        events.append(Planned(spec.kind, start, phase=spec.phase, seconds=spec.seconds))
        blocked.append(span)
        used.add(window)

    # every (role, phase) pair once, then moments drawn uniformly over the windows' blocks
    combos = [(role, phase) for role in ROLES for phase in PHASES]
    rng.shuffle(combos)
    wanted = [(role, phase, True) for role, phase in combos[: options.kills]]
    while len(wanted) < options.kills:
        role = rng.choices(ROLES, weights=(3, 2))[0]
        wanted.append((role, rng.choices(PHASES, weights=[len(offsets[p]) for p in PHASES])[0], False))
    slots = [kill_windows[i * len(kill_windows) // options.kills] for i in range(options.kills)]
    rng.shuffle(wanted)
    moments: list[tuple[float, str, str]] = []
    # the pairs first, the scarcest phase first (on pipelined windows the train phase alone lasts two blocks)
    pairs = sorted(zip(wanted, slots, strict=True), key=lambda p: (not p[0][2], len(offsets[p[0][1]])))
    for (role, phase, required), window in pairs:
        choices = (
            [(role, phase)]
            if required
            else [(r, p) for r in (role, *(x for x in ROLES if x != role)) for p in (phase, *PHASES)]
        )
        placed = False
        for kind, option in choices:
            for w in sorted(kill_windows, key=lambda x: (abs(x - window), x)):
                free = [
                    b
                    for o in _aim(cfg, offsets, kind, option, required)
                    if _free(b := window_start(cfg, w) + o, blocked, moments, kind, bpw / 2)
                ]
                if free:
                    moments.append((rng.choice(free) + rng.uniform(0.05, 0.95), kind, option))
                    placed = True
                    break
            if placed:
                break
        if not placed:
            raise ValueError(
                f"no free block for a {role} kill in the {phase} phase: add --windows or fewer --kills"
            )
    last_kill: dict[str, float] = {}
    times: dict[str, int] = {}
    for block, role, phase in sorted(moments):
        names = [n for n, r in nodes.items() if r == role]
        rested = [n for n in names if block - last_kill.get(n, -1e9) >= bpw / 2]
        if rested:
            fewest = min(times.get(n, 0) for n in rested)
            node = rng.choice([n for n in rested if times.get(n, 0) == fewest])
        else:
            node = min(names, key=lambda n: last_kill.get(n, -1e9))
        last_kill[node] = block
        times[node] = times.get(node, 0) + 1
        events.append(Planned("kill", block, node=node, phase=phase))
    return sorted(events, key=lambda e: e.block)


def plan_for_seed(
    cfg: WindowConfig, options: ChaosOptions, nodes: dict[str, str], first_window: int
) -> list[Planned]:
    """`plan` with `random.Random(seed)`; when that draw leaves no room for some kill, the next
    draws of the same seed are tried, so a seed always gives the same plan."""
    error = None
    for attempt in range(100):
        rng = random.Random(options.seed if attempt == 0 else f"{options.seed}/{attempt}")
        try:
            return plan(cfg, options, nodes, first_window, rng)
        except ValueError as exc:
            error = exc
    raise ValueError(f"no plan fits: {error}")


def _aim(
    cfg: WindowConfig, offsets: dict[str, list[int]], role: str, phase: str, required: bool
) -> list[int]:
    """Offsets a kill may take. The one required miner kill of the reveal phase aims at the block
    after the previous window's commit deadline, when its reveal is being uploaded (a reveal of the
    tiny model takes about a second, so a kill anywhere else in the phase finds it done)."""
    if required and role == "miner" and phase == "reveal":
        upload = (cfg.commit_offset + 1) % cfg.blocks_per_window
        return [o for o in offsets[phase] if o == upload] or offsets[phase]
    return offsets[phase]


def _free(
    block: int,
    blocked: list[tuple[float, float]],
    moments: list[tuple[float, str, str]],
    role: str,
    apart: float,
) -> bool:
    """Whether a kill may fall in `block`: outside every disruption's span, at least
    `MIN_KILL_GAP_BLOCKS` from any other kill and, for a validator, `apart` blocks from any other
    validator kill (one validator down at a time, so a window keeps an aggregate)."""
    if any(_overlap((block, block + 1), b) for b in blocked):
        return False
    for at, other, _ in moments:
        gap = abs(at - (block + 0.5))
        if gap < MIN_KILL_GAP_BLOCKS or (role == other == "validator" and gap < apart):
            return False
    return True


def _overlap(a: tuple[float, float], b: tuple[float, float]) -> bool:
    return a[0] < b[1] and b[0] < a[1]


# -- what happened ------------------------------------------------------------------------------


@dataclass
class Kill:
    index: int
    node: str
    role: str
    aimed_at: str
    block: int
    seconds: float
    """since the nodes started"""
    wall: float
    """unix time of the SIGKILL"""
    activities: str
    phase: str
    doing: str
    log_offset: int
    """size of the node's log when it was restarted: what follows is the new process"""
    in_flight: list[int] = field(default_factory=list)
    """miner: windows whose sealed reveal job was on disk at the kill"""
    state_before: dict | None = None
    """validator: the saved state just before the kill"""
    state_after: dict | None = None
    """validator: the saved state just after the kill (before the restart)"""
    outcome: str = ""


@dataclass
class Disruption:
    kind: str
    phase: str
    """the phase it was put in (`outage_start`)"""
    block: int
    end_block: int
    seconds: float
    """since the nodes started"""
    wall_start: float
    wall_end: float
    how: str
    alive_after: dict[str, bool] = field(default_factory=dict)
    said: dict[str, list[str]] = field(default_factory=dict)
    """node → its warning and error records in the span"""
    waited: dict[str, float] = field(default_factory=dict)
    """chain stall: node → seconds (sampled) one of its threads sat in sqlite's busy wait"""
    log_offsets: dict[str, int] = field(default_factory=dict)
    """node → size of its log when it began"""
    running: frozenset[str] = frozenset()
    """the nodes running when it began: only they can meet it"""
    outcome: str = ""
    windows: list[int] = field(default_factory=list)
    """the windows it can cost (`outage_costs`)"""
    lost: list[int] = field(default_factory=list)
    """those of `windows` in which no validator accepted an update"""
    barred: list[str] = field(default_factory=list)
    """bars of honest miners in `windows` that no kill explains"""
    repeated: tuple[int, str, str] = (0, "", "")
    """the line about it a node logged most often: (times, node, line)"""


@dataclass(frozen=True)
class Crash:
    node: str
    code: int | None
    block: int
    wall: float
    error: str
    """the exception line its traceback ended with"""
    frames: list[str]
    """the innermost frames"""

    def __str__(self) -> str:
        return (
            f"{self.node} exited {self.code} at block {self.block}: {self.error} ("
            + " <- ".join(reversed(self.frames))
            + ")"
        )


@dataclass
class Check:
    name: str
    ok: bool
    summary: str
    details: list[str] = field(default_factory=list)


@dataclass
class ChaosResult:
    options: ChaosOptions
    command: str
    started: str
    seconds: float
    windows: tuple[int, int]
    """(first, last) window of the run: the miners' first trained and last validated"""
    kills: list[Kill]
    disruptions: list[Disruption]
    crashes: list[Crash]
    problems: list[str]
    returncodes: dict[str, int | None]
    stopped_by_harness: list[str]
    checks: list[Check]

    @property
    def ok(self) -> bool:
        return all(c.ok for c in self.checks)

    def check(self, name: str) -> Check:
        return next(c for c in self.checks if c.name == name)


# -- logs ---------------------------------------------------------------------------------------

_RECORD = re.compile(
    r"^(?:\[(?P<time>[^\]]*)\] |\s{20})(?P<level>DEBUG|INFO|WARNING|ERROR|CRITICAL)\s+(?P<message>.*)$"
)


@dataclass(frozen=True)
class LogRecord:
    offset: int
    time: float | None
    level: str
    message: str


def log_records(path: Path, start: int = 0, end: int | None = None) -> list[LogRecord]:
    """The records of a node's rich log between byte offsets, wrapped lines joined; lines that are
    no record (a traceback printed on a crash) become records of level "RAW"."""
    if not path.exists():
        return []
    data = path.read_bytes()[start:end]
    records: list[LogRecord] = []
    offset, stamp = start, None
    for raw in data.split(b"\n"):
        line = raw.decode("utf-8", "replace").rstrip()
        here, offset = offset, offset + len(raw) + 1
        if not line.strip():
            continue
        m = _RECORD.match(line)
        if m:
            if m["time"]:
                stamp = _parse_time(m["time"]) or stamp
            records.append(LogRecord(here, stamp, m["level"], m["message"].strip()))
        elif line.startswith(" ") and records:
            last = records[-1]
            records[-1] = LogRecord(last.offset, last.time, last.level, f"{last.message} {line.strip()}")
        else:
            records.append(LogRecord(here, stamp, "RAW", line))
    return records


def _parse_time(text: str) -> float | None:
    for fmt in ("%m/%d/%y %H:%M:%S", "%x %X"):
        try:
            return time.mktime(time.strptime(text.strip(), fmt))
        except ValueError:
            continue
    return None


# -- the run ------------------------------------------------------------------------------------


def sqlite_waiting(pid: int) -> bool:
    """Whether a thread of `pid` sleeps in a relative CLOCK_REALTIME nanosleep: sqlite's busy
    handler (usleep) while another connection holds the lock. Python's own sleeps use
    CLOCK_MONOTONIC with TIMER_ABSTIME, and waits on events are futexes, so neither counts."""
    try:
        tasks = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return False
    for tid in tasks:
        try:
            call = Path(f"/proc/{pid}/task/{tid}/syscall").read_text().split()
        except OSError:
            continue
        if call[:3] == ["230", "0x0", "0x0"] or call[:1] == ["35"]:
            return True
    return False


class Harness:
    def __init__(
        self,
        options: ChaosOptions,
        say: Callable[[str], None] = print,
        base_env: Mapping[str, str] | None = None,
    ):
        self.options = options
        self.say = say
        self.base_env = base_env
        """the environment the nodes start from (this process's when None)"""
        self.s3_gate = TcpGate(free_port(), free_port()) if options.on_s3 else None
        """the TCP gate of the run's S3 server (`start_s3`), which holds the nodes' store: the nodes
        reach the server through it; None: a file store"""
        self.s3_endpoint = None if self.s3_gate is None else f"http://127.0.0.1:{self.s3_gate.port}"
        self.s3_server: subprocess.Popen[bytes] | None = None
        self.net = Localnet(
            LocalnetOptions(
                work=options.work,
                miners=options.miners,
                validators=options.validators,
                windows=options.windows,
                block_time=options.block_time,
                warm_start=options.warm_start,
                store_url=(
                    None
                    if self.s3_endpoint is None
                    else f"s3://{S3_BUCKET}/net?endpoint={self.s3_endpoint}&path_style=true"
                ),
                store_credentials=(
                    None if self.s3_endpoint is None else (FAKE_ACCESS_KEY_ID, FAKE_SECRET_ACCESS_KEY)
                ),
            )
        )
        self.cfg = self.net.config.windows
        self.run_id = run_id(self.net.config)
        self.kills: list[Kill] = []
        self.disruptions: list[Disruption] = []
        self.crashes: list[Crash] = []
        self.problems: list[str] = []
        """what went wrong with the run itself (a timeout, a node that would not stop)"""
        self.started_log: dict[str, int] = {}
        self.restarted: set[str] = set()
        self.finished: set[str] = set()
        self.skipped: list[str] = []
        """planned kills that found no node of their role running"""
        self.finished_early: dict[str, int] = {}
        """node → block at which it exited 0 by itself before the run's windows were done"""
        self.stopped_by_harness: list[str] = []
        self.started_at = 0.0
        self._hotkeys: dict[str, str] = {}

    # -- helpers --------------------------------------------------------------------------------

    @property
    def chain(self):
        return self.net.chain

    def store(self) -> Store:
        """The nodes' store, opened to read (a file store is not swept of its temp files)."""
        return self.net.open_store(create=False)

    def hotkey(self, name: str) -> str:
        if name not in self._hotkeys:
            self._hotkeys[name] = open_wallet(name, "default", str(self.net.wallet_path)).hotkey.ss58_address
        return self._hotkeys[name]

    def state_path(self, name: str) -> Path:
        return self.net.neuron(name).work_dir / "validator_state.json"

    def saved_state(self, name: str) -> ValidatorState:
        return load_validator_state(self.state_path(name), self.run_id)

    def elapsed(self) -> float:
        return time.monotonic() - self.started_at

    def block_time_of(self, block: float) -> float:
        whole = int(block)
        return self.chain.block_timestamp(whole) + (block - whole) * self.options.block_time

    @property
    def first_window(self) -> int:
        """The miners' first window: they skip the current one when too little of it is left."""
        return window_of(self.cfg, self.net.started_block) + 1

    @property
    def last_miner_window(self) -> int:
        return self.first_window + self.options.windows - 1

    @property
    def last_validated_window(self) -> int:
        """Validators start checking at the window they start in, so their last is one earlier."""
        return window_of(self.cfg, self.net.started_block) + self.options.windows - 1

    # -- the run --------------------------------------------------------------------------------

    def run(self, progress: Callable[[int, int], None] | None = None) -> None:
        net = self.net
        if self.s3_endpoint is not None:
            self.start_s3()
        net.setup()
        events = plan_for_seed(
            self.cfg, self.options, {n.name: n.role for n in net.neurons}, self.first_window
        )
        net.start(self.base_env)
        self.started_at = time.monotonic()
        end_block = reveal_deadline(self.cfg, self.last_miner_window) + 2
        timeout = self.options.timeout_s or 180 + (self.options.windows + 4) * (
            self.cfg.blocks_per_window * self.options.block_time
        )
        tick = (lambda: progress(self.chain.block(), end_block)) if progress else (lambda: None)
        self.say(
            f"{len(net.neurons)} processes started in {net.work}; "
            f"{sum(e.kind == 'kill' for e in events)} kills planned, windows {self.first_window}–{self.last_miner_window}"
        )
        for event in events:
            self.wait_until(self.block_time_of(event.block), tick)
            if event.kind == "kill":
                self.kill(event)
            elif event.kind == "store outage":
                self.store_outage(event, tick)
            elif event.kind == "S3 server paused":
                self.s3_pause(event, tick)
            else:
                self.chain_stall(event, tick)
        self.finish(timeout, tick)

    def start_s3(self) -> None:
        """Start the run's S3 server at `s3_endpoint` (its log beside the network's folder) and make
        the nodes' bucket on it."""
        assert self.s3_gate is not None, "only a run with an s3 outage has an S3 server"
        log = self.net.work.parent / f"{self.net.work.name}-s3server.log"
        log.parent.mkdir(parents=True, exist_ok=True)
        server_url, self.s3_server = start_server(log, self.s3_gate.upstream_port)
        self.s3_gate.open()
        make_bucket(self.s3_endpoint, S3_BUCKET)
        self.say(f"S3 server (moto) at {server_url}, reached through {self.s3_endpoint}; its log in {log}")

    def stop_s3(self) -> None:
        """End the run's S3 server, if it started (once the checks have read the store)."""
        if self.s3_gate is not None:
            self.s3_gate.shut()
        if self.s3_server is not None:
            stop_server(self.s3_server)
            self.s3_server = None

    def wait_until(self, when: float, tick: Callable[[], None]) -> None:
        while time.time() < when:
            self.watch()
            tick()
            time.sleep(min(0.25, max(0.0, when - time.time())))

    def watch(self) -> None:
        """Notice a process that ended without being killed: exit 0 is a finished node; anything
        else is a crash, recorded with the traceback it left in its log and restarted so the run
        goes on."""
        for neuron in self.net.neurons:
            if neuron.process is None or neuron.running() or neuron.name in self.finished:
                continue
            code = neuron.process.returncode
            if code == 0:
                self.finished.add(neuron.name)
                block = self.chain.block()
                early = (
                    self.saved_state(neuron.name).window < self.last_validated_window
                    if neuron.role == "validator"
                    else block < window_end(self.cfg, self.last_miner_window)
                )
                if early:
                    self.finished_early[neuron.name] = block
                self.say(f"{neuron.name} finished its windows (exit 0) at block {block}")
                continue
            records = log_records(neuron.log_path, self.started_log.get(neuron.name, 0))
            # a traceback is a RAW record "Traceback … File …" (its indented lines joined) and the
            # RAW record of the exception after it
            raw = [r.message for r in records if r.level == "RAW"]
            last = max((i for i, line in enumerate(raw) if line.startswith("Traceback")), default=None)
            trace = raw[last:] if last is not None else raw[-2:]
            frames = [
                f"{Path(f).name}:{line} {func}"
                for f, line, func in re.findall(r'File "([^"]+)", line (\d+), in (\S+)', " ".join(trace))
            ]
            error = trace[-1] if trace else "no traceback in the log"
            self.crashes.append(Crash(neuron.name, code, self.chain.block(), time.time(), error, frames[-5:]))
            self.say(f"[red]{neuron.name} crashed (exit {code}): {escape(error)}; restarting it[/]")
            self.restarted.add(neuron.name)
            self.start(neuron.name)

    def start(self, name: str) -> None:
        """(Re)start a node with its command (`Localnet.restart`), noting where its log goes on."""
        neuron = self.net.neuron(name)
        self.started_log[name] = neuron.log_path.stat().st_size if neuron.log_path.exists() else 0
        self.net.restart(name)

    def kill(self, event: Planned) -> None:
        neuron = self.net.neuron(event.node)
        if not neuron.running():
            alive = [n for n in self.net.neurons if n.role == neuron.role and n.running()]
            if not alive:
                self.skipped.append(
                    f"{event.kind} of {event.node} at block {int(event.block)}: no {neuron.role} running"
                )
                self.say(f"[yellow]kill skipped: no {neuron.role} running at block {self.chain.block()}[/]")
                return
            neuron = alive[0]
        block = self.chain.block()
        under_way = activities(self.cfg, block)
        doing = self.doing(neuron.name)
        in_flight = self.sealed_jobs(neuron.name) if neuron.role == "miner" else []
        before = self.saved_state(neuron.name).model_dump() if neuron.role == "validator" else None
        wall = time.time()
        neuron.kill()
        after = self.saved_state(neuron.name).model_dump() if neuron.role == "validator" else None
        self.start(neuron.name)
        offset = self.started_log[neuron.name]
        self.restarted.add(neuron.name)
        self.finished.discard(neuron.name)
        kill = Kill(
            index=len(self.kills) + 1,
            node=neuron.name,
            role=neuron.role,
            aimed_at=event.phase,
            block=block,
            seconds=self.elapsed(),
            wall=wall,
            activities=", ".join(f"w{w} {p.value}" for w, p in under_way),
            phase=phase_label(under_way),
            doing=doing,
            log_offset=offset,
            in_flight=in_flight,
            state_before=before,
            state_after=after,
        )
        self.kills.append(kill)
        self.say(
            f"kill {kill.index}: {kill.node} at block {block} ({kill.activities}); it was {escape(doing)}; restarted"
        )

    def sealed_jobs(self, name: str) -> list[int]:
        root = self.net.neuron(name).work_dir / "reveals"
        if not root.exists():
            return []
        return sorted(
            int(f.name[1:]) for f in root.iterdir() if (f / "job.json").exists() and f.name[1:].isdigit()
        )

    def doing(self, name: str) -> str:
        """What the node was busy with, from its work dir and its latest log record."""
        neuron = self.net.neuron(name)
        parts = []
        if neuron.role == "miner":
            root = neuron.work_dir / "reveals"
            for folder in sorted(root.iterdir()) if root.exists() else []:
                if (folder / "job.json").exists():
                    w = int(folder.name[1:]) if folder.name[1:].isdigit() else -1
                    due = commit_deadline(self.cfg, w) + 1
                    parts.append(
                        f"{'uploading' if self.chain.block() >= due else 'holding'} the reveal of {folder.name}"
                    )
                else:
                    states = len(list((folder / "states").glob("*.safetensors")))
                    parts.append(f"training {folder.name} ({states} boundaries saved)")
        else:
            state = self.saved_state(name)
            pending = []
            for path in sorted((neuron.work_dir / "pending").glob("w*.json")):
                try:
                    listed = json.loads(path.read_text()).get("inventory_block") is not None
                except (OSError, ValueError):
                    listed = False
                pending.append(f"{path.stem}{' listed' if listed else ''}")
            parts.append(f"state at w{state.window}")
            if pending:
                parts.append("pending " + ", ".join(pending))
        records = log_records(neuron.log_path)
        if records:
            parts.append(f'last log: "{records[-1].message[:90]}"')
        return "; ".join(parts) or "starting"

    def offsets(self) -> dict[str, int]:
        return {n.name: n.log_path.stat().st_size if n.log_path.exists() else 0 for n in self.net.neurons}

    def store_outage(self, event: Planned, tick: Callable[[], None]) -> None:
        if self.s3_gate is not None:
            self.outage(
                event,
                tick,
                self.s3_gate.shut,
                self.s3_gate.open,
                "the TCP gate to the S3 server shut: connections refused, open ones reset (the server ran on)",
                ("S3 endpoint unreachable", "S3 endpoint back"),
            )
            return
        store = self.net.work / "store"
        aside = self.net.work / "store.unreachable"

        def cut() -> None:
            os.rename(store, aside)
            os.symlink(store.name, store)

        def mend() -> None:
            os.unlink(store)
            os.rename(aside, store)

        self.outage(
            event,
            tick,
            cut,
            mend,
            "store dir moved aside, a self-referencing symlink in its place (ELOOP on every path)",
            ("store unreachable", "store back"),
        )

    def s3_pause(self, event: Planned, tick: Callable[[], None]) -> None:
        server = self.s3_server
        assert server is not None, "a run with an s3 outage starts its S3 server (`start_s3`)"
        self.outage(
            event,
            tick,
            lambda: pause(server),
            lambda: resume(server),
            "moto server stopped with SIGSTOP, then SIGCONT (requests hang: the kernel still accepts connections)",
            ("S3 server paused (SIGSTOP)", "S3 server continued (SIGCONT)"),
        )

    def outage(
        self,
        event: Planned,
        tick: Callable[[], None],
        cut: Callable[[], None],
        mend: Callable[[], None],
        how: str,
        said: tuple[str, str],
    ) -> None:
        """A store outage of `event.seconds`: `cut` it, wait (watching the nodes), `mend` it, and
        record it as a `Disruption` of `event.kind` made `how`; `said` begins the two lines told."""
        block, wall, offsets = self.chain.block(), time.time(), self.offsets()
        present = frozenset(n.name for n in self.net.neurons if n.running())
        cut()
        self.say(f"{said[0]} from block {block} for {event.seconds:.0f} s")
        try:
            self.wait_until(wall + event.seconds, tick)
        finally:
            mend()
        self.disruptions.append(
            Disruption(
                event.kind,
                event.phase,
                block,
                self.chain.block(),
                self.elapsed(),
                wall,
                time.time(),
                how,
                log_offsets=offsets,
                running=present,
                alive_after={n.name: n.running() or n.name in self.finished for n in self.net.neurons},
            )
        )
        self.say(f"{said[1]} at block {self.chain.block()}")

    def chain_stall(self, event: Planned, tick: Callable[[], None]) -> None:
        conn = sqlite3.connect(str(self.net.work / "chain.db"), timeout=60.0, isolation_level=None)
        asked = time.time()
        conn.execute("BEGIN EXCLUSIVE")
        wall, block, offsets = time.time(), self.chain.block(), self.offsets()
        present = frozenset(n.name for n in self.net.neurons if n.running())
        self.say(f"chain locked (BEGIN EXCLUSIVE) at block {block} for {event.seconds:.1f} s")
        waited: dict[str, float] = {n.name: 0.0 for n in self.net.neurons}
        step = LOCK_SAMPLE_S
        try:
            while time.time() < wall + event.seconds:
                self.watch()
                tick()
                for neuron in self.net.neurons:
                    if neuron.running() and sqlite_waiting(neuron.process.pid):
                        waited[neuron.name] += step
                time.sleep(step)
        finally:
            conn.execute("COMMIT")
            conn.close()
        blocked = ", ".join(f"{name} {s:.1f} s" for name, s in waited.items() if s > 0) or "none"
        self.say(f"chain released at block {self.chain.block()}; waiting on its lock: {blocked}")
        self.disruptions.append(
            Disruption(
                "chain stall",
                event.phase,
                block,
                self.chain.block(),
                self.elapsed(),
                wall,
                time.time(),
                f"BEGIN EXCLUSIVE on chain.db for {event.seconds:.1f} s (lock taken after {wall - asked:.2f} s)",
                log_offsets=offsets,
                running=present,
                alive_after={n.name: n.running() or n.name in self.finished for n in self.net.neurons},
                waited=waited,
            )
        )

    def finish(self, timeout: float, tick: Callable[[], None]) -> None:
        """Wait for the run's windows to be done; nodes that were never restarted end by themselves,
        restarted ones (whose --max.windows counts from their restart) are stopped with SIGINT."""
        deadline = self.started_at + timeout
        end_block = reveal_deadline(self.cfg, self.last_miner_window) + 1
        while time.monotonic() < deadline:
            self.watch()
            tick()
            if self.run_done(end_block):
                break
            time.sleep(0.5)
        else:
            self.problems.append(f"the run did not finish its windows within {timeout:.0f} s")
        for neuron in self.net.neurons:
            if neuron.running():
                self.stopped_by_harness.append(neuron.name)
                neuron.process.send_signal(signal.SIGINT)
        for neuron in self.net.neurons:
            if neuron.running():
                try:
                    neuron.process.wait(60)
                except subprocess.TimeoutExpired:
                    self.problems.append(f"{neuron.name} did not stop within 60 s of SIGINT; killed")
                    neuron.kill()
        if self.stopped_by_harness:
            self.say(f"stopped with SIGINT after the run's windows: {', '.join(self.stopped_by_harness)}")

    def run_done(self, end_block: int) -> bool:
        for neuron in self.net.neurons:
            if not neuron.running():
                continue
            if neuron.name not in self.restarted:
                return False
            if (
                neuron.role == "validator"
                and self.saved_state(neuron.name).window < self.last_validated_window
            ):
                return False
            if neuron.role == "miner" and (
                self.chain.block() < end_block
                or any(w <= self.last_miner_window for w in self.sealed_jobs(neuron.name))
            ):
                return False
        return True


# -- checks -------------------------------------------------------------------------------------


def validator_records(path: Path) -> list[dict]:
    return [r for r in read_metrics(path) if "event" not in r] if path.exists() else []


def ema_from_records(
    records: list[dict], n: int, alpha: float, barred: set[tuple[int, int]] = frozenset()
) -> tuple[list[float], list[int]]:
    """The moving average the validator's metrics imply (first record of each window), as
    tests/test_localnet_e2e.py recomputes it, with the average of a uid the validator barred in a
    window (`barred`: (window, uid), from its log) reset to 0 as `fold_scores` does, and that of a
    uid no validator measured (`unmeasured/uid`) kept."""
    windows = sorted({r["window"] for r in records})
    averages = [0.0] * n
    for w in windows:
        record = next(r for r in records if r["window"] == w)
        scores = [record.get(f"score/{uid}", 0.0) for uid in range(n)]
        averages = [
            a if f"unmeasured/{uid}" in record else alpha * s + (1 - alpha) * a
            for uid, (a, s) in enumerate(zip(averages, scores, strict=True))
        ]
        averages = [0.0 if (w, uid) in barred else a for uid, a in enumerate(averages)]
    return averages, windows


def barred_in_log(path: Path) -> set[tuple[int, int]]:
    """(window, uid) of every ban a validator's log announces ("window W: uid U barred until …")."""
    return {
        (int(m[1]), int(m[2]))
        for r in log_records(path)
        if (m := re.match(r"window (\d+): uid (\d+) barred until window", r.message))
    }


def check_processes(h: Harness) -> Check:
    """No crash during the run, and every process exited 0 (by itself once its windows were done,
    or on SIGINT for a restarted one past the run's windows)."""
    details = [str(c) for c in h.crashes] + list(h.problems)
    codes = {n.name: n.process.returncode for n in h.net.neurons}
    details += [f"{name} exited {code}" for name, code in codes.items() if code != 0]
    for d in h.disruptions:
        dead = [name for name, alive in d.alive_after.items() if not alive]
        if dead:
            details.append(f"after the {d.kind}: {', '.join(dead)} no longer running")
    ok = not details
    summary = (
        f"no crash; every process exited 0 ({len(h.stopped_by_harness)} restarted ones on SIGINT after the run's windows)"
        if ok
        else f"{len(details)} problem(s)"
    )
    return Check("processes", ok, summary, details)


def check_run_completed(h: Harness) -> Check:
    """The run got through its windows: no node ended before the run's end, every validator
    folded the run's last window (or a later one), and every miner killed a window or more
    before the end trained again after its last kill."""
    details = []
    for name in sorted(h.finished_early):
        details.append(f"{name} exited by itself at block {h.finished_early[name]}, before the run's end")
    for neuron in h.net.neurons:
        if neuron.role == "validator":
            reached = h.saved_state(neuron.name).window
            if reached < h.last_validated_window:
                details.append(
                    f"{neuron.name} got to w{reached}, not to the run's last w{h.last_validated_window}"
                )
        else:
            trained = [
                r["window"]
                for r in read_metrics(neuron.work_dir / "metrics.jsonl")
                if r.get("event") == "train"
            ]
            kills = [k.block for k in h.kills if k.node == neuron.name]
            last_kill = max(kills, default=-1)
            if last_kill < window_start(h.cfg, h.last_miner_window - 1) and not any(
                window_start(h.cfg, w) + h.cfg.commit_offset > last_kill for w in trained
            ):
                details.append(f"{neuron.name} trained no window after its last kill (block {last_kill})")
    ok = not details
    return Check(
        "run completed",
        ok,
        f"validators through w{h.last_validated_window}; every miner trained again after its kills"
        if ok
        else f"{len(details)} problem(s)",
        details,
    )


def check_validator_state(h: Harness) -> Check:
    """After each validator kill: the state on disk is not behind the state before it, and the
    restarted process says it resumes at that window; at the end, every validator's averages are
    the EMA of the scores in its metrics records. Both hold whether the killed window is checked
    again after the restart (its scores are folded once: state and record are written only when
    the window is done) or skipped (neither the state nor the metrics hold it)."""
    details, notes = [], []
    alpha = h.net.config.scoring.ema_alpha
    for k in (k for k in h.kills if k.role == "validator"):
        before, after = ValidatorState(**k.state_before), ValidatorState(**k.state_after)
        if after.window < before.window:
            details.append(
                f"kill {k.index} ({k.node}): state went back from w{before.window} to w{after.window}"
            )
        elif after.window == before.window and (
            after.averages != before.averages or after.banned_until != before.banned_until
        ):
            details.append(
                f"kill {k.index} ({k.node}): state of w{after.window} changed without a new window"
            )
        started = [
            int(m[1])
            for r in log_records(h.net.neuron(k.node).log_path, k.log_offset)
            if (m := re.search(r"started on run \S+ at window (-?\d+)", r.message))
        ]
        if not started:
            details.append(f"kill {k.index} ({k.node}): the restarted process never said it started")
        elif started[0] < before.window:
            details.append(
                f"kill {k.index} ({k.node}): restarted at window {started[0]}, behind w{before.window} saved before the kill"
            )
        records = validator_records(h.net.neuron(k.node).work_dir / "metrics.jsonl")
        nxt = after.window + 1
        redone = [r for r in records if r["window"] == nxt and r["time"] > k.wall]
        k.outcome = f"resumed at w{started[0] if started else '?'} (saved w{before.window}); " + (
            f"w{nxt} checked after the restart" if redone else f"w{nxt} skipped"
        )
        folded = {r["window"] for r in records}
        if after.window >= 0 and after.window not in folded:
            details.append(
                f"kill {k.index} ({k.node}): w{after.window} was folded into the saved state but has no "
                "metrics record (killed between save_state and metrics.log)"
            )
    n = h.chain.metagraph().n
    for neuron in (n_ for n_ in h.net.neurons if n_.role == "validator"):
        final = h.saved_state(neuron.name)
        records = validator_records(neuron.work_dir / "metrics.jsonl")
        averages, windows = ema_from_records(records, n, alpha, barred_in_log(neuron.log_path))
        worst = max((abs(a - b) for a, b in zip(averages, final.averages, strict=False)), default=0.0)
        if len(averages) != len(final.averages) or worst > 1e-12:
            details.append(
                f"{neuron.name}: final averages differ from the EMA of its metrics (windows {windows}) by {worst:.3g}"
            )
        else:
            notes.append(f"{neuron.name}: state at w{final.window}, averages = EMA over windows {windows}")
        duplicated = sorted(
            {r["window"] for r in records if sum(x["window"] == r["window"] for x in records) > 1}
        )
        if duplicated:
            details.append(f"{neuron.name}: windows folded twice in its metrics: {duplicated}")
    kills = sum(k.role == "validator" for k in h.kills)
    ok = not details
    return Check(
        "validator state",
        ok,
        f"{kills} validator kills: no state behind the one before the kill; final averages = EMA of metrics"
        if ok
        else f"{len(details)} problem(s) over {kills} validator kills",
        details or notes,
    )


def anchored_manifests(h: Harness) -> dict[str, dict[int, dict]]:
    """Miner name → window → body of the manifest its chain commitment anchored for that window
    (as of the block before the commit deadline), read from the store; the miners' own record of
    the residual they carried from window to window."""
    names = {h.hotkey(n.name): n.name for n in h.net.neurons if n.role == "miner"}
    out: dict[str, dict[int, dict]] = {name: {} for name in names.values()}
    store, limit = h.store(), h.net.config.limits.max_manifest_bytes
    for w in range(h.first_window, h.last_miner_window + 2):
        deadline = commit_deadline(h.cfg, w)
        if deadline - 1 > h.chain.block():
            break
        counted = committed_updates(
            h.chain.commitments(block=deadline - 1), w, lambda b, w=w: committed_in_time(h.cfg, w, b)
        )
        for hotkey, announcement in counted.items():
            try:
                data = store.get(manifest_key(h.run_id, w, hotkey), limit)
            except StoreError:
                continue
            if hashlib.sha256(data).hexdigest() == announcement.manifest_sha256 and hotkey in names:
                out[names[hotkey]][w] = json.loads(data)["body"]
    return out


def check_miner_reveals(h: Harness, manifests: dict[str, dict[int, dict]]) -> list[Check]:
    """After each miner kill, every reveal job that was on disk is resumed and done in time (or
    was never anchored, so nobody is owed it), and the miner's anchored manifests keep one residual
    chain: each window's `residual_in_hash` is the `residual_out_hash` of the window before it
    that the miner anchored, across every restart."""
    details = []
    for k in (k for k in h.kills if k.role == "miner"):
        neuron = h.net.neuron(k.node)
        after = log_records(neuron.log_path, k.log_offset)
        reveals = [
            r
            for r in read_metrics(neuron.work_dir / "metrics.jsonl")
            if r.get("event") == "reveal" and r["time"] > k.wall
        ]
        outcomes = []
        for w in k.in_flight:
            resumed = any(f"window {w}: resuming its reveal" in r.message for r in after)
            unanchored = any(f"window {w}: its manifest was never anchored" in r.message for r in after)
            done = [r for r in reveals if r["window"] == w]
            if unanchored:
                outcomes.append(f"w{w} never anchored (killed before its commitment)")
            elif down_over_deadline(after, w):
                outcomes.append(f"w{w} due while the miner was down, and said so after the restart")
            elif resumed and done and not done[0]["reveal_late"]:
                outcomes.append(f"w{w} resumed after the restart, done in {done[0]['upload_seconds']:.1f} s")
            elif resumed and done:
                outcomes.append(f"w{w} resumed but late")
                details.append(
                    f"kill {k.index} ({k.node}): the reveal of w{w} resumed but missed its deadline"
                )
            elif resumed:
                outcomes.append(f"w{w} resumed, never finished")
                details.append(f"kill {k.index} ({k.node}): the reveal of w{w} resumed but never finished")
            else:
                outcomes.append(f"w{w} LOST")
                details.append(
                    f"kill {k.index} ({k.node}): the reveal of w{w} in flight was neither resumed nor done"
                )
        k.outcome = "; ".join(outcomes) or "no reveal in flight"
        if any("carrying on the codec residual" in r.message for r in after):
            k.outcome += "; residual taken from the job"
        nxt = min(
            (w for w in manifests.get(k.node, {}) if window_start(h.cfg, w) + h.cfg.commit_offset > k.block),
            default=None,
        )
        k.outcome += f"; next anchored window w{nxt}" if nxt is not None else "; no later window anchored"
    kills = sum(k.role == "miner" for k in h.kills)
    in_flight = sum(len(k.in_flight) for k in h.kills if k.role == "miner")
    resumed = Check(
        "reveals in flight resumed",
        not details,
        f"{in_flight} reveal(s) in flight at {kills} miner kills, each resumed and done in time, or due "
        "while its miner was down and said so"
        if not details
        else f"{len(details)} of {in_flight} reveal(s) in flight lost or late",
        details,
    )
    details, links = [], 0
    for miner, by_window in manifests.items():
        windows = sorted(by_window)
        for a, b in zip(windows, windows[1:], strict=False):
            links += 1
            if by_window[b].get("residual_in_hash") != by_window[a].get("residual_out_hash"):
                kills = [k.index for k in h.kills if k.node == miner and window_start(h.cfg, a) <= k.block]
                details.append(
                    f"{miner}: the manifest of w{b} does not carry in the residual w{a} committed"
                    + (f" (after kill {kills[0]})" if kills else "")
                )
    chain = Check(
        "miner residual chain",
        not details,
        f"{links} window-to-window links of the miners' anchored manifests, every one intact"
        if not details
        else f"{len(details)} of {links} links broken",
        details,
    )
    return [resumed, chain]


def check_residual_reports(h: Harness, reports: list[dict], manifests: dict[str, dict[int, dict]]) -> Check:
    """No validator reports a miner's window as failing `trajectory` with "residual_in_hash does
    not continue" — after a miner restart or otherwise. Each report is explained against the
    miners' anchored manifests: when they show an intact chain, the break is the validator's
    (it did not read the miner's previous anchored window: skipped after a restart, or its store
    was unreachable), not the miner's."""
    names = {h.hotkey(n.name): n.name for n in h.net.neurons}
    seen = {
        (body["validator"], body["window"], hotkey): entry
        for body in reports
        for hotkey, entry in body["miners"].items()
    }
    details, after_restart = [], 0
    for body in reports:
        validator, w = body["validator"], body["window"]
        for hotkey, entry in body["miners"].items():
            if "residual_in_hash does not continue" not in (entry.get("reason") or ""):
                continue
            miner = names.get(hotkey, hotkey[:10])
            anchored = manifests.get(miner, {})
            last = max((x for x in anchored if x < w), default=None)
            intact = (
                last is not None
                and w in anchored
                and (anchored[w].get("residual_in_hash") == anchored[last].get("residual_out_hash"))
            )
            restarted = [
                k.index
                for k in h.kills
                if k.node == miner
                and last is not None
                and window_start(h.cfg, last) <= k.block < window_start(h.cfg, w)
            ]
            after_restart += bool(restarted)
            read_last = (
                last is not None
                and seen.get((validator, last, hotkey), {}).get("verdicts", {}).get("manifest") == "pass"
            )
            if intact and not read_last:
                cause = f"the miner's manifests chain correctly from w{last}; the validator never read its w{last} manifest"
            elif intact:
                cause = f"the miner's manifests chain correctly from w{last}; unexplained"
            else:
                cause = f"the miner's own manifests break the chain after w{last}"
            details.append(
                f"{names.get(validator, validator[:10])} w{w}: {miner}"
                + (f" (restarted, kill {restarted[0]})" if restarted else "")
                + f" — {cause}"
            )
    ok = not details
    return Check(
        "no residual chain reported broken",
        ok,
        "no report says residual_in_hash does not continue"
        if ok
        else f"{len(details)} report(s) of a broken residual chain, {after_restart} of them after the miner's restart",
        details,
    )


def down_over_deadline(records, window: int) -> bool:
    """Whether a restarted miner's log (`records`, from its restart on) says that the reveal deadline
    of `window` passed while it was down: no restart can bring that reveal back, and docs/protocol.md
    ("Withheld reveals") bars a challenged miner for it, as it bars one that hides its reveal."""
    return any(
        f"window {window}: its reveal deadline" in r.message
        and "passed while the miner was down" in r.message
        for r in records
    )


def down_at_reveal(h: Harness, window: int, miner: str) -> int | None:
    """The kill of `miner` that kept it down over the reveal deadline of `window`, if one did."""
    return next(
        (
            k.index
            for k in h.kills
            if k.node == miner
            and window in k.in_flight
            and down_over_deadline(log_records(h.net.neuron(k.node).log_path, k.log_offset), window)
        ),
        None,
    )


def fraud_cause(reason: str, h: Harness, window: int, miner: str) -> str:
    """Why an honest miner was judged a cheat, as far as the run shows."""
    if "another base model" in reason or "not the window's starting state" in reason:
        return "the validator and the miner are on different global models (see: one global model)"
    if re.search(r"symbolic links|file store \w+ .* failed|s3 \w+ .* failed", reason):
        return "the validator could not read the store (outage) and took it for hiding"
    if "not in the store at the reveal deadline" in reason or "not revealed" in reason:
        killed = [k.index for k in h.kills if k.node == miner and k.in_flight and window in k.in_flight]
        if killed:
            return f"its reveal was cut by kill {killed[0]} and not resumed in time"
        return "its reveal was missing at the deadline"
    return "unexplained"


def excused_ban(bars: list[tuple[str, int, int]], miner: str, w: int) -> bool:
    """Whether a report's `banned` entry for `miner` in window w is what is left of a bar the
    checks excuse (`bars`: (miner, the window it was barred in, the window it is barred until),
    one for each such bar a validator logged): a bar holds in the windows after its own, before its
    end (`ValidatorState.is_banned`)."""
    return any(m == miner and barred < w < until for m, barred, until in bars)


def check_fraud(h: Harness, reports: list[dict]) -> Check:
    """Every miner here is honest: none may be barred, in a report or a validator's state or log,
    except for a window whose reveal fell due while a kill kept the miner down (`down_at_reveal`): to
    a validator that challenged it, that miner hid its reveal, and the protocol bars it for a bounded
    time (docs/protocol.md, "Withheld reveals"). Those bars are counted, not failed, and so are the
    `banned` entries of the later windows they cover (`excused_ban`)."""
    names = {h.hotkey(n.name): n.name for n in h.net.neurons}
    uids = {h.chain.metagraph().uid_of(h.hotkey(n.name)): n.name for n in h.net.neurons}
    details, down, excused_bars = [], set(), []
    for neuron in (n for n in h.net.neurons if n.role == "validator"):
        for r in log_records(neuron.log_path):
            if m := re.match(r"window (\d+): uid (\d+) barred until window (\d+): (.*)", r.message):
                miner = uids.get(int(m[2]), f"uid {m[2]}")
                if (kill := down_at_reveal(h, int(m[1]), miner)) is not None:
                    down.add((neuron.name, int(m[1]), miner, kill))
                    excused_bars.append((miner, int(m[1]), int(m[3])))
                    continue
                details.append(
                    f"{neuron.name} w{m[1]}: {miner} barred until w{m[3]} — "
                    f"{fraud_cause(m[4], h, int(m[1]), miner)} ({m[4][:160]})"
                )
    for body in reports:
        for hotkey, entry in body["miners"].items():
            miner = names.get(hotkey, hotkey)
            if (
                "banned" in entry["verdicts"]
                and down_at_reveal(h, body["window"], miner) is None
                and not excused_ban(excused_bars, miner, body["window"])
            ):
                details.append(
                    f"{names.get(body['validator'], '?')} w{body['window']}: {miner} "
                    f"reported banned ({entry['reason']})"
                )
    ok = not details
    excused = (
        f"; {len(down)} bar(s) of a miner a kill kept down over its reveal deadline (kills "
        f"{', '.join(str(k) for k in sorted({d[3] for d in down}))}), as the protocol rules"
        if down
        else ""
    )
    return Check(
        "no honest miner marked fraud",
        ok,
        (f"no other ban in {len(reports)} signed reports or the validators' logs" + excused)
        if ok
        else f"{len(details)} fraud verdict(s) or ban(s)" + excused,
        details,
    )


def check_global_model(h: Harness, reports: list[dict]) -> Check:
    """Every node follows the same global model: per window, every node that synced it applied an
    aggregate with the same result (or all kept the model); a 'not following' line must name why,
    and the node must then have followed another validator; and no miner's update is refused for
    training from another base. (A validator's `leader_agreed_last_window` compares its own
    judgement of a window with the leader's, which differ legitimately when one of them met an
    outage or a restart in that window; it says nothing about which model is followed.)"""
    names = {h.hotkey(n.name)[:10]: n.name for n in h.net.neurons}
    full = {h.hotkey(n.name)[:10]: h.hotkey(n.name) for n in h.net.neurons}
    results: dict[tuple[int, str], str | None] = {}
    details, refusals = [], 0
    store, limit = h.store(), h.net.config.limits.max_manifest_bytes

    def result_of(w: int, prefix: str) -> str | None:
        if (w, prefix) not in results:
            key = aggregate_key(h.run_id, w, full.get(prefix, prefix))
            try:
                results[(w, prefix)] = json.loads(store.get(key, limit))["body"]["result_hash"]
            except (StoreError, ValueError, KeyError):
                results[(w, prefix)] = None
        return results[(w, prefix)]

    def base_of(w: int) -> str | None:
        """The model a window's aggregates start from, which a node that keeps the model keeps."""
        bases = set()
        try:
            keys = store.list(f"{window_prefix(h.run_id, w)}/aggregates/")
        except StoreError:
            keys = []
        for key in (k for k in keys if k.endswith(".json")):
            try:
                bases.add(json.loads(store.get(key, limit))["body"]["base_hash"])
            except (StoreError, ValueError, KeyError):
                continue
        return bases.pop() if len(bases) == 1 else None

    outcomes: dict[int, dict[str, set[str]]] = {}
    for neuron in h.net.neurons:
        records = log_records(neuron.log_path)
        for i, r in enumerate(records):
            if m := re.match(r"window (\d+): applied (\S+?)'s aggregate", r.message):
                w = int(m[1])
                outcomes.setdefault(w, {}).setdefault(neuron.name, set()).add(
                    result_of(w, m[2]) or f"unreadable aggregate of {names.get(m[2], m[2])}"
                )
            elif m := re.match(r"window (\d+): no aggregate anchored and verifiable", r.message):
                w = int(m[1])
                outcomes.setdefault(w, {}).setdefault(neuron.name, set()).add(base_of(w) or "model kept")
            elif m := re.match(r"window (\d+): not following (\S+?)'s aggregate: ?(.*)", r.message):
                refusals += 1
                w, reason = int(m[1]), m[3].strip()
                served = next(
                    (
                        x
                        for x in records[i + 1 :]
                        if x.message.startswith(f"window {w}: applied")
                        or x.message.startswith(f"window {w}: no aggregate")
                    ),
                    None,
                )
                who = names.get(m[2], m[2])
                if not reason:
                    details.append(f"{neuron.name}: refused {who}'s aggregate of w{w} without a reason")
                elif served is None or not served.message.startswith(f"window {w}: applied"):
                    details.append(
                        f"{neuron.name}: refused {who}'s aggregate of w{w} ({reason[:120]}) and no other validator served"
                    )
    for w in sorted(outcomes):
        seen = set().union(*outcomes[w].values())
        if len(seen) > 1:
            by = "; ".join(
                f"{node}: {', '.join(sorted(x[:12] for x in s))}" for node, s in sorted(outcomes[w].items())
            )
            details.append(f"w{w}: nodes reached different models ({by})")
    for body in reports:
        for hotkey, entry in body["miners"].items():
            if "another base model" in (entry.get("reason") or ""):
                details.append(
                    f"{names.get(body['validator'][:10], '?')} w{body['window']}: "
                    f"{names.get(hotkey[:10], hotkey[:10])} trained from another base model"
                )
    ok = not details
    return Check(
        "one global model",
        ok,
        f"{len(outcomes)} windows synced alike by every node; {refusals} refusal(s), each followed by another validator"
        if ok
        else f"{len(details)} problem(s)",
        details,
    )


def left_writes(h: Harness, store: Store) -> list[tuple[str, int, float]]:
    """The writes begun in the nodes' store and never finished, as (where, bytes, unix time it was
    written): temp files of a file store (which its keys do not list), or unfinished multipart
    uploads of an S3 store (of which only the harness's own client can ask the server)."""
    if isinstance(store, FileStore):
        return [
            (path.relative_to(store.root).as_posix(), path.stat().st_size, path.stat().st_mtime)
            for path in sorted(store.root.rglob("*" + TEMP_SUFFIX))
            if path.is_file()
        ]
    assert h.s3_endpoint is not None, "the nodes' store is a file store or on the run's S3 server"
    import boto3

    client = boto3.session.Session(
        aws_access_key_id=FAKE_ACCESS_KEY_ID,
        aws_secret_access_key=FAKE_SECRET_ACCESS_KEY,
        region_name="us-east-1",
    ).client("s3", endpoint_url=h.s3_endpoint)
    pages = client.get_paginator("list_multipart_uploads").paginate(Bucket=S3_BUCKET)
    uploads = [upload for page in pages for upload in page.get("Uploads", [])]
    return [(f"{u['Key']} (upload {u['UploadId']})", 0, u["Initiated"].timestamp()) for u in uploads]


def check_store(h: Harness) -> list[Check]:
    """Every object under the store whole (states load, tensors and checkpoints decode, JSON
    documents parse, blobs hash to their names), read through the store's API, and no write of
    an interrupted writer left anywhere in the store (`left_writes`)."""
    store = h.store()
    limit = h.net.config.limits.max_checkpoint_bytes
    broken, temps, counted = [], [], 0
    for where, size, written in left_writes(h, store):
        cause = next(
            (
                f"kill {k.index} of {k.node}"
                for k in h.kills
                if k.role == "miner" and abs(k.wall - written) < 2.0
            ),
            None,
        ) or next(
            (f"the {d.kind}" for d in h.disruptions if d.wall_start - 2.0 <= written <= d.wall_end + 2.0),
            "unknown",
        )
        temps.append(
            f"{where} ({size} bytes, written {time.strftime('%H:%M:%S', time.localtime(written))}, at {cause})"
        )
    for key in store.list():
        counted += 1
        try:
            data = store.get(key, OBJECT_LIMIT)
            if key.startswith("blobs/"):
                if hashlib.sha256(data).hexdigest() != key.removeprefix("blobs/"):
                    raise ValueError("does not hash to its name")
            elif key.endswith(".json"):
                json.loads(data)
            elif "/states/" in key and blob_format(data) == CODED_STATE_FORMAT:
                check_coded_state(data, limit)
            elif "/states/" in key:
                decode_state(data)
            elif "/trajectories/" in key:
                decode_trajectory(data, max_bytes=limit)
            elif "/checkpoints/" in key:
                decode_record_tensors(data, CHECKPOINT_FORMAT, max_bytes=limit)
            else:
                raise ValueError("an object of no known kind")
        except Exception as exc:  # noqa: BLE001 - every failure is a finding
            broken.append(f"{key}: {type(exc).__name__}: {str(exc)[:160]}")
    return [
        Check(
            "store objects whole",
            not broken,
            f"{counted} objects, every one whole"
            if not broken
            else f"{len(broken)} of {counted} objects broken",
            broken,
        ),
        Check(
            "no temp file left",
            not temps,
            "no temp file in the store"
            if not temps
            else f"{len(temps)} temp file(s) of interrupted writes left",
            temps,
        ),
    ]


STORE_WORDS = re.compile(r"store|symbolic links|not following|publish|reveal failed|commit failed", re.I)
S3_WORDS = re.compile(
    STORE_WORDS.pattern + r"|\bs3\b|timeout|timed out|endpoint|out of reach|connect|unreachable", re.I
)
"""An S3 store's errors name the operation and the bucket (`s3 get 'KEY' in s3://… failed: …`),
its retries botocore's error (`Read timeout on endpoint URL`, `Could not connect to the endpoint
URL`), and a node's outage log what is out of reach (`distrai.store.outage`)."""
CHAIN_WORDS = re.compile(r"chain|database|locked|sqlite|deadline", re.I)
OUTAGE_WORDS = {"store outage": STORE_WORDS, "S3 server paused": S3_WORDS, "chain stall": CHAIN_WORDS}
"""The words that make a node's warning or error a line about an outage of that kind."""


def outage_said(h: Harness, d: Disruption) -> tuple[list[str], list[str], list[str]]:
    """Reads the nodes' logs over `d` into `d.said` and `d.outcome`; returns the nodes that met it
    and said nothing of it, what kept it from being survived, and notes of what the nodes said.
    Chain stall: each node seen waiting on the chain's lock longer than the chain logs a wait
    (`SLOW_LOCK_SECONDS`, plus a sample) must have said so (a node that did not touch the chain
    during the stall, or waited less, has nothing to say). Store outage: which node touched the
    store in it cannot be seen from outside, and one shorter than a window finds some nodes idle
    until their next deadline (no record at all) or working without the store (a miner training
    from its cached shards), so the nodes are silent only when none of them logged a warning or
    error about the store in it; each node that did neither is noted."""
    words = S3_WORDS if d.kind in STORE_KINDS and h.options.on_s3 else OUTAGE_WORDS[d.kind]
    silent, tracebacks, notes = [], [], []
    for neuron in h.net.neurons:
        span = [
            r
            for r in log_records(neuron.log_path, d.log_offsets.get(neuron.name, 0))
            if r.time is None or r.time <= d.wall_end + LOG_SLACK_S
        ]
        d.said[neuron.name] = [
            r.message for r in span if r.level in ("WARNING", "ERROR", "CRITICAL") and words.search(r.message)
        ]
        if d.kind in STORE_KINDS:
            busy = [
                r
                for r in span
                if r.level in ("INFO", "WARNING", "ERROR") and r.time and r.time >= d.wall_start - 1
            ]
            if neuron.name in d.running and not d.said[neuron.name]:
                notes.append(
                    f"{neuron.name}: no store error, but went on: {busy[-1].message[:120]}"
                    if busy
                    else f"{neuron.name}: logged nothing during it (idle until its next deadline)"
                )
        elif (
            neuron.name in d.running
            and d.waited.get(neuron.name, 0.0) > SLOW_LOCK_SECONDS + LOCK_SAMPLE_S
            and not d.said[neuron.name]
        ):
            silent.append(neuron.name)
        if any(r.level == "RAW" or "Traceback" in r.message for r in span):
            tracebacks.append(neuron.name)
    if d.kind in STORE_KINDS and not any(d.said.values()):
        silent = sorted(d.running)
    dead = [name for name, alive in d.alive_after.items() if not alive]
    dead += [
        f"{c.node} (crashed at block {c.block}: {c.error})"
        for c in h.crashes
        if d.wall_start <= c.wall <= d.wall_end + LOG_SLACK_S
    ]
    problems = [f"not running during or right after it: {', '.join(dead)}"] if dead else []
    if tracebacks:
        problems.append(f"a traceback in the log during it: {', '.join(tracebacks)}")
    waits = ", ".join(f"{n} {s:.1f} s" for n, s in d.waited.items() if s > 0) or "nobody"
    if d.kind == "chain stall":
        notes.append(f"seen waiting on the chain's lock (sampled every {LOCK_SAMPLE_S} s): {waits}")
    if silent:
        notes.append(f"said nothing about it in its log: {', '.join(silent)}")
    for name, said in d.said.items():
        notes += [f"{name}: {line[:200]}" for line in said[:3]]
    d.outcome = ("survived" if not problems else "NOT survived") + (
        f"; silent: {', '.join(silent)}" if silent else "; every node that met it logged it"
    )
    if d.kind == "chain stall":
        d.outcome += f"; waited on the lock: {waits}"
    return silent, problems, notes


def check_disruption(h: Harness, kind: str) -> list[Check]:
    """Every outage of `kind` survived (every process alive right after it, no traceback) and
    accounted for in the logs (`outage_said`)."""
    found = [d for d in h.disruptions if d.kind == kind]
    if not found:
        return []
    silent, problems, notes = [], [], []
    for d in found:
        label = f"blocks {d.block}–{d.end_block}: " if len(found) > 1 else ""
        quiet, failed, said = outage_said(h, d)
        silent += [f"{label}{x}" for x in quiet]
        problems += [f"{label}{x}" for x in failed]
        notes += [f"{label}{x}" for x in said]
    how = "; ".join(sorted({d.how for d in found}))
    return [
        Check(
            f"{kind} survived",
            not problems,
            ("every process still running, no traceback" if not problems else "; ".join(problems))
            + f" ({len(found)} × {how})",
            problems,
        ),
        Check(
            f"{kind} logged",
            not silent,
            "every node that met it said so in its log" if not silent else f"silent: {', '.join(silent)}",
            notes,
        ),
    ]


def outage_windows(h: Harness, d: Disruption) -> list[int]:
    """The validated windows an outage can cost: those under way during it (from the start of their
    train phase to their aggregate deadline) and the one that starts within a window after it."""
    cfg = h.cfg
    return [
        w
        for w in range(h.first_window, h.last_validated_window + 1)
        if d.block < window_start(cfg, w) + cfg.aggregate_offset
        and window_start(cfg, w) <= d.end_block + cfg.blocks_per_window
    ]


def accepted_updates(h: Harness) -> dict[int, int]:
    """Window → the most updates any validator accepted in it (its metrics record of the window)."""
    most: dict[int, int] = {}
    for neuron in (n for n in h.net.neurons if n.role == "validator"):
        for r in validator_records(neuron.work_dir / "metrics.jsonl"):
            most[r["window"]] = max(most.get(r["window"], 0), int(r.get("accepted", 0)))
    return most


def committed_miners(h: Harness) -> dict[int, set[str]]:
    """Window → the miners whose commitment to it landed in time."""
    names = {h.hotkey(n.name): n.name for n in h.net.neurons if n.role == "miner"}
    return {
        w: {
            names[hotkey]
            for hotkey in committed_updates(
                h.chain.commitments(block=commit_deadline(h.cfg, w) - 1),
                w,
                lambda b, w=w: committed_in_time(h.cfg, w, b),
            )
            if hotkey in names
        }
        for w in range(h.first_window, h.last_miner_window + 1)
        if commit_deadline(h.cfg, w) - 1 <= h.chain.block()
    }


def repeated_line(messages: list[str]) -> tuple[int, str]:
    """The line most often repeated in `messages`, numbers other than window numbers masked (a node
    that logged each try of a retry loop repeats one line), and how often."""
    counts: dict[str, int] = {}
    for message in messages:
        line = re.sub(r"(?<!window )\b\d+(\.\d+)?\b", "#", message)
        counts[line] = counts.get(line, 0) + 1
    return max(((n, line) for line, n in counts.items()), default=(0, ""))


MAX_REPEATS = 2
"""Times a node may log one line about an outage: it starts, and it ends (`distrai.store.outage`)."""


def outage_costs(h: Harness) -> list[Check]:
    """What each outage cost, once `check_disruption` has read what the nodes said of it: windows
    lost (windows it can cost, `outage_windows`, in which no validator accepted an update, but for a
    window no miner had committed to when it began and one that kills emptied, `emptied_by_kills`;
    every other such window counts against it, whatever else happened in it), honest miners barred
    (bars the validators logged in those windows that no kill explains, `down_at_reveal`) and the
    lines the nodes logged of it (`d.said`: a line logged more than `MAX_REPEATS` times by one node
    is a line a try). Targets: at most one window lost, no honest miner barred, no line repeated."""
    accepted = accepted_updates(h)
    committed = committed_miners(h)
    miners = {n.name for n in h.net.neurons if n.role == "miner"}
    validators = {n.name for n in h.net.neurons if n.role == "validator"}

    def emptied_by_kills(w: int) -> bool:
        """Every miner either killed in its train phase before committing to it, or committed and
        kept down over its reveal deadline by a kill; or every validator killed after its commit
        deadline while its saved state was behind it (it skips the window)."""
        made = committed.get(w, set())
        out = {
            k.node
            for k in h.kills
            if k.role == "miner" and window_start(h.cfg, w) <= k.block < commit_deadline(h.cfg, w)
        } - made
        down = {m for m in made if down_at_reveal(h, w, m) is not None}
        skipped = {
            k.node
            for k in h.kills
            if k.role == "validator"
            and commit_deadline(h.cfg, w) <= k.block <= aggregate_deadline(h.cfg, w)
            and k.state_before["window"] < w
        }
        return miners <= out | down or validators <= skipped

    uids = {h.chain.metagraph().uid_of(h.hotkey(n.name)): n.name for n in h.net.neurons}
    bars = [
        (int(m[1]), neuron.name, uids.get(int(m[2]), f"uid {m[2]}"), m[4])
        for neuron in h.net.neurons
        if neuron.role == "validator"
        for r in log_records(neuron.log_path)
        if (m := re.match(r"window (\d+): uid (\d+) barred until window (\d+): (.*)", r.message))
    ]
    lost, barred, repeated = [], [], []
    for d in h.disruptions:
        d.windows = outage_windows(h, d)
        d.lost = [
            w
            for w in d.windows
            if accepted.get(w, 0) == 0
            and (committed.get(w) or commit_deadline(h.cfg, w) > d.block)
            and not emptied_by_kills(w)
        ]
        d.barred = [
            f"{validator} w{w}: {miner} ({reason[:120]})"
            for w, validator, miner, reason in bars
            if w in d.windows and down_at_reveal(h, w, miner) is None
        ]
        d.repeated = max(
            ((n, name, line) for name, said in d.said.items() for n, line in (repeated_line(said),)),
            default=(0, "", ""),
        )
        label = f"{d.kind} in the {d.phase} phase (blocks {d.block}–{d.end_block})"
        if len(d.lost) > 1:
            lost.append(f"{label}: windows {', '.join(map(str, d.lost))} with no update accepted")
        barred += [f"{label}: {b}" for b in d.barred]
        if d.repeated[0] > MAX_REPEATS:
            repeated.append(f"{label}: {d.repeated[1]} logged {d.repeated[0]} times: {d.repeated[2][:160]}")
    counted = len(h.disruptions)
    return [
        Check(
            "outage windows lost",
            not lost,
            f"{counted} outage(s), each cost at most one window"
            if not lost
            else f"{len(lost)} of {counted} outage(s) cost more than one window",
            lost,
        ),
        Check(
            "outage honest miners barred",
            not barred,
            f"{counted} outage(s), no honest miner barred in the windows they can cost"
            if not barred
            else f"{len(barred)} bar(s) of honest miners",
            barred,
        ),
        Check(
            "outage logged once",
            not repeated,
            f"{counted} outage(s), no node logged a line about one more than {MAX_REPEATS} times"
            if not repeated
            else f"{len(repeated)} of {counted} outage(s) logged a line a try",
            repeated,
        ),
    ]


def run_checks(h: Harness) -> list[Check]:
    reports = signed_reports(h.net, list(range(max(0, h.first_window - 1), h.last_miner_window + 2)))
    manifests = anchored_manifests(h)
    checks = [
        check_processes(h),
        check_run_completed(h),
        check_validator_state(h),
        *check_miner_reveals(h, manifests),
        check_residual_reports(h, reports, manifests),
        check_fraud(h, reports),
        check_global_model(h, reports),
        *check_store(h),
        *check_disruption(h, "store outage"),
        *check_disruption(h, "S3 server paused"),
        *check_disruption(h, "chain stall"),
        *(outage_costs(h) if h.disruptions else []),
    ]
    covered = {k.phase for k in h.kills}
    missing = [p for p in PHASES if p not in covered]
    pairs = {(k.role, k.phase) for k in h.kills}
    checks.append(
        Check(
            "every phase hit",
            not missing and not h.skipped,
            f"{len(h.kills)} kills hit {', '.join(sorted(covered)) or 'nothing'} ({len(pairs)} role-phase pairs)"
            + (f"; never {', '.join(missing)}" if missing else "")
            + (f"; {len(h.skipped)} planned kill(s) skipped" if h.skipped else ""),
            list(h.skipped),
        )
    )
    return checks


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


# -- output -------------------------------------------------------------------------------------


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
        f"(target: 0); `log lines`: the nodes' warnings and errors about it, and the line one node "
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
            f"{len(d.barred)} | {sum(len(x) for x in d.said.values())}"
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
