"""No temp file of an interrupted write outlives it in a file store (`distrai.store.temps`): a
writer killed mid-write leaves one that the next opening of the store sweeps; one whose store went
away mid-write removes its own once the store answers again."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from distrai.store import FileStore, StoreError
from distrai.store.temps import STALE_AFTER_S, TEMP_SUFFIX, is_stale, temp_path, this_host

KILLED_MID_WRITE = """
import sys, threading
from pathlib import Path
from distrai.store.file import write_atomically

def fill(out):
    out.write(b"half a value")
    out.flush()
    print("writing", flush=True)
    threading.Event().wait()

write_atomically(Path(sys.argv[1]), fill)
"""


def temps(root: Path) -> list[Path]:
    return sorted(p for p in root.rglob(f"*{TEMP_SUFFIX}"))


@pytest.mark.parametrize(
    "name,age,running,stale",
    [
        (f".k.{this_host()}-12.ab{TEMP_SUFFIX}", 1.0, False, True),
        (f".k.{this_host()}-12.ab{TEMP_SUFFIX}", 1.0, True, False),
        (f".k.{this_host()}-12.ab{TEMP_SUFFIX}", STALE_AFTER_S + 1, True, True),
        (f".k.otherhost-12.ab{TEMP_SUFFIX}", 1.0, False, False),
        (f".k.otherhost-12.ab{TEMP_SUFFIX}", STALE_AFTER_S + 1, True, True),
        (f".k.0123456789abcdef{TEMP_SUFFIX}", 1.0, False, False),
        ("k", STALE_AFTER_S + 1, False, False),
    ],
)
def test_a_temp_file_is_stale_when_its_writer_of_this_host_is_gone_or_it_is_old(name, age, running, stale):
    assert is_stale(name, age, this_host(), lambda pid: pid == 12 and running) is stale


def test_the_temp_file_of_a_writer_killed_mid_write_is_swept_when_the_store_is_opened(tmp_path):
    root = tmp_path / "store"
    writer = subprocess.Popen(
        [sys.executable, "-c", KILLED_MID_WRITE, str(root / "runs" / "key")],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert writer.stdout.readline().strip() == "writing"
    finally:
        writer.send_signal(signal.SIGKILL)
        writer.wait()
    assert len(temps(root)) == 1
    alive = temp_path(root / "runs" / "other")  # this process's: a write under way
    alive.write_bytes(b"")
    old = temp_path(root / "runs" / "old")
    old.write_bytes(b"")
    an_hour_ago = time.time() - STALE_AFTER_S - 60
    os.utime(old, (an_hour_ago, an_hour_ago))

    FileStore(root)

    assert temps(root) == [alive]
    assert FileStore(root).list() == []


def test_a_temp_file_a_failed_write_could_not_remove_goes_when_the_store_answers_again(tmp_path):
    root, away = tmp_path / "store", tmp_path / "store.away"
    store = FileStore(root)
    source = tmp_path / "value"
    source.write_bytes(b"x" * 1000)

    def cut(_sent: int) -> None:  # the store goes away mid-write (ELOOP on every path)
        if not away.exists():
            root.rename(away)
            root.symlink_to(root)

    with pytest.raises(StoreError, match="symbolic links"):
        store.put_file("runs/key", source, progress=cut)
    root.unlink()
    away.rename(root)
    assert len(temps(root)) == 1

    assert store.exists("runs/key") is False
    assert temps(root) == []
