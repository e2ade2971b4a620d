"""Where the full suite's time goes: a pytest plugin that writes each test's start, wall time and CPU
(its own process's and its reaped children's) and the disk in use then, and each background job's
start, end and CPU, as JSON lines, and a summary of such a file.

    TIMELINE=/tmp/timeline.jsonl python -m pytest -q -p support.timeline
    python tests/support/timeline.py /tmp/timeline.jsonl

Under pytest-xdist each worker writes its own file, the path with `.gw0`, `.gw1`, … appended; give
the summary all of them (`/tmp/timeline.jsonl*`).

The children's CPU of a test counts every child reaped while it ran, background jobs' included, so
read it as a hint; so too the disk, which is the whole file system's that holds the temporary folder
(statvfs), less what it held when the session began. A job's CPU is exact where the machine lets
root make cgroup-v1 `cpuacct` groups (`JobCpu`): the thread that starts a job's processes is moved
into a group of the job's own while it does, so that every process the job starts, and every process
those start, is counted there; where it cannot, the summary says so. docs/testing.md quotes such runs.
"""

from __future__ import annotations

import collections
import contextlib
import json
import os
import resource
import secrets
import shutil
import sys
import tempfile
import threading
import time
from pathlib import Path

import pytest

T0 = time.monotonic()
JOB_CPU = pytest.StashKey[tuple["Timeline", "JobCpu"]]()


def _disk_used() -> int:
    return shutil.disk_usage(tempfile.gettempdir()).used


def _cpu() -> tuple[float, float]:
    own = resource.getrusage(resource.RUSAGE_SELF)
    kids = resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime, kids.ru_utime + kids.ru_stime


class Timeline:
    def __init__(self, path: str):
        self.out = open(path, "w", buffering=1)  # noqa: SIM115 - open for the whole session
        self.disk_before = _disk_used()

    def emit(self, **record) -> None:
        record["t"] = round(time.monotonic() - T0, 1)
        self.out.write(json.dumps(record) + "\n")

    @pytest.hookimpl(hookwrapper=True)
    def pytest_runtest_protocol(self, item, nextitem):
        before, start = _cpu(), time.monotonic()
        yield
        after = _cpu()
        self.emit(
            test=item.nodeid,
            start=round(start - T0, 1),
            wall=round(time.monotonic() - start, 1),
            own=round(after[0] - before[0], 1),
            kids=round(after[1] - before[1], 1),
            disk_mb=round((_disk_used() - self.disk_before) / 2**20),
        )


class JobCpu:
    """Each background job's CPU, from a cgroup-v1 `cpuacct` group of its own: the thread that starts
    the job's processes is in the group from the job's "start" to its "launched", and what it forks
    meanwhile (and what those fork) stays there."""

    ROOT = Path("/sys/fs/cgroup/cpuacct")

    def __init__(self) -> None:
        self.prefix = f"distrai-timeline-{os.getpid()}-{secrets.token_hex(4)}-"
        """each instance its own groups: a test of this class beside the session's own counts only its own"""
        self.home: dict[int, Path] = {}
        self.usable = os.access(self.ROOT, os.W_OK)

    def group(self, job: str) -> Path:
        return self.ROOT / (self.prefix + job)

    def __call__(self, job: str, ev: str, **_) -> None:
        if not self.usable:
            return
        tid = threading.get_native_id()
        try:
            if ev == "start":
                self.group(job).mkdir(exist_ok=True)
                self.home[tid] = self._current(tid)
                (self.group(job) / "tasks").write_text(str(tid))
            elif ev == "launched" and tid in self.home:
                (self.home.pop(tid) / "tasks").write_text(str(tid))
        except OSError:
            self.usable = False

    def _current(self, tid: int) -> Path:
        for line in Path(f"/proc/self/task/{tid}/cgroup").read_text().splitlines():
            _, controllers, path = line.split(":", 2)
            if "cpuacct" in controllers.split(","):
                return self.ROOT / path.lstrip("/")
        return self.ROOT

    def totals(self) -> dict[str, float]:
        """Seconds of CPU of each job's group, its processes all ended (the groups are removed)."""
        seconds = {}
        for group in sorted(self.ROOT.glob(self.prefix + "*")):
            seconds[group.name.removeprefix(self.prefix)] = int((group / "cpuacct.usage").read_text()) / 1e9
            with contextlib.suppress(OSError):
                group.rmdir()
        return seconds


def pytest_configure(config):
    path = os.environ.get("TIMELINE", "timeline.jsonl")
    worker = os.environ.get("PYTEST_XDIST_WORKER")
    timeline = Timeline(f"{path}.{worker}" if worker else path)
    config.pluginmanager.register(timeline, "timeline-writer")
    from support.background import Networks

    jobs = JobCpu()
    config.stash[JOB_CPU] = (timeline, jobs)
    Networks.listeners.extend([timeline.emit, jobs])


def pytest_unconfigure(config):
    timeline, jobs = config.stash[JOB_CPU]
    if jobs.usable:
        for job, seconds in jobs.totals().items():
            timeline.emit(job_cpu=job, cpu=round(seconds, 1))
    else:
        timeline.emit(job_cpu=None)


def summary(paths: list[str]) -> None:
    rows = [json.loads(line) for path in paths for line in Path(path).read_text().splitlines()]
    cpu = {r["job_cpu"]: r["cpu"] for r in rows if r.get("job_cpu")}
    measured = bool(cpu) or not any("job_cpu" in r for r in rows)
    print("background jobs (lane, name, start → end, seconds, CPU-s):")
    started = {}
    for r in (r for r in rows if "job" in r):
        if r["ev"] == "start":
            started[r["job"]] = r["t"]
        elif r["ev"] == "end":
            begun = started.get(r["job"], 0.0)
            used = f"{cpu[r['job']]:7.1f}" if r["job"] in cpu else "      —"
            print(f"  {r['lane']} {r['job']:24} {begun:7.1f} → {r['t']:7.1f} {r['t'] - begun:7.1f} {used}")
    if cpu:
        print(f"  the jobs' CPU: {sum(cpu.values()):.1f} s")
    elif not measured:
        print("  (no job's CPU: this machine lets no cgroup-v1 cpuacct group be made)")
    tests = [r for r in rows if "test" in r]
    print(f"{len(tests)} tests, the last ending at {max(r['start'] + r['wall'] for r in tests):.1f} s")
    disk = [r for r in tests if "disk_mb" in r]
    if disk:
        top = max(disk, key=lambda r: r["disk_mb"])
        end = top["start"] + top["wall"]
        print(
            f"disk: at most {top['disk_mb']} MB more in use than at the start, at {end:.1f} s (a test's end)"
        )
    files: dict[str, list[float]] = collections.defaultdict(lambda: [0.0, 0.0, 0.0])
    for r in tests:
        totals = files[r["test"].split("::")[0]]
        totals[0] += r["wall"]
        totals[1] += r["own"]
        totals[2] += 1
    print("files by wall time (wall, own CPU, tests):")
    for name, (wall, own, count) in sorted(files.items(), key=lambda kv: -kv[1][0])[:25]:
        print(f"  {wall:7.1f} {own:7.1f} {count:5.0f}  {name}")


if __name__ == "__main__":
    summary(sys.argv[1:])
