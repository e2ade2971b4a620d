"""A leader that tries to steer the global model is refused by every follower, on a local network:
3 honest miners, a miner that publishes poisoned updates, and 4 validators as separate processes. The
validator with the most stake colludes with the poisoning miner: its signed report passes that miner's
update and fails the honest ones, and its aggregate is exactly what its report implies, so only the
report quorum (the other validators' signed reports, weighed by stake) or the held-out re-measurement
can refuse it. The next poisons its aggregates (an update no miner committed, labelled with a miner's
hotkey) and the next re-weights them against its own report. Every node falls back to the honest
fourth, the honest validator's signed reports name the three leaders and why, and the model still
learns.

The network is the session's `support.leader_net`, whose first miner runs as two data-parallel
processes (the parallel-miner test reads it too)."""

from __future__ import annotations

from support.leader_net import LEADERS, MINER_ADVERSARIES
from test_localnet_e2e import hotkey

from distrai.localnet.view import heldout_losses, processed_windows, signed_reports

OVERRULED = (
    "which the signed reports of validators holding",
    "raises the loss on the window's held-out sample",
)
"""How a follower's refusal of the colluding leader reads: the report quorum, or the re-measurement."""


def test_steering_leaders_are_refused_named_and_the_honest_validator_followed(leader_net):
    net = leader_net.net
    assert net.options.leader_adversaries == LEADERS == ("collude", "poison", "reweight")
    assert net.options.adversaries == MINER_ADVERSARIES == ("poison",)
    assert (net.options.miners, net.options.validators) == (3, 4)
    assert leader_net.finished, "the network did not finish its windows"
    for neuron in net.neurons:
        assert neuron.process.returncode == 0, neuron.log_path.read_text()[-3000:]

    colluder, poisoner, reweighter, honest = (hotkey(net, f"validator{i}") for i in range(4))
    assert net.neuron("validator0").args[-2:] == ["--validator.colluder", hotkey(net, "adversary-poison")]
    windows = processed_windows(net)
    reports = [r for r in signed_reports(net, windows + [windows[-1] + 1]) if r.validator == honest]
    refused = [r for report in reports for r in report.refused]
    assert any(r.validator == colluder and any(w in r.reason for w in OVERRULED) for r in refused), refused
    assert any(
        r.validator == poisoner and "that the miner's signed manifest does not name" in r.reason
        for r in refused
    ), refused
    assert any(
        r.validator == reweighter and "but its signed report's scores give" in r.reason for r in refused
    ), refused

    for neuron in net.neurons:
        log = neuron.log_path.read_text()
        assert f"not following {colluder[:10]}" in log, neuron.name
        assert f"not following {poisoner[:10]}" in log, neuron.name
        assert f"applied {honest[:10]}'s aggregate" in log, neuron.name

    miners = {hotkey(net, f"miner{i}") for i in range(3)}
    for report in reports:
        for hk in miners & report.miners.keys():
            assert report.miners[hk].reason is None, (report.window, report.miners[hk])
    first, last = heldout_losses(net, windows[0], windows[-1])
    assert last < first - 0.3, (first, last)
