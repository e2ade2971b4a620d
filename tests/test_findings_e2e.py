"""Shared verification on one local network: the shipped cpu-localnet config, but every miner replayed
in every window by one validator only (tests/support/shared-localnet.toml, `replicas = 1`). Two honest miners and one that trains on
other miners' data (`--miner.adversary wrongdata`), two validators, as separate processes.

The validator whose share holds the cheater catches it by replay and publishes a signed finding;
the other validator, which did not replay it, re-checks the finding in the next window, adopts it,
names it in its report, and bars the miner too. The cheater never keeps an honest miner's share:
a validator that replayed neither of them pays neither for the work they both published."""

from __future__ import annotations

from support.findings_net import ADVERSARY, WINDOWS
from test_localnet_e2e import hotkey

from distrai.localnet.view import signed_reports
from distrai.protocol.layout import finding_key
from distrai.protocol.run import run_id
from distrai.store import open_store
from distrai.wire.window_documents import MinerEntry


def test_one_validators_catch_is_re_checked_and_adopted_by_the_other(findings_net):
    net = findings_net.net
    assert net.config.verification.replicas == 1 and net.config.verification.challenge_miners == 1.0
    assert findings_net.finished, "the network did not finish its windows"
    for neuron in net.neurons:
        assert neuron.process.returncode == 0, neuron.log_path.read_text()[-3000:]

    first = net.started_block // net.config.windows.blocks_per_window
    reports = signed_reports(net, list(range(first, first + 3 * WINDOWS)))
    cheater = hotkey(net, f"adversary-{ADVERSARY}")
    honest = {hotkey(net, f"miner{i}") for i in range(2)}
    validators = {hotkey(net, f"validator{i}") for i in range(2)}
    caught = [
        (r.validator, r.window)
        for r in reports
        if cheater in r.miners and r.miners[cheater].verdicts.get("replay", "pass") != "pass"
    ]
    assert caught, "nobody caught the cheater by replay"
    store = open_store(net.store_url)
    adopted = []
    for catcher, w in caught:
        assert store.exists(finding_key(run_id(net.config), w, catcher, cheater)), (catcher, w)
        (other,) = validators - {catcher}
        for r in reports:
            if r.validator == other and r.window == w + 1:
                rechecks = [c for c in r.rechecks if c.miner == cheater and c.window == w]
                if rechecks and rechecks[0].outcome == "adopted":
                    adopted.append((other, w))
                    assert rechecks[0].validator == catcher
                    assert r.miners[cheater].verdicts["banned"] != "pass"
    assert adopted, f"no finding adopted; caught {caught}, rechecks {[r.rechecks for r in reports]}"
    for r in reports:
        assert all(c.outcome != "refuted" for c in r.rechecks), r.rechecks
        for hk in honest:
            if hk in r.miners:
                assert fair_to_honest(r.miners[hk], cheater), (r.window, r.validator, r.miners[hk])


def fair_to_honest(entry: MinerEntry, cheater: str) -> bool:
    """An honest miner's entry passed every check, or failed `duplicate` alone because the cheater,
    training on its data, published its update, and the validator replayed neither of them, so that
    it could not tell who trained it (`validators/duplicates.py`): the cheater never keeps the work."""
    if entry.reason is None:
        return True
    failed = {check: why for check, why in entry.verdicts.items() if why != "pass"}
    why = failed.get("duplicate", "")
    return list(failed) == ["duplicate"] and cheater in why and "cannot be told" in why
