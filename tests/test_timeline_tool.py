"""The suite's timeline tool (`support.timeline`): its summary reads what the plugin writes."""

from __future__ import annotations

import json
import subprocess
import sys
import threading

from support.timeline import JobCpu, summary


def test_the_summary_gives_each_jobs_span_and_each_files_totals(tmp_path, capsys):
    path = tmp_path / "timeline.jsonl"
    rows = [
        {"job": "leader_net", "lane": 0, "ev": "start", "t": 10.0},
        {
            "test": "tests/test_a.py::one",
            "start": 1.0,
            "wall": 2.5,
            "own": 2.0,
            "kids": 0.0,
            "disk_mb": 3,
            "t": 3.5,
        },
        {
            "test": "tests/test_a.py::two",
            "start": 3.5,
            "wall": 1.5,
            "own": 1.0,
            "kids": 0.0,
            "disk_mb": 70,
            "t": 5.0,
        },
        {
            "test": "tests/test_b.py::one",
            "start": 5.0,
            "wall": 9.0,
            "own": 0.5,
            "kids": 4.0,
            "disk_mb": -2,
            "t": 14.0,
        },
        {"job": "leader_net", "lane": 0, "ev": "launched", "t": 10.5},
        {"job": "leader_net", "lane": 0, "ev": "end", "finished": True, "t": 185.5},
        {"job": "gpu_bench", "lane": 1, "ev": "start", "t": 12.0},
        {"job": "gpu_bench", "lane": 1, "ev": "end", "finished": True, "t": 20.0},
        {"job_cpu": "leader_net", "cpu": 61.5},
    ]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    summary([str(path)])
    lines = capsys.readouterr().out.splitlines()
    assert ["0", "leader_net", "10.0", "→", "185.5", "175.5", "61.5"] in [line.split() for line in lines], (
        lines
    )
    assert ["1", "gpu_bench", "12.0", "→", "20.0", "8.0", "—"] in [line.split() for line in lines], lines
    assert "  the jobs' CPU: 61.5 s" in lines
    assert "3 tests, the last ending at 14.0 s" in lines
    assert "disk: at most 70 MB more in use than at the start, at 5.0 s (a test's end)" in lines
    files = [line.split() for line in lines if "tests/test_" in line]
    assert files == [["9.0", "0.5", "1", "tests/test_b.py"], ["4.0", "3.0", "2", "tests/test_a.py"]]


def test_without_cgroups_the_summary_says_no_jobs_cpu_was_measured(tmp_path, capsys):
    path = tmp_path / "timeline.jsonl"
    rows = [
        {"job": "smoke_net", "lane": 1, "ev": "start", "t": 1.0},
        {"job": "smoke_net", "lane": 1, "ev": "end", "finished": True, "t": 2.0},
        {"test": "tests/test_a.py::one", "start": 1.0, "wall": 1.0, "own": 1.0, "kids": 0.0, "t": 2.0},
        {"job_cpu": None},
    ]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    summary([str(path)])
    out = capsys.readouterr().out
    assert "no job's CPU" in out and "the jobs' CPU" not in out


def test_a_jobs_cpu_counts_what_its_starting_thread_forked_and_nothing_else():
    jobs = JobCpu()
    spin = [
        sys.executable,
        "-c",
        "import time; t = time.process_time()\nwhile time.process_time() - t < 0.3: pass",
    ]
    jobs(job="spinner", ev="start")
    child = subprocess.Popen(spin)
    jobs(job="spinner", ev="launched")
    subprocess.run(spin, check=True)  # after "launched": not the job's
    child.wait()
    if not jobs.usable:  # no cgroup-v1 cpuacct here: nothing is counted and nothing claims to be
        assert jobs.totals() == {}
        return
    home = jobs._current(threading.get_native_id())
    assert not home.name.startswith(jobs.prefix), "the thread was not moved back out of the job's group"
    totals = jobs.totals()
    assert totals.keys() == {"spinner"}
    assert 0.3 <= totals["spinner"] < 0.6, totals
    assert not jobs.group("spinner").exists()
