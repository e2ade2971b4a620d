"""Fixtures shared by several test files, and the session's background jobs.

The jobs that tests only read once they have ended run in two lanes while the other tests do
(`support.background`): in each lane one at a time, the next as soon as the one before has ended;
each lane runs its own jobs (`LANES`), then takes the shared ones (`SHARED`) in turn with the other.
They are the local networks (`support.adversary_net`, `support.leader_net`, `support.findings_net`,
`support.restart_net`, `support.smoke_net`, the README's walk of `support.readme_net`), the chaos run
(`support.chaos_run`) and the benchmarks' quick runs (`support.bench_jobs`). The tests that read them run after every other test, in the order
the jobs end, and wait for theirs. Tests marked `localnet` run a network of their own while they
run; they come last, once every background job has ended, so that no more networks share the cores.
"""

from __future__ import annotations

import importlib
import os
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING

import pytest
from support.background import FinishedNet, Net, Networks, Starter, last_readers
from support.bench_jobs import (
    CommandJob,
    start_boundaries_bench,
    start_calibrate_replay_bench,
    start_convergence_bench,
    start_data_memory_bench,
    start_gpu_bench,
    start_incentives_bench,
    start_inner_recipe_bench,
    start_outer_delay_bench,
    start_reveal_size_bench,
    start_verification_scale_bench,
)
from support.folders import module_folders  # noqa: F401 - a fixture for every test module

if TYPE_CHECKING:
    from support.chaos_run import ChaosJob


def starter_in(module: str) -> Starter:
    """`support.<module>.start_<module>`, imported as its job starts: the networks' modules import torch
    and the product (about 5 CPU-s), which a pytest process that starts no job need not (xdist's
    controller, a run of a few files)."""

    def start(work: Path, env: Mapping[str, str]) -> Net:
        starter: Starter = getattr(importlib.import_module(f"support.{module}"), f"start_{module}")
        return starter(work, env)

    return start


NETWORKS = {
    "smoke_net": starter_in("smoke_net"),
    "leader_net": starter_in("leader_net"),
    "chaos_run": starter_in("chaos_run"),
    "adversary_net": starter_in("adversary_net"),
    "gpu_bench": start_gpu_bench,
    "findings_net": starter_in("findings_net"),
    "incentives_bench": start_incentives_bench,
    "convergence_bench": start_convergence_bench,
    "reveal_size_bench": start_reveal_size_bench,
    "outer_delay_bench": start_outer_delay_bench,
    "restart_net": starter_in("restart_net"),
    "readme_net": starter_in("readme_net"),
    "inner_recipe_bench": start_inner_recipe_bench,
    "calibrate_replay_bench": start_calibrate_replay_bench,
    "boundaries_bench": start_boundaries_bench,
    "data_memory_bench": start_data_memory_bench,
    "verification_scale_bench": start_verification_scale_bench,
}
"""The background jobs, by the name of the fixture that gives each, in the order their readers run
(about the order in which they end)."""
LANES = (
    ("leader_net", "adversary_net", "findings_net", "restart_net", "verification_scale_bench"),
    ("smoke_net", "chaos_run"),
)
"""The jobs each lane runs first, one at a time: in the first the local networks, paced by the
chain's blocks, the last of them the verification-scale benchmark's; in the second the light smoke
run beside the leader network, whose timing is tightest, then the chaos run."""
SHARED = (
    "gpu_bench",
    "incentives_bench",
    "convergence_bench",
    "reveal_size_bench",
    "outer_delay_bench",
    "readme_net",
    "inner_recipe_bench",
    "calibrate_replay_bench",
    "boundaries_bench",
    "data_memory_bench",
)
"""The jobs either lane runs once its own have started, in this order: the benchmarks' quick runs,
which take a core each, and the README's walk beside the other networks. They were split between
the lanes by hand, and each machine's speed undid the split: at d0fa8bc the first lane ended 90 s
after the second, at d3a5908 and 3c06d6e 77 and 94 s before it, at 2ed8319 47 s after it and at
6ae2489 163 s after it (docs/testing.md has the timelines). Taken by whichever lane is free, they go
where the time is. The benchmarks' runs were tests of the foreground, which waited on each process
in turn; as jobs they come out of the foreground's time."""


