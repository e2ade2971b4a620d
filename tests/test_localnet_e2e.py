"""The whole subnet on one machine: 3 honest miners, 1 idle miner and 2 validators as separate
processes through the real entry points, on the embedded chain and a file store, for 4 windows;
one validator is killed and restarted mid-run. The owner first prepares the run's data from local
files with `distrai data prepare` into a data store of its own, which the run config names: every
node trains, replays and scores from those shards. The network runs while other tests do
(`support.restart_net`)."""

from __future__ import annotations

import pytest
from support.restart_net import BEFORE, DRIVER_LOG, RESTARTED

from distrai.localnet.network import Localnet
from distrai.localnet.view import heldout_losses, processed_windows
from distrai.node.metrics import read_metrics
from distrai.node.metrics_records import ValidatorWindowRecord
from distrai.node.wallets import open_wallet
from distrai.protocol.run import load_run_config, run_id
from validators.pay import add_window, mature
from validators.validator_state import load_state


def hotkey(net: Localnet, name: str) -> str:
    return open_wallet(name, "default", str(net.wallet_path)).hotkey.ss58_address


def logs(net: Localnet) -> dict[str, str]:
    return {n.name: n.log_path.read_text()[-3000:] for n in net.neurons if n.log_path.exists()}


def late_or_unmoved(net: Localnet) -> list[str]:
    """The validators' log lines that say a window's check ended after its aggregate deadline or
    that the global model stayed: why a run's held-out loss would not fall."""
    said = ("after the aggregate deadline", "the global model stays")
    return [
        f"{n.name}: {line.strip()}"
        for n in net.neurons
        if n.role == "validator" and n.log_path.exists()
        for line in n.log_path.read_text().splitlines()
        if any(s in line for s in said)
    ]


def test_localnet_trains_pays_honest_miners_and_survives_a_validator_restart(restart_net):
    net = restart_net.net
    driver = (net.work / DRIVER_LOG).read_text() if (net.work / DRIVER_LOG).exists() else "no driver log"
    assert "killed and restarted" in driver, (driver, logs(net))
    assert restart_net.finished, f"the network did not finish its windows; logs: {logs(net)}"
    before = load_state(net.work / BEFORE, run_id(net.config))
    state_path = net.neuron(RESTARTED).work_dir / "validator_state.json"

    for neuron in net.neurons:
        assert neuron.process.returncode == 0, neuron.log_path.read_text()[-3000:]
    for neuron in net.neurons:
        assert "not following" not in neuron.log_path.read_text(), f"{neuron.name} refused an aggregate"
    restarted_log = net.neuron(RESTARTED).log_path.read_text()
    assert f"its last window checked {before.window}" in restarted_log

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
    records = [
        (r.window, r.record)
        for r in read_metrics(net.neuron(RESTARTED).work_dir / "metrics.jsonl")
        if isinstance(r.record, ValidatorWindowRecord)
    ]
    windows = sorted({w for w, _ in records})
    assert before.window in windows and final.window in windows
    # the averages are the metrics' scores, each window's entering `maturity_windows` windows late
    averages, pending = {str(uid): 0.0 for uid in range(mg.n)}, {}
    scoring = net.config.scoring
    for w in windows:
        record = next(r for window, r in records if window == w)
        scores = {
            str(uid): None if uid in record.unmeasured else record.scores.get(uid, 0.0) for uid in range(mg.n)
        }
        pending = add_window(pending, w, scores)
        averages, pending = mature(averages, pending, w - scoring.maturity_windows, scoring.ema_alpha)
    assert final.averages == pytest.approx([averages[str(uid)] for uid in range(mg.n)], abs=1e-12)

    agreement = [r.leader_agreed_last_window for _, r in records if r.leader_agreed_last_window is not None]
    assert agreement and all(a == 1.0 for a in agreement), agreement
    # its own aggregate of the window it was killed in is kept with its state, so the window after
    # compares it with the followed one although the process that published it is gone
    if before.own_aggregate is not None:
        after = [r for w, r in records if w == before.own_aggregate.window + 1]
        assert all(r.leader_agreed_last_window is not None for r in after), after

    done = processed_windows(net)
    first, last = heldout_losses(net, done[0], done[-1])
    assert last < first - 0.5, (first, last, late_or_unmoved(net))
    manifest = load_run_config(net.options.run_config).data.manifest
    assert not (net.work / "store" / "blobs" / manifest).exists(), "the network's own store holds no data"
    for neuron in net.neurons:
        if neuron.name != "miner3":  # the idle miner trains nothing
            assert list((neuron.work_dir / "data").glob("*.bin")), f"{neuron.name} read no shard"
