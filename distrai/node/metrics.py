"""Metrics of a node: one JSON line per record in a local file (the dashboard's source), and the
same numbers to wandb (offline unless an API key is set). Every record carries the process's peak
memory so far: its resident set (`peak_rss_bytes`) and, once the process uses a GPU, the most
device memory torch has held at once (`cuda_peak_bytes`, `torch.cuda.max_memory_allocated`)."""

from __future__ import annotations

import json
import math
import os
import resource
import sys
import threading
import time
from pathlib import Path
from typing import Any, Literal

LOST = "lost"
"""The event of a miner's record of a window it set out to train and lost, with `why`."""


class Metrics:
    def __init__(
        self,
        path: Path,
        *,
        role: str,
        hotkey: str,
        run_id: str,
        wandb_project: str | None = None,
        wandb_entity: str | None = None,
        config: dict[str, Any] | None = None,
    ):
        self.path = path
        self.base = {"role": role, "hotkey": hotkey, "run_id": run_id}
        path.parent.mkdir(parents=True, exist_ok=True)
        torn = _ends_in_a_torn_line(path)
        self._file = path.open("a", encoding="utf-8")
        if torn:
            self._file.write("\n")
            self._file.flush()
        self._lock = threading.Lock()
        self._wandb = None
        if wandb_project:
            try:
                import wandb
            except ImportError as exc:
                raise ValueError(
                    "--wandb.project needs the `wandb` package, an extra: pip install 'distrai[wandb]'"
                ) from exc
            mode: Literal["online", "offline"] = "online" if os.environ.get("WANDB_API_KEY") else "offline"
            self._wandb = wandb.init(
                project=wandb_project,
                entity=wandb_entity,
                name=f"{role}-{hotkey[:8]}",
                mode=mode,
                dir=str(path.parent),
                config=config or {},
                reinit="create_new",
            )

    def log(self, window: int, values: dict[str, Any]) -> None:
        """Append one record; non-finite numbers are written as null (JSON has no NaN). Safe to call
        from several threads (a miner logs its uploads from the uploading thread)."""
        clean = {k: (None if isinstance(v, float) and not math.isfinite(v) else v) for k, v in values.items()}
        record = {"time": time.time(), "window": window, **self.base, **process_peaks(), **clean}
        numbers = {k: v for k, v in clean.items() if isinstance(v, int | float) and not isinstance(v, bool)}
        with self._lock:
            self._file.write(json.dumps(record, sort_keys=True) + "\n")
            self._file.flush()
            if self._wandb is not None:
                self._wandb.log({"window": window, **numbers})

    def close(self) -> None:
        self._file.close()
        if self._wandb is not None:
            self._wandb.finish()


def _ends_in_a_torn_line(path: Path) -> bool:
    """Whether the file's last record lacks its newline: a SIGKILL can end a write part way (the
    kernel stops a write between pages when a fatal signal is pending). The next process ends that
    line before its first record, which would otherwise be glued to it and lost to every reader."""
    try:
        with path.open("rb") as f:
            f.seek(0, os.SEEK_END)
            if f.tell() == 0:
                return False
            f.seek(-1, os.SEEK_END)
            return f.read(1) != b"\n"
    except FileNotFoundError:
        return False


def process_peaks() -> dict[str, int]:
    """This process's peak memory so far: resident set, and GPU memory once CUDA is in use (torch
    is not imported for it: a process that never imported torch used no GPU)."""
    peaks = {"peak_rss_bytes": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024}
    torch = sys.modules.get("torch")
    if torch is not None and torch.cuda.is_initialized():
        peaks["cuda_peak_bytes"] = int(torch.cuda.max_memory_allocated())
    return peaks


def read_metrics(path: Path) -> list[dict[str, Any]]:
    """Every record of a metrics file; a torn last line (a node killed mid-write) is skipped."""
    records = []
    for line in path.read_text(encoding="utf-8").splitlines():
        try:
            records.append(json.loads(line))
        except json.JSONDecodeError:
            continue
    return records


def last_record(path: Path, chunk: int = 1 << 16) -> dict[str, Any] | None:
    """The file's last whole record, read back from its end in `chunk`-byte steps; a torn line is
    passed over; None when the file has no record or does not exist. A validator's file grows by a
    record a window for the life of a run: at 256 uids (a weight, a score and an average each) one
    record is 26.7 kB as `Metrics.log` writes it, so 72 windows a day of 1,200 s add 1.9 MB a day."""
    try:
        f = path.open("rb")
    except FileNotFoundError:
        return None
    with f:
        end, carry = f.seek(0, os.SEEK_END), b""
        while end > 0:
            start = max(0, end - chunk)
            f.seek(start)
            lines = (f.read(end - start) + carry).split(b"\n")
            carry = lines.pop(0) if start > 0 else b""
            for line in reversed(lines):
                try:
                    return json.loads(line)
                except ValueError:
                    continue
            end = start
    return None


def node_records(path: Path) -> list[dict]:
    return read_metrics(path) if path.exists() else []


def utilization(records: list[dict]) -> float | None:
    """Busy seconds over wall seconds across a node's windows, the first one left out (its idle
    time is the wait for the network to start): train seconds for a miner, validate seconds for a
    validator."""
    windows = [r for r in records if r.get("event") in (None, "train") and "utilization" in r][1:]
    busy = sum(r.get("train_seconds", r.get("validate_seconds", 0.0)) for r in windows)
    wall = sum(
        r.get("wall_seconds", r.get("validate_seconds", 0.0) + r.get("idle_seconds", 0.0)) for r in windows
    )
    return busy / wall if wall > 0 else None
