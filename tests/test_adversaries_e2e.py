"""Every adversary of the threat model on one local network (`support.adversary_net`): 3 honest
miners and one miner per adversary type, as separate processes through
`neurons/miner.py --miner.adversary TYPE`, and two validators that challenge every segment of every
miner (tests/support/adversary-localnet.toml).

Each adversary's windows are rejected by the check that catches its kind of cheating, with the
reason in both validators' signed reports, after which it is barred; it earns under 1% of an
honest miner's emission; the honest miners are never rejected, and each is scored (a window whose
shared measurement of its update came too late leaves it unscored, by the scoring's rule)."""

from __future__ import annotations

from support.adversary_net import WINDOWS
from test_localnet_e2e import hotkey

from distrai.localnet.network import Localnet
from distrai.localnet.view import signed_reports
from distrai.wire.verdicts import Number
from distrai.wire.window_documents import WindowReport
from miners.adversaries import ADVERSARIES, EXPECTED_CHECK


def reports(net: Localnet) -> list[WindowReport]:
    first = net.started_block // net.config.windows.blocks_per_window
    return signed_reports(net, list(range(first, first + 3 * WINDOWS)))


def test_every_adversary_is_rejected_for_its_cheat_and_earns_nothing(adversary_net):
    net = adversary_net.net
    assert net.options.adversaries == tuple(ADVERSARIES) and net.options.miners == 3
    assert adversary_net.finished, "the network did not finish its windows"
    for neuron in net.neurons:
        assert neuron.process.returncode == 0, neuron.log_path.read_text()[-3000:]

    honest = {hotkey(net, f"miner{i}") for i in range(3)}
    adversaries = {hotkey(net, f"adversary-{name}"): name for name in ADVERSARIES}
    seen_rejected: dict[str, set[str]] = {name: set() for name in ADVERSARIES}
    scored: dict[str, int] = dict.fromkeys(honest, 0)
    signed = reports(net)
    assert len(signed) >= 2, signed
    for report in signed:
        for hk, entry in report.miners.items():
            if hk in honest:
                assert entry.reason is None, (report.window, entry)
                # scored, or (by the shared scoring's rule) left unscored when nobody measured its
                # update in time: no mark measured, the average left as it was
                assert entry.score > 0 or Number.MARK not in entry.numbers, (report.window, entry)
                scored[hk] += entry.score > 0
            elif hk in adversaries:
                assert entry.score == 0.0, (adversaries[hk], report.window, entry)
                failed = [check for check, verdict in entry.verdicts.items() if verdict != "pass"]
                seen_rejected[adversaries[hk]].update(failed)

    assert all(scored.values()), f"an honest miner scored in no report: {scored}"
    missing = {name: checks for name, checks in seen_rejected.items() if EXPECTED_CHECK[name] not in checks}
    assert not missing, f"adversaries never rejected by their expected check: {missing}"

    mg = net.chain.metagraph()
    honest_least = min(mg.neuron(hk).total_emission for hk in honest)
    assert honest_least > 0
    for hk, name in adversaries.items():
        assert mg.neuron(hk).total_emission < 0.01 * honest_least, (name, mg.neuron(hk).total_emission)
