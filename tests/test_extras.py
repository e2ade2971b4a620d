"""`datasets` and `wandb` are extras (`hub`, `wandb`): the core path needs neither, and what needs one
says so, naming the extra, when it is missing. A missing package is made by `sys.modules[name] = None`,
which makes its import raise `ImportError` as an uninstalled one does."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from distrai.data.texts import TextSource, read_texts
from distrai.node.metrics import Metrics

ROOT = Path(__file__).resolve().parent.parent


@pytest.mark.parametrize("kind", ["hub", "files"])
def test_reading_what_needs_datasets_without_it_names_the_extra(monkeypatch, tmp_path, kind):
    (tmp_path / "a.jsonl").write_text('{"text": "a document"}\n')
    source, what = {
        "hub": (TextSource("hub", hub_id="someone/corpus"), "the hub dataset someone/corpus"),
        "files": (TextSource("files", paths=(str(tmp_path / "a.jsonl"),)), "json files"),
    }[kind]
    monkeypatch.setitem(sys.modules, "datasets", None)
    with pytest.raises(ValueError, match=rf"reading {what}.*pip install 'distrai\[hub\]'"):
        list(read_texts(source))


def test_wandb_metrics_without_wandb_name_the_extra(monkeypatch, tmp_path):
    monkeypatch.setitem(sys.modules, "wandb", None)
    with pytest.raises(ValueError, match=r"--wandb.project needs .*pip install 'distrai\[wandb\]'"):
        Metrics(tmp_path / "metrics.jsonl", role="miner", hotkey="5hot", run_id="run", wandb_project="p")
    assert not (tmp_path / "metrics.jsonl").exists() or (tmp_path / "metrics.jsonl").read_text() == ""


def test_the_core_path_needs_neither(tmp_path):
    """Whole text files prepared into shards, a node's metrics written, the CLI's help, and the
    entry scripts' modules imported, in a Python where neither package can be imported."""
    (tmp_path / "a.txt").write_text("one whole document\n" * 50)
    script = f"""
import sys
sys.modules["datasets"] = None
sys.modules["wandb"] = None
from pathlib import Path
from distrai.data.texts import TextSource, read_texts
from distrai.node.metrics import Metrics
from distrai.node.metrics_records import LostRecord
import neurons.miner, neurons.validator, miners.main, validators.main, distrai.localnet.network
texts = list(read_texts(TextSource("files", paths=({str(tmp_path / "a.txt")!r},), sample_by="document")))
assert len(texts) == 1, texts
metrics = Metrics(Path({str(tmp_path / "m.jsonl")!r}), role="miner", hotkey="5hot", run_id="run")
metrics.log(0, LostRecord(why="written without wandb"))
metrics.close()
print("ok")
"""
    done = subprocess.run(
        [sys.executable, "-c", script], cwd=ROOT, capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0 and done.stdout.strip() == "ok", done.stderr[-3000:]
