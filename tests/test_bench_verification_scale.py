"""Smoke tests of bench/verification_scale.py.

In this process, the bench's own network (`SwarmLocalnet`, the `--quick` plan) sets up with the
honest miners grouped into swarm processes and the cheaters each in a process of its own, without
starting it: the path that broke when `Localnet._add` changed under the bench.

A whole `--quick --warm-start` run (a background job of the session, `support.bench_jobs`: 8 honest
miners in two swarm processes, the 4 cheaters, 2 validators, two windows of 0.5-s blocks) writes
every section of the page and keeps its notes, and what the page says of each validator and window
is what the validators signed in their reports. Its numbers mean nothing; whether a cheater is
challenged is drawn each window, so which cheaters are caught is not asserted."""

from __future__ import annotations

import re
import sys
from pathlib import Path

from support.bench_jobs import KEPT, MARKER
from test_bench_smoke import table_after

from distrai.localnet.network import Localnet
from distrai.localnet.view import processed_windows, signed_reports
from distrai.node.wallets import open_wallet

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "bench"))
from verification_scale import CHEATERS, QUICK, SWARM, swarm_network  # noqa: E402


def test_the_quick_swarm_network_groups_its_honest_miners_into_swarm_processes(tmp_path):
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
    assert net.options.block_time == QUICK.block_time < 1.0


def test_a_quick_run_writes_every_section_from_the_validators_reports(verification_scale_bench):
    run = verification_scale_bench.completed()
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    text = verification_scale_bench.report.read_text()
    assert text.startswith("# Verification at scale\n") and "# old report" not in text
    assert text.endswith(f"{MARKER}\n{KEPT}")
    assert "python bench/verification_scale.py --quick --warm-start --work" in text
    assert "0.5-s blocks" in text
    assert f"{QUICK.honest} honest miners and {len(CHEATERS)} cheaters" in text

    net = Localnet.reopen(verification_scale_bench.report.parent / "net")
    windows = processed_windows(net)
    reports = signed_reports(net, windows)
    assert reports, "the validators signed no report"
    header, *rows = table_after(text, "## Per validator and window (measured)")
    assert header[:3] == ["window", "validator", "miners checked"]
    assert sorted((int(r[0]), r[1], int(r[2])) for r in rows) == sorted(
        (r.window, r.validator[:8], len(r.miners)) for r in reports
    )
    assert any(int(r[2]) > 0 for r in rows), "no validator checked a miner"

    _, *share = table_after(text, "## Share of the miners replayed by anyone (measured)")
    assert [int(r[0]) for r in share] == windows
    _, *cheaters = table_after(text, "## The cheaters (measured)")
    assert sorted(r[0] for r in cheaters) == sorted(CHEATERS)
    honest_miners = {
        open_wallet(f"miner{i}", "default", str(net.wallet_path)).hotkey.ss58_address
        for i in range(QUICK.honest)
    }
    honest = sum(1 for r in reports for hk in r.miners if hk in honest_miners)
    assert re.search(rf"Honest false rejections: \d+ of {honest} honest window-verifications", text)
    assert "## The GPU config at 256 miners and 16 validators (computed)" in text
    assert re.search(r"- Reveals ≤ 8 B/param: [\d.]+ \((met|MISSED)\)", text)