def pytest_configure(config):
    config.addinivalue_line(
        "markers",
        "localnet: runs a local network of its own; such tests run last, after the background networks",
    )
    config.addinivalue_line(
        "markers",
        "e2e: starts a network, a node or a benchmark as processes, or a browser (given to every reader "
        "of a background job and every `localnet` test), or trains a whole window of miners to score it; "
        "`-m 'not e2e'` is the fast tier",
    )


def jobs_read(item: pytest.Item) -> list[str]:
    """The background jobs `item` reads, in the order of `NETWORKS`."""
    return [name for name in NETWORKS if name in item.fixturenames]


def network_rank(item: pytest.Item) -> tuple[int, int]:
    """Other tests first, then the readers of each background network in the order they run, then
    the tests that run a network of their own."""
    read = [list(NETWORKS).index(name) for name in jobs_read(item)]
    if read:
        return 1, max(read)
    if item.get_closest_marker("localnet"):
        return 2, 0
    return 0, 0


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Mark what reads a background job or runs a network `e2e` (before `-m` selects), then order."""
    for item in items:
        if network_rank(item) != (0, 0):
            item.add_marker(pytest.mark.e2e)
    items.sort(key=network_rank)


@pytest.fixture(scope="session")
def session_temp(tmp_path_factory):
    """Every process the session starts keeps its temporary files, and torch's compile cache, under
    the session's own folder, which pytest removes after a passing run: torchrun's otherwise stay in
    /tmp for good. The compile cache starts cold, as on a CI machine, so a run here compiles what CI
    compiles; that costs `bench/gpu.py --quick` about 50 CPU-s (131 s alone, 79 s warm)."""
    folder = tmp_path_factory.mktemp("tmp")
    saved = {name: os.environ.get(name) for name in ("TMPDIR", "TORCHINDUCTOR_CACHE_DIR")}
    os.environ["TORCHINDUCTOR_CACHE_DIR"] = str(folder / "torchinductor")
    os.environ["TMPDIR"] = str(folder)
    yield folder
    for name, value in saved.items():
        if value is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = value


FAILED_READS = pytest.StashKey[set[str]]()
"""The background jobs that a failed test of the session reads: their folders are kept for a look."""
LAST_READERS = pytest.StashKey[dict[str, list[str]]]()
"""The jobs whose last reader each test is (`support.background.last_readers`)."""


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call):
    report = yield
    if report.failed:
        item.session.stash.setdefault(FAILED_READS, set()).update(jobs_read(item))
    return report


@pytest.fixture(scope="session")
def networks(request, tmp_path_factory, session_temp):
    items = request.session.items
    needed = {name for item in items for name in jobs_read(item)}
    lanes = [[name for name in lane if name in needed] for lane in LANES]
    shared = [name for name in SHARED if name in needed]
    request.session.stash[LAST_READERS] = last_readers(items, needed)
    background = Networks(NETWORKS, lanes, tmp_path_factory, os.environ, shared)
    yield background
    background.close()


@pytest.fixture(autouse=True)
def between_tests(request, networks):
    """Before each test: a lane whose network has ended starts its next; a test that runs a network of
    its own first waits for every background network to end; while a test that patches process-wide
    state (monkeypatch) runs, no network starts. After the last test that reads a job, the job's
    folder goes, unless a test that reads it failed (as pytest keeps a failed test's `tmp_path`)."""
    if request.node.get_closest_marker("localnet"):
        networks.drain()
    else:
        networks.tick()
    patches = "monkeypatch" in request.fixturenames
    networks.hold(patches)
    yield
    if patches:
        networks.hold(False)
    kept = request.session.stash.get(FAILED_READS, set())
    for name in request.session.stash[LAST_READERS].get(request.node.nodeid, []):
        if name not in kept:
            networks.discard(name)


@pytest.fixture(scope="session")
def adversary_net(networks) -> FinishedNet:
    """The local network of `support.adversary_net`, run to its end."""
    return networks.result("adversary_net")


@pytest.fixture(scope="session")
def leader_net(networks) -> FinishedNet:
    """The local network of `support.leader_net`, run to its end."""
    return networks.result("leader_net")


@pytest.fixture(scope="session")
def findings_net(networks) -> FinishedNet:
    """The local network of `support.findings_net`, run to its end."""
    return networks.result("findings_net")


@pytest.fixture(scope="session")
def restart_net(networks) -> FinishedNet:
    """The local network of `support.restart_net`, run to its end."""
    return networks.result("restart_net")


@pytest.fixture(scope="session")
def smoke_net(networks) -> FinishedNet:
    """The GPU smoke window's command on a CPU (`support.smoke_net`), run to its end."""
    return networks.result("smoke_net")


@pytest.fixture(scope="session")
def readme_net(networks) -> FinishedNet:
    """The README's walk of `support.readme_net`, run to its end."""
    return networks.result("readme_net")


@pytest.fixture(scope="session")
def chaos_run(networks) -> ChaosJob:
    """The chaos run of `support.chaos_run`, run to its end."""
    return networks.result("chaos_run").net


@pytest.fixture(scope="session")
def inner_recipe_bench(networks) -> CommandJob:
    """`bench/inner_recipe.py --quick` (`support.bench_jobs`), run to its end."""
    return networks.result("inner_recipe_bench").net


@pytest.fixture(scope="session")
def outer_delay_bench(networks) -> CommandJob:
    """`bench/outer_delay.py pipe 0.7 0.3 --quick` (`support.bench_jobs`), run to its end."""
    return networks.result("outer_delay_bench").net


@pytest.fixture(scope="session")
def data_memory_bench(networks) -> CommandJob:
    """`bench/data_memory.py --quick` (`support.bench_jobs`), run to its end."""
    return networks.result("data_memory_bench").net


@pytest.fixture(scope="session")
def gpu_bench(networks) -> CommandJob:
    """`bench/gpu.py --quick` on the CPU (`support.bench_jobs`), run to its end."""
    return networks.result("gpu_bench").net


@pytest.fixture(scope="session")
def convergence_bench(networks) -> CommandJob:
    """`bench/convergence.py --quick` on both corpora (`support.bench_jobs`), run to its end."""
    return networks.result("convergence_bench").net


@pytest.fixture(scope="session")
def calibrate_replay_bench(networks) -> CommandJob:
    """`bench/calibrate_replay.py --quick --save-states`, then its replay in a second process
    (`support.bench_jobs`), run to their end."""
    return networks.result("calibrate_replay_bench").net


@pytest.fixture(scope="session")
def reveal_size_bench(networks) -> CommandJob:
    """`bench/reveal_size.py --quick` (`support.bench_jobs`), run to its end."""
    return networks.result("reveal_size_bench").net


@pytest.fixture(scope="session")
def verification_scale_bench(networks) -> CommandJob:
    """`bench/verification_scale.py --quick --warm-start` (`support.bench_jobs`), run to its end."""
    return networks.result("verification_scale_bench").net


@pytest.fixture(scope="session")
def boundaries_bench(networks) -> CommandJob:
    """`bench/boundaries.py --quick` (`support.bench_jobs`), run to its end."""
    return networks.result("boundaries_bench").net


@pytest.fixture(scope="session")
def incentives_bench(networks) -> CommandJob:
    """`bench/incentives.py --quick` (`support.bench_jobs`), run to its end."""
    return networks.result("incentives_bench").net
