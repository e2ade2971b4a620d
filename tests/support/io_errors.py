"""A file store whose objects answer every read with an I/O error (EIO), as a network disk in an
outage does: the store still lists, but each read fails with a transient error that the store
retries (`distrai.store.file.is_transient_os_error`).

Every object file under the root is moved aside and replaced by a symlink to `/proc/self/mem`, a
regular file whose first page is never mapped, so reading it fails with EIO (Linux only).
"""

from __future__ import annotations

import os
from pathlib import Path

UNREADABLE = Path("/proc/self/mem")


def serve_io_errors(root: Path) -> Path:
    """Make every object under `root` fail its reads with EIO; returns where the objects went."""
    away = root.with_name(root.name + ".eio")
    for folder, _, files in os.walk(root):
        for name in files:
            path = Path(folder) / name
            kept = away / path.relative_to(root)
            kept.parent.mkdir(parents=True, exist_ok=True)
            path.rename(kept)
            path.symlink_to(UNREADABLE)
    return away


def serve_again(root: Path, away: Path) -> None:
    """Put back the objects `serve_io_errors` moved to `away`."""
    for folder, _, files in os.walk(away):
        for name in files:
            kept = Path(folder) / name
            path = root / kept.relative_to(away)
            path.unlink()
            kept.rename(path)
