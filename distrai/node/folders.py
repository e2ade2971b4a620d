"""Work folders: made and checked writable before any work, refused naming the flag that moves them."""

from __future__ import annotations

import tempfile
from pathlib import Path


def unwritable(folder: Path, flag: str, error: OSError) -> ValueError:
    """The refusal of a work folder that cannot be made or written in, naming the flag that moves it."""
    return ValueError(
        f"cannot write in the work folder {folder} ({error.strerror or error}): make it writable, "
        f"or choose another with {flag}"
    )


def writable_folder(folder: Path, flag: str) -> Path:
    """`folder`, made if missing, once a file could be written in it (a folder that only looks writable,
    on a read-only file system, is caught too); otherwise the refusal naming `flag`."""
    try:
        folder.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=folder, prefix=".write-check-"):
            pass
    except OSError as exc:
        raise unwritable(folder, flag, exc) from None
    return folder
