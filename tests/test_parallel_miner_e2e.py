"""Miners on two processes (`torchrun`, gloo on CPU) beside a one-process miner, on a local network
whose validators replay every miner in every window (tests/support/parallel-localnet.toml: SDPA
attention and fused AdamW, bit-exact replay): miner0's two ranks are data parallel (DDP), miner1's shard
the model, its gradients and AdamW's state over them (FSDP2, `--miner.shard`). The network is the
session's `support.leader_net` (the malicious-leader test reads it too): its followers apply the
honest validator's aggregates. The colluding leader's reports fail every honest miner on usefulness
after its checks; its replays are the validator's own, run as the others run theirs, so its replay
verdicts count here and nothing else of its reports does. Each window deals every miner to one
validator of four: in one run the leader alone drew the one-process miner in all four windows.

Each two-rank miner publishes one manifest per window under its one hotkey, recording its split (two
ranks, sharded or not); the validators replay its segments in one process with that split, bit for
bit, and accept its updates."""

from __future__ import annotations

from support.leader_net import WINDOWS
from test_localnet_e2e import hotkey

from distrai.localnet.view import signed_reports
from distrai.protocol.layout import manifest_key
from distrai.protocol.run import run_id
from distrai.store import open_store
from distrai.wire.signed import open_document


def test_two_rank_miners_are_replayed_bit_for_bit_by_a_one_process_validator(leader_net):
    net = leader_net.net
    torchrun = ["-m", "torch.distributed.run", "--standalone", "--nproc-per-node=2"]
    assert net.neuron("miner0").args[:4] == torchrun and net.neuron("miner1").args[:4] == torchrun
    assert "--miner.shard" in net.neuron("miner1").args and "--miner.shard" not in net.neuron("miner0").args
    assert all(n.args[0] != "-m" for n in net.neurons if n.name not in ("miner0", "miner1"))
    assert leader_net.finished, "the network did not finish its windows"
    for neuron in net.neurons:
        assert neuron.process.returncode == 0, neuron.log_path.read_text()[-3000:]
    for name in ("miner0", "miner1"):
        log = net.neuron(name).log_path.read_text()
        assert "rank 1 of 2: following rank 0's steps" in log and "rank 0 stopped after" in log, log[-3000:]

    first = net.started_block // net.config.windows.blocks_per_window
    windows = list(range(first, first + 3 * WINDOWS))
    colluder = hotkey(net, "validator0")
    assert net.neuron("validator0").args[-4:-2] == ["--validator.adversary", "collude"]
    every_report = signed_reports(net, windows)
    reports = [r for r in every_report if r.validator != colluder]
    parallel, sharded, single = (hotkey(net, name) for name in ("miner0", "miner1", "miner2"))
    store = open_store(net.store_url)
    limit = net.config.limits.max_manifest_bytes

    def manifests(hk: str) -> list[dict]:
        return [
            open_document(
                store.get(key, limit), max_bytes=limit, is_registered=lambda _: True, signer=hk
            ).body
            for w in windows
            if store.exists(key := manifest_key(run_id(net.config), w, hk))
        ]

    for hk, is_sharded in ((parallel, False), (sharded, True)):
        published = manifests(hk)
        assert published, hk
        for m in published:
            assert m["ranks"] == 2 and m["replay_class"]["ranks"] == 2
            assert m["sharded"] is is_sharded and m["replay_class"]["sharded"] is is_sharded
            assert m["replay_class"]["adamw"] == "fused" and m["replay_class"]["attention"] == "sdpa"
    replays = {
        hk: [
            (r.window, r.miners[hk].verdicts["replay"])
            for r in every_report
            if hk in r.miners and "replay" in r.miners[hk].verdicts
        ]
        for hk in (parallel, sharded, single)
    }
    assert all(replays.values()), (replays, every_report)
    assert all(verdict == "pass" for got in replays.values() for _, verdict in got), replays
    for r in reports:
        for hk in (parallel, sharded, single):
            if hk in r.miners:
                assert r.miners[hk].reason is None, (r.window, r.miners[hk])
