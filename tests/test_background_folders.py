"""The session's background jobs give their folders back once no test reads them
(`support.background`): the last reader of each job is known from the ordered items, and a job's
folder goes only once the job has ended."""

from __future__ import annotations

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
