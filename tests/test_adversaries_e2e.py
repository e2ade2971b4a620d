"""Every adversary of the threat model on one local network: 3 honest miners and one miner per
adversary type, as separate processes through `neurons/miner.py --miner.adversary TYPE`, and two
validators that challenge every segment of every miner (tests/support/adversary-localnet.toml), at
0.7 s per block (28-s windows: each validator checks the 18 miners in about 6 s of its 22-s validate
phase, on 2 cores).

Each adversary's windows are rejected by the check that catches its kind of cheating, with the
reason in both validators' signed reports, after which it is barred; it earns under 1% of an
honest miner's emission; the honest miners are never rejected."""

from __future__ import annotations

from pathlib import Path

import pytest
from test_localnet_e2e import hotkey, wait_for

from distrai.localnet import Localnet, LocalnetOptions
from distrai.localnet_view import signed_reports
from miners.behaviour import ADVERSARIES, EXPECTED_CHECK

WINDOWS = 3
CONFIG = Path(__file__).parent / "support" / "adversary-localnet.toml"


@pytest.fixture
def net(tmp_path):
    net = Localnet(
        LocalnetOptions(
            work=tmp_path / "net",
            miners=3,
            validators=2,
            windows=WINDOWS,
            block_time=0.7,
            adversaries=tuple(ADVERSARIES),
            run_config=CONFIG,
        )
    )
    net.setup()
    yield net
    net.stop()


def reports(net: Localnet) -> list[dict]:
    first = net.started_block // net.config.windows.blocks_per_window
    return signed_reports(net, list(range(first, first + 3 * WINDOWS)))


def test_every_adversary_is_rejected_for_its_cheat_and_earns_nothing(net):
    net.start()
    wait_for(lambda: len(reports(net)) >= 2, 400, "the first reports", net)
    assert net.wait(600), "the network did not finish its windows"
    for neuron in net.neurons:
        assert neuron.process.returncode == 0, neuron.log_path.read_text()[-3000:]

    honest = {hotkey(net, f"miner{i}") for i in range(3)}
    adversaries = {hotkey(net, f"adversary-{name}"): name for name in ADVERSARIES}
    seen_rejected: dict[str, set[str]] = {name: set() for name in ADVERSARIES}
    for report in reports(net):
        for hk, entry in report["miners"].items():
            if hk in honest:
                assert entry["reason"] is None, (report["window"], entry)
                assert entry["score"] > 0, (report["window"], entry)
            elif hk in adversaries:
                assert entry["score"] == 0.0, (adversaries[hk], report["window"], entry)
                failed = [check for check, verdict in entry["verdicts"].items() if verdict != "pass"]
                seen_rejected[adversaries[hk]].update(failed)

    missing = {name: checks for name, checks in seen_rejected.items() if EXPECTED_CHECK[name] not in checks}
    assert not missing, f"adversaries never rejected by their expected check: {missing}"

    mg = net.chain.metagraph()
    honest_least = min(mg.neuron(hk).total_emission for hk in honest)
    assert honest_least > 0
    for hk, name in adversaries.items():
        assert mg.neuron(hk).total_emission < 0.01 * honest_least, (name, mg.neuron(hk).total_emission)
