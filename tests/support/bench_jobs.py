"""The benchmarks' quick runs as background jobs (`support.background`): each is one process that
writes a report, and its tests only read the report and the process's output once it has ended, so it
runs beside the other tests (tests/test_bench_gpu.py, tests/test_bench_smoke.py, tests/test_calibrate_replay.py,
tests/test_bench_reveal_size.py, tests/test_bench_verification_scale.py, tests/test_bench_boundaries.py
and tests/test_bench_inner_recipe.py read them).

Each report file starts with an old report and hand-written notes after the marker, which the run
must keep."""

from __future__ import annotations

import shlex
import subprocess
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
MARKER = "<!-- Notes below this line are kept when the benchmark rewrites this file. -->"
KEPT = "Hand-written notes that a rerun must keep.\n"
OLD_REPORT = f"# old report\n{MARKER}\n{KEPT}"


def bench_module(name: str):
    """A module of bench/, which imports its siblings by their bare names."""
    if str(ROOT / "bench") not in sys.path:
        sys.path.insert(0, str(ROOT / "bench"))
    return __import__(name)


class CommandJob:
    """`argv` run from the repository's root in `env`, its output in files of `folder`: running while
    the process is (`neurons`), its `completed()` run after."""

    def __init__(self, argv: Sequence[str], folder: Path, env: Mapping[str, str], report: Path):
        self.argv = list(argv)
        self.report = report
        self._out = folder / "stdout.txt"
        self._err = folder / "stderr.txt"
        with self._out.open("wb") as out, self._err.open("wb") as err:
            self.process = subprocess.Popen(self.argv, cwd=ROOT, env=dict(env), stdout=out, stderr=err)
        self.neurons = [self]

    def running(self) -> bool:
        return self.process.poll() is None

    def stop(self) -> None:
        """End the process if it still runs (its time is up, or the session is over)."""
        if self.running():
            self.process.kill()
        self.process.wait()

    def completed(self) -> subprocess.CompletedProcess:
        return subprocess.CompletedProcess(
            self.argv,
            self.process.returncode,
            self._out.read_text(errors="replace"),
            self._err.read_text(errors="replace"),
        )


def bench_job(work: Path, env: Mapping[str, str], script: str, report: str, *flags: str) -> CommandJob:
    """`python bench/<script> <flags> --output <work>/<report>`, the report seeded with `OLD_REPORT`."""
    work.mkdir(parents=True)
    output = work / report
    output.write_text(OLD_REPORT)
    return CommandJob([sys.executable, f"bench/{script}", *flags, "--output", str(output)], work, env, output)


def start_gpu_bench(work: Path, env: Mapping[str, str]) -> CommandJob:
    return bench_job(work, env, "gpu.py", "gpu.md", "--quick", "--device", "cpu")


def start_convergence_bench(work: Path, env: Mapping[str, str]) -> CommandJob:
    flags = ("--quick", "--corpus", "templated", "real", "--peer", "torchft", "--sweep")
    return bench_job(work, env, "convergence.py", "benchmarks.md", *flags)


def start_incentives_bench(work: Path, env: Mapping[str, str]) -> CommandJob:
    return bench_job(work, env, "incentives.py", "incentives.md", "--quick")


def start_verification_scale_bench(work: Path, env: Mapping[str, str]) -> CommandJob:
    """`bench/verification_scale.py --quick --warm-start`, its network's files kept in `work`/net."""
    flags = ("--quick", "--warm-start", "--work", str(work))
    return bench_job(work, env, "verification_scale.py", "verification-scale.md", *flags)


def start_boundaries_bench(work: Path, env: Mapping[str, str]) -> CommandJob:
    return bench_job(work, env, "boundaries.py", "boundaries.md", "--quick")


def start_inner_recipe_bench(work: Path, env: Mapping[str, str]) -> CommandJob:
    return bench_job(work, env, "inner_recipe.py", "inner-recipe.md", "--quick")


def start_outer_delay_bench(work: Path, env: Mapping[str, str]) -> CommandJob:
    return bench_job(work, env, "outer_delay.py", "outer-delay.md", "pipe", "0.7", "0.3", "--quick")


DATA_BEGIN, DATA_END = "<!-- data_memory: begin -->", "<!-- data_memory: end -->"
DATA_BEFORE, DATA_AFTER = "# Data\n\nWritten by hand.\n\n", "\n\nHand-written notes.\n"
"""bench/data_memory.py rewrites only its section between the markers of a page it shares."""


def start_data_memory_bench(work: Path, env: Mapping[str, str]) -> CommandJob:
    work.mkdir(parents=True)
    output = work / "data.md"
    output.write_text(f"{DATA_BEFORE}{DATA_BEGIN}\nstale\n{DATA_END}{DATA_AFTER}")
    return CommandJob(
        [sys.executable, "bench/data_memory.py", "--quick", "--output", str(output)], work, env, output
    )


def start_calibrate_replay_bench(work: Path, env: Mapping[str, str]) -> CommandJob:
    """`bench/calibrate_replay.py --quick --save-states` into `same.md` (its report, seeded with
    `OLD_REPORT`), then, once it has ended well, a second process replaying the states it saved into
    `fresh.md`: one job, two processes, as a shell runs them."""
    work.mkdir(parents=True)
    same, fresh, states = work / "same.md", work / "fresh.md", work / "states"
    same.write_text(OLD_REPORT)
    script = "bench/calibrate_replay.py"
    first = [sys.executable, script, "--quick", "--save-states", str(states), "--output", str(same)]
    second = [sys.executable, script, "--replay-states", str(states), "--output", str(fresh)]
    return CommandJob(["bash", "-c", f"{shlex.join(first)} && {shlex.join(second)}"], work, env, same)


REVEAL_SIZE_OTHER = "<!-- run: 150m cuda 32x2048 steps 40-80 -->\n## an earlier run\n"
"""An earlier run's section of bench/reveal_size.py's page, which a rerun keeps."""


def start_reveal_size_bench(work: Path, env: Mapping[str, str]) -> CommandJob:
    work.mkdir(parents=True)
    output = work / "reveal-size.md"
    output.write_text(f"# old\n\n{REVEAL_SIZE_OTHER}\n{MARKER}\nHand-written notes.\n")
    return CommandJob(
        [sys.executable, "bench/reveal_size.py", "--quick", "--output", str(output)], work, env, output
    )
