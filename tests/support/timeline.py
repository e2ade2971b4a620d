"""Where the full suite's time goes: a pytest plugin that writes each test's start, wall time and CPU
(its own process's and its reaped children's) and each background job's start and end, as JSON
lines, and a summary of such a file.

    TIMELINE=/tmp/timeline.jsonl python -m pytest -q -p support.timeline
    python tests/support/timeline.py /tmp/timeline.jsonl

The children's CPU of a test counts every child reaped while it ran, background jobs' included, so
read it as a hint. docs/testing.md quotes such runs.
"""

from __future__ import annotations

import collections
import json
import os
import resource
import sys
import time
from pathlib import Path

import pytest

T0 = time.monotonic()


def _cpu() -> tuple[float, float]:
    own = resource.getrusage(resource.RUSAGE_SELF)
    kids = resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime, kids.ru_utime + kids.ru_stime


class Timeline:
    def __init__(self, path: str):
        self.out = open(path, "w", buffering=1)  # noqa: SIM115 - open for the whole session

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
        )


def pytest_configure(config):
    timeline = Timeline(os.environ.get("TIMELINE", "timeline.jsonl"))
    config.pluginmanager.register(timeline, "timeline-writer")
    from support.background import Networks

    Networks.listeners.append(timeline.emit)


def summary(path: str) -> None:
    rows = [json.loads(line) for line in Path(path).read_text().splitlines()]
    print("background jobs (lane, name, start → end, seconds):")
    started = {}
    for r in (r for r in rows if "job" in r):
        if r["ev"] == "start":
            started[r["job"]] = r["t"]
        else:
            begun = started.get(r["job"], 0.0)
            print(f"  {r['lane']} {r['job']:24} {begun:7.1f} → {r['t']:7.1f} {r['t'] - begun:7.1f}")
    tests = [r for r in rows if "test" in r]
    print(f"{len(tests)} tests, the last ending at {max(r['start'] + r['wall'] for r in tests):.1f} s")
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
    summary(sys.argv[1])
