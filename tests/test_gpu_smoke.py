"""The GPU smoke window (`distrai/configs/gpu-smoke.toml`): its command on a CPU with the tiny preset
(the background network of `support.smoke_net`) prepares its data from local files, trains, reveals
and replays bit for bit, and reports every number docs/gpu.md records; and the parts it is made of:
the local data's BPE, the run config it writes, the report's verdicts, the CPU config's sameness."""

from __future__ import annotations

import subprocess
import sys
import tomllib
from pathlib import Path

import pytest
from support.smoke_net import CONFIG, data_files

from distrai.data.stream import is_heldout_document
from distrai.localnet.local_data import (
    EOS,
    HELDOUT_FRACTION,
    needs_local_data,
    read_documents,
    train_bpe,
    with_manifest,
)
from distrai.localnet.network import RUN_CONFIG, Localnet, LocalnetOptions
from distrai.localnet.report import REPORT, replay_verdict
from distrai.protocol.run import load_run_config, shipped_config_path
from distrai.wire.window_documents import MinerEntry

pytestmark = pytest.mark.e2e  # runs the GPU smoke network's nodes as processes

ROOT = Path(__file__).resolve().parent.parent
GPU_SMOKE = ROOT / "distrai" / "configs" / "gpu-smoke.toml"


def tables(text: str) -> dict[str, list[list[str]]]:
    """Every markdown table of `text` by its header's first three cells, rows without the header."""
    found = {}
    for block in text.split("\n\n"):
        lines = [line for line in block.strip().splitlines() if line.startswith("|")]
        if len(lines) < 2:
            continue
        cells = [[cell.strip() for cell in line.strip("|").split("|")] for line in lines]
        found[" | ".join(cells[0][:3])] = cells[2:]
    return found


def number(cell: str) -> float:
    return float(cell.replace(",", ""))


