"""What a run of bench/chaos.py did (its kills, outages, crashes and checks), and the nodes' logs
it reads."""

from __future__ import annotations

import re
import time
from dataclasses import dataclass, field
from pathlib import Path

from _chaos_plan import ChaosOptions

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
    """bars of honest miners in `windows` that no kill explains and no re-read lifted"""
    held: list[str] = field(default_factory=list)
    """holds in `windows` for a reveal the outage kept unread, lifted by the next window's re-read
    (the window's pay lost, docs/protocol.md "Withheld reveals")"""
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
