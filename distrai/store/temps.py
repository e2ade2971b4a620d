"""The temp files of atomic writes (`file.write_atomically`): their names, and sweeping the stale ones.

A temp file is named after its key and its writer: `.<name>.<host>-<pid>.<random>~tmp`. A writer
removes its own temp file when a write fails, but one killed mid-write cannot, and one whose store
went away mid-write may find the file out of reach too. `sweep` removes the temp files that no
writer will finish: those of a process of this host that is no longer running, and any not
modified for `STALE_AFTER_S` (a live writer modifies its temp file with every chunk it writes, and
a writer on another host of a shared disk cannot be asked whether it runs). `is_stale` decides, as
a pure function of the name, the age and which processes run.
"""

from __future__ import annotations

import contextlib
import os
import re
import secrets
import socket
import time
from collections.abc import Callable
from pathlib import Path

TEMP_SUFFIX = "~tmp"
STALE_AFTER_S = 3600.0
"""A temp file not modified for this long is left over, whoever wrote it."""

_WRITER = re.compile(r"\.([A-Za-z0-9-]+)-(\d+)\.[0-9a-f]+" + re.escape(TEMP_SUFFIX) + "$")


def this_host() -> str:
    """The host name as it goes into temp names: letters, digits and dashes only."""
    return re.sub(r"[^A-Za-z0-9-]", "-", socket.gethostname()) or "host"


def temp_path(path: Path) -> Path:
    """A fresh temp file name beside `path`, naming this process as its writer."""
    return path.parent / f".{path.name[:100]}.{this_host()}-{os.getpid()}.{secrets.token_hex(8)}{TEMP_SUFFIX}"


def is_running(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def is_stale(name: str, age_s: float, host: str, running: Callable[[int], bool]) -> bool:
    """Whether the file `name`, last modified `age_s` ago, is a temp file no writer will finish:
    written by a process of `host` that is not `running`, or older than `STALE_AFTER_S`."""
    if not name.endswith(TEMP_SUFFIX):
        return False
    if age_s > STALE_AFTER_S:
        return True
    writer = _WRITER.search(name)
    return writer is not None and writer[1] == host and not running(int(writer[2]))


def sweep(root: Path) -> list[Path]:
    """Remove the stale temp files under `root` (`is_stale`); returns those removed. A folder that
    cannot be read, or a file that went meanwhile, is passed over."""
    host, now, removed = this_host(), time.time(), []
    for folder, _, files in os.walk(root):
        for name in files:
            if not name.endswith(TEMP_SUFFIX):
                continue
            path = Path(folder) / name
            with contextlib.suppress(OSError):
                if is_stale(name, now - path.stat().st_mtime, host, is_running):
                    path.unlink()
                    removed.append(path)
    return removed