def test_the_smoke_command_on_a_cpu_trains_replays_bit_for_bit_and_reports_it(smoke_net):
    net = smoke_net.net
    assert smoke_net.finished, net.output[-3000:]
    assert net.command.process.returncode == 0, net.output[-3000:]
    ran = load_run_config(net.work / RUN_CONFIG)
    assert ran.data.manifest is not None and ran.model.preset == "tiny" and ran.data.vocab_size == 1024
    report = (net.work / REPORT).read_text()
    assert report.startswith("## Smoke window: 2 miners and 1 validator(s) on cpu"), report[:300]
    found = tables(report)

    miners = found["window | miner | steps"]
    assert sorted((row[1], row[0]) for row in miners) == [
        (m, str(w)) for m in ("miner0", "miner1") for w in sorted({int(r[0]) for r in miners})
    ]
    assert len(miners) == 6, miners
    for _, _, steps, train_s, tokens_s, _, update, reveal_s, revealed in miners:
        assert steps == "20" and number(train_s) > 0 and number(tokens_s) > 0, miners
        assert number(update) > 0 and number(reveal_s) >= 0 and number(revealed) > 0, miners

    replays = found["window | validator | miner"]
    assert len(replays) >= 2, report
    for _, validator, miner, steps, seconds, ratio, exact in replays:
        assert validator == "validator0" and miner in ("miner0", "miner1")
        assert steps == "10" and number(seconds) > 0 and number(ratio) > 0
        assert exact == "yes", replays
    miner_logs = "".join((net.work / "logs" / f"miner{i}.log").read_text() for i in range(2))
    assert "cannot be revealed" not in miner_logs, "a challenged state the miner dropped was not rebuilt"

    validated = found["window | validator | validate s"]
    assert {row[1] for row in validated} == {"validator0"} and all(number(row[2]) > 0 for row in validated)
    memory = {row[0]: row[1:] for row in found["process | peak GPU memory | peak resident memory"]}
    assert sorted(memory) == ["miner0", "miner1", "validator0"]
    for gpu, resident in memory.values():
        assert gpu == "no GPU used" and number(resident.removesuffix(" GiB")) > 0, memory

    heldout = report.split("Held-out loss of the global model", 1)[1]
    losses = [float(x) for x in heldout.split(": ", 1)[1].split(" (", 1)[0].split(" → ")]
    assert len(losses) == 4 and losses[-1] < losses[0], heldout

    again = subprocess.run(
        [sys.executable, "-m", "distrai.cli", "localnet", "--report", str(net.work)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert again.returncode == 0 and again.stdout == report, again.stderr[-2000:]


def test_the_cpu_config_is_the_gpu_smoke_config_but_for_the_model_size_vocabulary_and_sequences():
    gpu = tomllib.loads(GPU_SMOKE.read_text())
    cpu = tomllib.loads(CONFIG.read_text())
    for document in (gpu, cpu):
        document.pop("name")
        document["model"].pop("preset")
        document["data"].pop("vocab_size")
        document["data"].pop("seq_len")
    assert gpu == cpu
    smoke = load_run_config(GPU_SMOKE)
    assert (smoke.model.preset, smoke.data.vocab_size, smoke.model.dtype, smoke.model.attention) == (
        "150m",
        50257,
        "float32",
        "sdpa",
    )
    assert (smoke.train.autocast, smoke.train.adamw) == ("bfloat16", "fused")
    assert needs_local_data(smoke) and needs_local_data(load_run_config(shipped_config_path("gpu-subnet")))
    assert not needs_local_data(load_run_config(shipped_config_path("cpu-localnet")))


def test_the_local_bpe_has_exactly_the_size_asked_for_and_is_the_same_each_time():
    texts = read_documents(data_files()[:6])
    small = train_bpe(texts, 600)
    assert len(small) == 600 and small.eos_token == EOS
    assert small.backend_tokenizer.to_str() == train_bpe(texts, 600).backend_tokenizer.to_str()
    assert small.decode(small.encode(texts[0][:500])) == texts[0][:500]
    few = ["a b a b a b"]
    padded = train_bpe(few, 400)
    assert len(padded) == 400, "the merges the text supports, then reserved tokens up to the size"
    assert "<|reserved_0|>" in padded.get_vocab()
    with pytest.raises(ValueError, match="at least 257 tokens"):
        train_bpe(texts, 200)


def test_documents_are_whole_utf8_files_and_bad_ones_are_named(tmp_path):
    good, blank, binary = tmp_path / "a.py", tmp_path / "b.txt", tmp_path / "c.txt"
    good.write_text("  print(1)\n\n")
    blank.write_text(" \n")
    binary.write_bytes(b"ok \xff\xfe")
    assert read_documents([good]) == ["print(1)"]
    with pytest.raises(ValueError, match="b.txt holds no text"):
        read_documents([good, blank])
    with pytest.raises(ValueError, match="c.txt is not UTF-8"):
        read_documents([binary])
    with pytest.raises(ValueError, match="cannot read .*missing"):
        read_documents([tmp_path / "missing.txt"])
    assert any(is_heldout_document(i, HELDOUT_FRACTION) for i in range(10))


def test_the_run_config_gets_the_manifest_in_its_data_table():
    text = GPU_SMOKE.read_text()
    filled = with_manifest(text, "ab" * 32)
    document = tomllib.loads(filled)
    assert document["data"]["manifest"] == "ab" * 32
    assert tomllib.loads(text) | {"data": {**tomllib.loads(text)["data"], "manifest": "ab" * 32}} == document
    with pytest.raises(ValueError, match="already names"):
        with_manifest(filled, "cd" * 32)


def test_a_template_needs_local_files_and_a_named_dataset_refuses_them(tmp_path):
    with pytest.raises(ValueError, match="--data.files"):
        Localnet(LocalnetOptions(work=tmp_path / "a", run_config=CONFIG)).setup()
    named = LocalnetOptions(work=tmp_path / "b", data_files=tuple(data_files()[:2]))
    with pytest.raises(ValueError, match="names its data already"):
        Localnet(named).setup()


def test_a_replay_is_called_bit_exact_only_when_it_passed_within_the_same_class():
    def entry(verdicts, numbers, reason=None):
        return MinerEntry(uid=1, verdicts=verdicts, numbers=numbers, score=0.0, reason=reason)

    assert replay_verdict(entry({"replay": "pass"}, {"replay_tolerance": 0.0})) == "yes"
    across = replay_verdict(entry({"replay": "pass"}, {"replay_tolerance": 0.02, "replay_distance": 0.004}))
    assert across == "no: 4.00e-03 within 0.02"
    assert replay_verdict(entry({"replay": "segment 1 replayed to another state"}, {})).startswith("failed:")
    assert replay_verdict(entry({}, {}, reason="no update")) == "no update"
