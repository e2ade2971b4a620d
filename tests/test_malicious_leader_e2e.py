"""A leader that tries to steer the global model is refused by every follower, on a local network:
3 honest miners and 3 validators as separate processes, where the validator with the most stake
poisons its aggregates (an update no miner committed, labelled with a miner's hotkey) and the
next re-weights them against its own report. Every node falls back to the honest third, the
honest validator's signed reports name both leaders and why, and the model still learns.

The network is the session's `support.leader_net`, whose first miner runs as two data-parallel
processes (the parallel-miner test reads it too)."""

from __future__ import annotations

from support.leader_net import LEADERS
from test_localnet_e2e import hotkey

from distrai.localnet_view import heldout_losses, processed_windows, signed_reports


def test_steering_leaders_are_refused_named_and_the_honest_validator_followed(leader_net):
    net = leader_net.net
    assert net.options.leader_adversaries == LEADERS == ("poison", "reweight")
    assert (net.options.miners, net.options.validators) == (3, 3)
    assert leader_net.finished, "the network did not finish its windows"
    for neuron in net.neurons:
        assert neuron.process.returncode == 0, neuron.log_path.read_text()[-3000:]

    poisoner, reweighter, honest = (hotkey(net, f"validator{i}") for i in range(3))
    windows = processed_windows(net)
    reports = [r for r in signed_reports(net, windows + [windows[-1] + 1]) if r["validator"] == honest]
    refused = [r for report in reports for r in report["refused"]]
    assert any(
        r["validator"] == poisoner and "that the miner's signed manifest does not name" in r["reason"]
        for r in refused
    ), refused
    assert any(
        r["validator"] == reweighter and "but its signed report's scores give" in r["reason"] for r in refused
    ), refused

    for neuron in net.neurons:
        log = neuron.log_path.read_text()
        assert f"not following {poisoner[:10]}" in log, neuron.name
        assert f"applied {honest[:10]}'s aggregate" in log, neuron.name

    miners = {hotkey(net, f"miner{i}") for i in range(3)}
    for report in reports:
        for hk in miners & report["miners"].keys():
            assert report["miners"][hk]["reason"] is None, (report["window"], report["miners"][hk])
    first, last = heldout_losses(net, windows[0], windows[-1])
    assert last < first - 0.3, (first, last)
