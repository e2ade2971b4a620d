"""The whole subnet on one machine: 3 honest miners, 1 idle miner and 2 validators as separate
processes through the real entry points, on the embedded chain and a file store, for 3 windows;
one validator is killed and restarted mid-run. The owner first prepares the run's data from local
files with `distrai data prepare` into a data store of its own, which the run config names: every
node trains, replays and scores from those shards."""

from __future__ import annotations

import contextlib
import io
import re
import time
from pathlib import Path

import pytest
from support.tiny_models import write_corpus_files

from distrai.cli import main as distrai_main
from distrai.localnet import Localnet, LocalnetOptions
from distrai.localnet_view import heldout_losses, processed_windows
from distrai.metrics import read_metrics
from distrai.run import load_run_config, run_id, shipped_config_path
from distrai.train.corpus import offline_documents
from distrai.wallets import open_wallet
from distrai.windows import Phase, phase
from validators.state import load_state

WINDOWS = 3


def hotkey(net: Localnet, name: str) -> str:
    return open_wallet(name, "default", str(net.wallet_path)).hotkey.ss58_address


def wait_for(condition, timeout: float, what: str, net: Localnet) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return
        if not any(n.running() for n in net.neurons):
            break
        time.sleep(0.3)
    logs = {n.name: n.log_path.read_text()[-3000:] for n in net.neurons if n.log_path.exists()}
    pytest.fail(f"timed out waiting for {what}; logs: {logs}")


def validator_windows(net: Localnet, name: str) -> list[int]:
    path = net.neuron(name).work_dir / "metrics.jsonl"
    return [r["window"] for r in read_metrics(path)] if path.exists() else []


def prepared_run_config(tmp_path: Path) -> Path:
    """`distrai data prepare` on local files, then the shipped CPU run config naming what it printed."""
    files = write_corpus_files(tmp_path / "text", offline_documents(1000, seed=5))
    data_store = f"file://{tmp_path / 'data'}"
    argv = ["data", "prepare", "--files", str(files["json"]), "--tokenizer", "byte", "--shard-tokens", "2048"]
    with contextlib.redirect_stdout(io.StringIO()) as out:
        assert distrai_main([*argv, "--heldout-fraction", "0.1", "--store.url", data_store]) == 0
    shipped = shipped_config_path("cpu-localnet").read_text()
    builtin = re.search(r'^manifest = "[0-9a-f]{64}"', shipped, re.MULTILINE).group(0)
    ours = f'manifest = "{out.getvalue().split()[-1]}"\nstore = "{data_store}"'
    path = tmp_path / "run.toml"
    path.write_text(shipped.replace(builtin, ours))
    return path


@pytest.fixture
def net(tmp_path):
    net = Localnet(
        LocalnetOptions(
            work=tmp_path / "net",
            miners=4,
            validators=2,
            windows=WINDOWS,
            block_time=0.7,
            idle_miners=1,
            run_config=prepared_run_config(tmp_path),
        )
    )
    net.setup()
    yield net
    net.stop()


@pytest.mark.localnet
def test_localnet_trains_pays_honest_miners_and_survives_a_validator_restart(net):
    net.start()
    cfg = net.config.windows
    wait_for(lambda: len(validator_windows(net, "validator1")) >= 1, 240, "validator1's first window", net)
    wait_for(lambda: phase(cfg, net.chain.block()) is Phase.TRAIN, 60, "a train phase", net)
    state_path = net.neuron("validator1").work_dir / "validator_state.json"
    before = load_state(state_path, run_id(net.config))
    net.neuron("validator1").kill()
    net.restart("validator1")
    assert net.wait(600), "the network did not finish its windows"

    for neuron in net.neurons:
        assert neuron.process.returncode == 0, neuron.log_path.read_text()[-3000:]
    for neuron in net.neurons:
        assert "not following" not in neuron.log_path.read_text(), f"{neuron.name} refused an aggregate"
    restarted_log = net.neuron("validator1").log_path.read_text()
    assert f"at window {before.window}" in restarted_log

    mg = net.chain.metagraph()
    honest = [hotkey(net, f"miner{i}") for i in range(3)]
    idle = hotkey(net, "miner3")
    earned = {hk: mg.neuron(hk).total_emission for hk in [*honest, idle]}
    assert all(earned[hk] > 0 for hk in honest), earned
    assert earned[idle] <= 0.05 * min(earned[hk] for hk in honest), earned

    weights = net.chain.weights()
    validator_uids = [mg.uid_of(hotkey(net, f"validator{i}")) for i in range(2)]
    for uid in validator_uids:
        assert uid in weights, f"validator uid {uid} set no weights: {weights}"
        assert weights[uid].get(mg.uid_of(idle), 0.0) < 0.01

    final = load_state(state_path, run_id(net.config))
    assert final.window > before.window
    records = read_metrics(net.neuron("validator1").work_dir / "metrics.jsonl")
    windows = sorted({r["window"] for r in records})
    assert before.window in windows and final.window in windows
    averages = [0.0] * mg.n
    alpha = net.config.scoring.ema_alpha
    for w in windows:
        record = next(r for r in records if r["window"] == w)
        scores = [record.get(f"score/{uid}", 0.0) for uid in range(mg.n)]
        averages = [alpha * s + (1 - alpha) * a for a, s in zip(averages, scores, strict=True)]
    assert final.averages == pytest.approx(averages, abs=1e-12)

    agreement = [
        r["leader_agreed_last_window"] for r in records if r.get("leader_agreed_last_window") is not None
    ]
    assert agreement and all(a == 1.0 for a in agreement), agreement

    done = processed_windows(net)
    first, last = heldout_losses(net, done[0], done[-1])
    assert last < first - 0.5, (first, last)
    manifest = load_run_config(net.options.run_config).data.manifest
    assert not (net.work / "store" / "blobs" / manifest).exists(), "the network's own store holds no data"
    for neuron in net.neurons:
        if neuron.name != "miner3":  # the idle miner trains nothing
            assert list((neuron.work_dir / "data").glob("*.bin")), f"{neuron.name} read no shard"
