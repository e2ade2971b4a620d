"""Smoke test of bench/verification_scale.py, short of its network's windows (a `--quick` run takes
about 280 s of two 130-s windows, over the suite's budget; docs/testing.md): the bench's own network
(`SwarmLocalnet`, the `--quick` plan) sets up with the honest miners grouped into swarm processes
and the cheaters each in a process of its own, and one swarm process started as the bench starts it
builds each of its miners from `neurons/miner.py`'s flags, announces each on chain, and exits 0 on
SIGINT. This is the path that broke when `Localnet._add` changed under the bench."""

from __future__ import annotations

import sys
import time
from pathlib import Path

import pytest

from distrai.node.wallets import open_wallet

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "bench"))
from verification_scale import CHEATERS, QUICK, SWARM, swarm_network  # noqa: E402

pytestmark = pytest.mark.e2e
ANNOUNCE_PATIENCE_S = 180.0
"""How long the swarm's miners may take to start and announce before the test says they did not."""


def test_the_quick_swarm_network_sets_up_and_a_swarm_process_starts_its_miners(tmp_path):
    net = swarm_network(QUICK, tmp_path / "net")
    net.setup()

    hosts = [n for n in net.neurons if n.name.startswith("swarm-")]
    grouped = [host.args[host.args.index(str(SWARM)) + 1 :] for host in hosts]
    grouped = [args[: next(i for i, a in enumerate(args) if a.startswith("--"))] for args in grouped]
    assert [len(g) for g in grouped] == [QUICK.per_process, QUICK.honest - QUICK.per_process]
    assert sorted(sum(grouped, [])) == sorted(f"miner{i}" for i in range(QUICK.honest))
    alone = {n.name for n in net.neurons if n not in hosts}
    assert alone == {f"validator{i}" for i in range(QUICK.validators)} | {f"adversary-{c}" for c in CHEATERS}
    for host in hosts:
        assert "--wallet.name" not in host.args and "--work.dir" not in host.args
        assert host.args[host.args.index("--work.root") + 1] == str(net.work / "nodes")

    host, names = hosts[-1], grouped[-1]
    hotkeys = [open_wallet(name, "default", str(net.wallet_path)).hotkey.ss58_address for name in names]
    assert net.chain is not None
    assert all(net.chain.commitment(hk) is None for hk in hotkeys)
    host.log_path.parent.mkdir(exist_ok=True)
    host.start(net.env())
    try:
        deadline = time.monotonic() + ANNOUNCE_PATIENCE_S
        while not all(net.chain.commitment(hk) is not None for hk in hotkeys):
            assert host.running(), host.log_path.read_text()[-3000:]
            assert time.monotonic() < deadline, (
                f"not every miner announced: {host.log_path.read_text()[-3000:]}"
            )
            time.sleep(0.2)
    finally:
        host.stop()
    assert host.process is not None and host.process.returncode == 0, host.log_path.read_text()[-3000:]
