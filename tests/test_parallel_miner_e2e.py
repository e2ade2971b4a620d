"""One miner on two data-parallel processes (`torchrun`, gloo on CPU) beside one-process miners, on a
local network whose validators replay every miner in every window (tests/support/parallel-localnet.toml:
SDPA attention and fused AdamW, bit-exact replay). The network is the session's `support.leader_net`
(the malicious-leader test reads it too): its followers apply the honest validator's aggregates.

The two-rank miner publishes one manifest per window under its one hotkey, recording its split
(two ranks); the validators replay its segments in one process with that split, bit for bit, and
accept its updates."""

from __future__ import annotations

from support.leader_net import WINDOWS
from test_localnet_e2e import hotkey

from distrai.layout import manifest_key
from distrai.localnet_view import signed_reports
from distrai.run import run_id
from distrai.store import open_store
from distrai.wire.signed import open_document


def test_a_two_rank_miner_is_replayed_bit_for_bit_by_a_one_process_validator(leader_net):
    net = leader_net.net
    assert net.neuron("miner0").args[:4] == [
        "-m",
        "torch.distributed.run",
        "--standalone",
        "--nproc-per-node=2",
    ]
    assert all(n.args[0] != "-m" for n in net.neurons if n.name != "miner0")
    assert leader_net.finished, "the network did not finish its windows"
    for neuron in net.neurons:
        assert neuron.process.returncode == 0, neuron.log_path.read_text()[-3000:]
    log = net.neuron("miner0").log_path.read_text()
    assert "rank 1 of 2: following rank 0's steps" in log and "rank 0 stopped after" in log, log[-3000:]

    first = net.started_block // net.config.windows.blocks_per_window
    windows = list(range(first, first + 3 * WINDOWS))
    reports = signed_reports(net, windows)
    parallel, single = hotkey(net, "miner0"), hotkey(net, "miner1")
    store = open_store(net.store_url)
    limit = net.config.limits.max_manifest_bytes
    manifests = [
        open_document(
            store.get(key, limit), max_bytes=limit, is_registered=lambda hk: True, signer=parallel
        ).body
        for w in windows
        if store.exists(key := manifest_key(run_id(net.config), w, parallel))
    ]
    assert manifests and all(m["ranks"] == 2 and m["replay_class"]["ranks"] == 2 for m in manifests)
    assert all(
        m["replay_class"]["adamw"] == "fused" and m["replay_class"]["attention"] == "sdpa" for m in manifests
    )
    replayed = {
        hk: [
            r["window"]
            for r in reports
            if r["miners"].get(hk, {}).get("verdicts", {}).get("replay") == "pass"
        ]
        for hk in (parallel, single)
    }
    assert replayed[parallel] and replayed[single], (replayed, reports)
    for r in reports:
        for hk in (parallel, single):
            if hk in r["miners"]:
                assert r["miners"][hk]["reason"] is None, (r["window"], r["miners"][hk])
