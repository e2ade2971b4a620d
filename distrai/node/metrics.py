"""Metrics of a node: one JSON line per record in a local file (the dashboard's source), and the
same numbers to wandb (offline unless an API key is set). Each kind of record is a model
(`distrai.node.metrics_records`), through which a line is written and read back. Every line carries
the process's peak memory so far: its resident set (`peak_rss_bytes`) and, once the process uses a
GPU, the most device memory torch has held at once (`cuda_peak_bytes`,
`torch.cuda.max_memory_allocated`).

A reader skips a line cut short by a node killed mid-write, as every node's file may hold one, and
skips with a warning naming the file, the line and what is wrong a whole line that is not a record
of any kind (a file written by another version, or by hand)."""

from __future__ import annotations

import logging
import os
import resource
import sys
import threading
import time
from pathlib import Path
from typing import Any, Literal

from distrai.node.metrics_records import (
    MetricsError,
    MetricsLine,
    MetricsRecord,
    TornLine,
    TrainRecord,
    ValidatorWindowRecord,
    parse_line,
)

log = logging.getLogger(__name__)


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
        self.role, self.hotkey, self.run_id = role, hotkey, run_id
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

    def log(self, window: int, record: MetricsRecord) -> None:
        """Append one record of `window`; wandb gets its numbers. Safe to call from several threads (a
        miner logs its uploads from the uploading thread)."""
        rss, cuda = process_peaks()
        line = MetricsLine(
            time=time.time(),
            window=window,
            role=self.role,
            hotkey=self.hotkey,
            run_id=self.run_id,
            peak_rss_bytes=rss,
            cuda_peak_bytes=cuda,
            record=record,
        )
        values = record.model_dump(mode="json")
        numbers = {k: v for k, v in values.items() if isinstance(v, int | float) and not isinstance(v, bool)}
        with self._lock:
            self._file.write(line.to_json() + "\n")
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


def process_peaks() -> tuple[int, int | None]:
    """This process's peak memory so far, in bytes: resident set, and GPU memory once CUDA is in use
    (None before; torch is not imported for it: a process that never imported torch used no GPU)."""
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    torch = sys.modules.get("torch")
    if torch is not None and torch.cuda.is_initialized():
        return rss, int(torch.cuda.max_memory_allocated())
    return rss, None


def _read(path: Path, number: int | str, text: str | bytes) -> MetricsLine | None:
    """Line `number` of `path` as its model, or None, said in a warning unless the line was torn."""
    try:
        return parse_line(text if isinstance(text, str) else text.decode("utf-8"))
    except TornLine:
        return None
    except (MetricsError, UnicodeDecodeError) as exc:
        log.warning("%s, line %s: skipped, not a metrics record: %s", path, number, exc)
        return None


def read_metrics(path: Path) -> list[MetricsLine]:
    """Every record of a metrics file, in order (`_read`: torn lines and other lines skipped)."""
    lines = path.read_text(encoding="utf-8").splitlines()
    return [line for n, text in enumerate(lines, 1) if (line := _read(path, n, text)) is not None]


def last_record(path: Path, chunk: int = 1 << 16) -> MetricsLine | None:
    """The file's last record, read back from its end in `chunk`-byte steps, passing over lines
    that are not records (`_read`, which names such a line by its place from the end); None when the
    file has no record or does not exist. A validator's file grows by a record a window for the life
    of a run: at 256 uids (a weight, a score and an average each) one record is 26.7 kB as
    `Metrics.log` writes it, so 72 windows a day of 1,200 s add 1.9 MB a day."""
    try:
        f = path.open("rb")
    except FileNotFoundError:
        return None
    with f:
        end, carry, back = f.seek(0, os.SEEK_END), b"", 0
        while end > 0:
            start = max(0, end - chunk)
            f.seek(start)
            lines = (f.read(end - start) + carry).split(b"\n")
            carry = lines.pop(0) if start > 0 else b""
            for text in reversed(lines):
                if not text.strip():
                    continue
                back += 1
                if (line := _read(path, f"{back} from the end", text)) is not None:
                    return line
            end = start
    return None


def node_records(path: Path) -> list[MetricsLine]:
    return read_metrics(path) if path.exists() else []


def utilization(lines: list[MetricsLine]) -> float | None:
    """Busy seconds over wall seconds across a node's windows, the first one left out (its idle
    time is the wait for the network to start): train seconds for a miner, validate seconds for a
    validator."""
    windows = [line.record for line in lines if isinstance(line.record, TrainRecord | ValidatorWindowRecord)]
    busy = sum(r.train_seconds if isinstance(r, TrainRecord) else r.validate_seconds for r in windows[1:])
    wall = sum(
        r.wall_seconds if isinstance(r, TrainRecord) else r.validate_seconds + r.idle_seconds
        for r in windows[1:]
    )
    return busy / wall if wall > 0 else None
