"""The suite gives its folders back as it goes: a background job's once no test reads it
(`support.background`: the last reader of each job is known from the ordered items, and a job's
folder goes only once the job has ended), a module's fixtures' once the module is done
(`support.folders`), each unless a test failed."""

from __future__ import annotations

import os
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from support.background import Networks, last_readers


@dataclass
class Item:
    nodeid: str
    fixturenames: list[str] = field(default_factory=list)


def test_each_job_is_given_to_the_last_item_that_reads_it():
    items = [
        Item("a", ["tmp_path", "leader_net"]),
        Item("b", ["leader_net", "chaos_run"]),
        Item("c", ["chaos_run"]),
        Item("d", ["smoke_net", "chaos_run"]),
        Item("e", ["tmp_path"]),
    ]
    assert last_readers(items, ["leader_net", "chaos_run", "smoke_net", "readme_net"]) == {
        "b": ["leader_net"],
        "d": ["chaos_run", "smoke_net"],
    }


@dataclass
class ProcessNet:
    """A job of one real process that ends when its stdin closes."""

    process: subprocess.Popen

    @property
    def neurons(self):
        return [self]

    def running(self) -> bool:
        return self.process.poll() is None

    def stop(self) -> None:
        self.process.kill()
        self.process.wait()


def start_writer(folder: Path, env) -> ProcessNet:
    folder.mkdir(parents=True)
    (folder / "store.bin").write_bytes(b"\0" * 4096)
    return ProcessNet(
        subprocess.Popen([sys.executable, "-c", "import sys; sys.stdin.read()"], stdin=subprocess.PIPE)
    )


def test_a_job_folder_goes_once_the_job_has_ended_and_not_before(tmp_path_factory, monkeypatch):
    monkeypatch.setattr(Networks, "listeners", [])  # not one of the session's jobs: no timeline of it
    networks = Networks({"job": start_writer}, [["job"]], tmp_path_factory, {})
    try:
        networks.tick()
        home = next(Path(tmp_path_factory.getbasetemp()).glob("job*"))
        assert (home / "net" / "store.bin").stat().st_size == 4096
        with pytest.raises(ValueError, match="job has not ended"):
            networks.discard("job")
        assert home.is_dir()
        running = networks._running[0]
        assert running is not None
        running.net.process.stdin.close()
        finished = networks.result("job")
        assert finished.finished and home.is_dir()
        networks.discard("job")
        assert not home.exists()
        assert networks.result("job") is finished
        networks.discard("job")
    finally:
        networks.close()


def test_a_shared_job_goes_to_the_first_lane_free_of_its_own(tmp_path_factory, monkeypatch):
    monkeypatch.setattr(Networks, "listeners", [])
    jobs = ("long", "own", "first", "second")
    networks = Networks(
        dict.fromkeys(jobs, start_writer), [["long"], ["own"]], tmp_path_factory, {}, ["first", "second"]
    )

    def lanes() -> list[str | None]:
        return [r.name if r else None for r in networks._running]

    def end(lane: int, name: str) -> None:
        running = networks._running[lane]
        assert running is not None and running.name == name
        running.net.process.stdin.close()
        networks.result(name)

    try:
        networks.tick()
        assert lanes() == ["long", "own"], "each lane's own jobs first"
        end(1, "own")
        assert lanes() == ["long", "first"], "the free lane takes the first shared job"
        end(1, "first")
        assert lanes() == ["long", "second"], "and the next, while the other lane is still busy"
        end(1, "second")
        end(0, "long")
        assert lanes() == [None, None]
        assert all(networks.result(name).finished for name in jobs)
    finally:
        networks.close()


MODULE = """
import pytest

@pytest.fixture(scope="module")
def data(module_folders):
    folder = module_folders("data")
    (folder / "store.bin").write_bytes(bytes(4096))
    with open("made.txt", "a") as out:
        out.write(f"{__name__} {folder}\\n")
    return folder

def test_one(data):
    assert (data / "store.bin").exists()

def test_two(data):
    assert {outcome}
"""


def outer_free(env):
    """The environment without what sets up this session's pytest (`PYTEST_ADDOPTS`, and the
    timeline's file, which an inner session given its plugin would write over)."""
    return {k: v for k, v in env.items() if not k.startswith("PYTEST_") and k != "TIMELINE"}


def test_a_modules_folders_go_after_its_last_test_unless_one_failed(tmp_path):
    """A real pytest session of two modules, one passing and one with a failed test."""
    (tmp_path / "conftest.py").write_text("from support.folders import module_folders  # noqa: F401\n")
    (tmp_path / "test_passing.py").write_text(MODULE.replace("{outcome}", "True"))
    (tmp_path / "test_failing.py").write_text(MODULE.replace("{outcome}", "False"))
    tests = Path(__file__).parent
    run = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-q",
            "-p",
            "no:cacheprovider",
            "--basetemp",
            str(tmp_path / "base"),
        ],
        cwd=tmp_path,
        env={**outer_free(os.environ), "PYTHONPATH": str(tests)},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert "1 failed, 3 passed" in run.stdout, run.stdout + run.stderr
    made = dict(line.split() for line in (tmp_path / "made.txt").read_text().splitlines())
    assert not Path(made["test_passing"]).exists()
    assert (Path(made["test_failing"]) / "store.bin").stat().st_size == 4096
