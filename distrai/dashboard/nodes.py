"""What only the operator's own machine knows: its nodes' metrics files and its wallets' names.

Neither is public: a miner points the dashboard at its own work directory to see its utilization,
and at its wallets to see its hotkeys by name. Only public key files are read (`*pub.txt`).
"""

from __future__ import annotations

from pathlib import Path

from distrai.node.metrics import read_metrics, utilization
from distrai.node.metrics_records import LostRecord, MetricsLine, TrainRecord
from distrai.node.wallets import public_hotkeys

METRICS_FILE = "metrics.jsonl"


def metrics_files(paths: list[Path]) -> list[Path]:
    """Each path that is a metrics file, and the metrics files in (or one folder below) each folder."""
    found = []
    for path in paths:
        if path.is_file():
            found.append(path)
        elif path.is_dir():
            found += [
                p for p in [path / METRICS_FILE, *sorted(path.glob(f"*/{METRICS_FILE}"))] if p.is_file()
            ]
    return found


class NodeMetrics:
    """Utilization per hotkey, and what each miner's own records say of its windows, from the nodes'
    metrics files, read again only when a file changes."""

    def __init__(self, paths: list[Path]):
        self.paths = paths
        self._read: dict[Path, tuple[tuple[int, int], dict[str, list[MetricsLine]]]] = {}

    def records(self) -> dict[str, list[MetricsLine]]:
        """Every record of the metrics files, by hotkey."""
        by_hotkey: dict[str, list[MetricsLine]] = {}
        for path in metrics_files(self.paths):
            try:
                stat = path.stat()
                stamp = (stat.st_mtime_ns, stat.st_size)
                if path not in self._read or self._read[path][0] != stamp:
                    self._read[path] = (stamp, _by_hotkey(read_metrics(path)))
            except (OSError, UnicodeDecodeError):
                continue
            for hotkey, records in self._read[path][1].items():
                by_hotkey.setdefault(hotkey, []).extend(records)
        return by_hotkey

    def utilization(self) -> dict[str, float | None]:
        return {hotkey: utilization(records) for hotkey, records in self.records().items()}

    def miner_windows(self) -> dict[str, dict[int, str]]:
        """Hotkey → window → what the miner's own records say of it (`own_windows`)."""
        return {hotkey: own_windows(records) for hotkey, records in self.records().items()}


def own_windows(lines: list[MetricsLine]) -> dict[int, str]:
    """Window → what a miner's own metrics records say of it: trained and committed (its
    `TrainRecord`, written once the commitment landed), or lost and why (`LostRecord`, the later word
    when both are there: a reveal lost to a restart follows its window's train record)."""
    said: dict[int, str] = {}
    for line in lines:
        if isinstance(line.record, TrainRecord):
            said[line.window] = f"trained {line.record.steps_trained} steps and committed"
        elif isinstance(line.record, LostRecord):
            said[line.window] = f"lost: {line.record.why or 'no reason recorded'}"
    return said


def _by_hotkey(lines: list[MetricsLine]) -> dict[str, list[MetricsLine]]:
    out: dict[str, list[MetricsLine]] = {}
    for line in lines:
        out.setdefault(line.hotkey, []).append(line)
    return out


def wallet_labels(path: Path | None) -> dict[str, str]:
    """Hotkey → "wallet" (or "wallet/hotkey" for a hotkey not named default), from the public key
    files of the wallets under `path` (`distrai.node.wallets.public_hotkeys`)."""
    if path is None:
        return {}
    return {
        key.address: key.wallet if key.hotkey == "default" else f"{key.wallet}/{key.hotkey}"
        for key in public_hotkeys(path)
    }
