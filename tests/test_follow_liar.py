"""A leader that lies consistently cannot steer the model. Its signed report passes its colluding
miner's poisoned update (committed and anchored like honest work) and fails the honest ones, and its
aggregate is exactly what that report implies, so every check of the aggregator's own word passes.
The report quorum refuses it while the validators whose reports failed the poison hold at least as
much stake as it does; the held-out re-measurement refuses it when it holds most of the stake. Both
name the leader.

In one process, as tests/test_follow.py: the run's codec, honest updates trained on the run's data,
the poison made by the `poison` miner adversary's own function, reports and aggregates signed by
their hotkeys, and the project's `Syncer`."""

from __future__ import annotations

import pytest
import torch
from test_follow import CONFIG, WINDOW, build_network

from distrai.protocol.globalmodel import SyncUnavailable
from distrai.protocol.run import load_run_config
from distrai.protocol.runtime import build_runtime, model_spec, params_hash
from distrai.protocol.sync import StoreCache, Syncer, peer_view
from distrai.protocol.windows import aggregate_deadline
from distrai.store import FileStore
from distrai.train.evaluate import evaluate
from distrai.train.model import load_model
from miners.adversaries import poisoned

HONEST = {"miner0": 1.0, "miner1": 0.8}
COLLUDING = {"miner2": 1.0}
"""The colluding leader's report: its miner passes, the honest ones fail a check."""


@pytest.fixture(scope="module")
def runtime():
    return build_runtime(load_run_config(CONFIG))


def trained(runtime, seed: int, steps: int = 8) -> dict[str, torch.Tensor]:
    """The pseudo-gradient (start − end) of `steps` AdamW steps from the run's initial model on
    training sequences drawn by `seed`."""
    model = load_model(model_spec(runtime.config.model), tokenizer=runtime.tokenizer)
    start = {n: p.detach().clone() for n, p in model.named_parameters()}
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
    generator = torch.Generator().manual_seed(seed)
    for _ in range(steps):
        batch = runtime.data.batch(torch.randint(runtime.data.n_train, (8,), generator=generator).tolist())
        loss = runtime.loss_fn(model, batch)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    return {n: start[n] - p.detach() for n, p in model.named_parameters()}


@pytest.fixture(scope="module")
def updates(runtime):
    """Two honest miners' updates and the colluding miner's poisoned one."""
    return {
        "miner0": trained(runtime, 0),
        "miner1": trained(runtime, 1),
        "miner2": poisoned(trained(runtime, 2)),
    }


def hotkey(net, name: str) -> str:
    return net.validators[name].hotkey.ss58_address


HELDOUT_LOSSES: dict[tuple[str, str], float] = {}
"""Held-out losses by run and parameters' hash: every test compares with the initial model's, and
most follow the same honest aggregate (an evaluation of the held-out split takes about a CPU-second)."""


def heldout_loss(runtime, params) -> float:
    key = (runtime.run_id, params_hash(params))
    if key not in HELDOUT_LOSSES:
        runtime.load_params(params)
        HELDOUT_LOSSES[key] = evaluate(runtime.model, runtime.data.heldout, loss_fn=runtime.loss_fn)
    return HELDOUT_LOSSES[key]


def leader_against_two_honest(runtime, updates, tmp_path, leader_scores):
    """validator0 (3000 stake) publishes a report with `leader_scores` and what it implies, the two
    others (2000 each) honest ones; a node follows the window. Returns the network, the node's
    syncer, the model it reached and its one refusal."""
    net = build_network(runtime, tmp_path, stakes=(3000.0, 2000.0, 2000.0), updates=updates)
    net.publish_aggregate("validator0", leader_scores)
    net.publish_aggregate("validator1", HONEST)
    net.publish_aggregate("validator2", HONEST)
    syncer, following = net.follow()
    (refusal,) = syncer.take_refusals()
    return net, syncer, following, refusal


def test_a_liar_holding_most_of_the_stake_is_refused_by_the_heldout_remeasurement(runtime, updates, tmp_path):
    net = build_network(runtime, tmp_path, stakes=(3000.0, 2000.0), updates=updates)
    net.publish_aggregate("validator0", COLLUDING)
    net.publish_aggregate("validator1", HONEST)
    syncer, following = net.follow()
    refusals = {r.validator: r.reason for r in syncer.take_refusals()}
    assert hotkey(net, "validator0") in refusals, syncer.followed
    liar = refusals[hotkey(net, "validator0")]
    assert "raises the loss on the window's held-out sample" in liar, liar
    assert "more than the run's tolerance of 1.00%" in liar, liar
    # The liar's report fails the honest updates with more stake than the honest report passes them,
    # but a report whose own aggregate failed its re-measurement no longer counts: the honest
    # aggregate is weighed again without it and followed, and the window is not lost.
    assert hotkey(net, "validator1") not in refusals, refusals
    assert syncer.followed[WINDOW][0] == hotkey(net, "validator1")
    assert heldout_loss(runtime, following.params) < heldout_loss(runtime, net.model.params)


def test_a_liar_below_the_honest_validator_in_stake_order_is_set_aside_when_it_is_reached(
    runtime, updates, tmp_path
):
    """The honest aggregate comes first and is outvoted by the liar's report; the liar's own aggregate,
    tried next, fails its re-measurement, so the honest one is weighed again without its report."""
    net = build_network(runtime, tmp_path, stakes=(3000.0, 2000.0, 2000.0), updates=updates)
    net.publish_aggregate("validator0", HONEST)
    net.publish_aggregate("validator1", COLLUDING)
    net.publish_aggregate("validator2", COLLUDING)
    syncer, following = net.follow()
    refusals = {r.validator: r.reason for r in syncer.take_refusals()}
    assert syncer.followed[WINDOW][0] == hotkey(net, "validator0"), refusals
    assert set(refusals) == {hotkey(net, "validator1")}, refusals
    assert "raises the loss on the window's held-out sample" in refusals[hotkey(net, "validator1")]
    assert heldout_loss(runtime, following.params) < heldout_loss(runtime, net.model.params)


def test_a_liar_holding_less_stake_than_the_reports_failing_its_miner_is_refused_by_the_quorum(
    runtime, updates, tmp_path
):
    net, syncer, following, refusal = leader_against_two_honest(runtime, updates, tmp_path, COLLUDING)
    assert refusal.validator == hotkey(net, "validator0")
    assert "which the signed reports of validators holding 4000 stake failed" in refusal.reason
    assert "against 3000 that passed it" in refusal.reason
    assert syncer.followed[WINDOW][0] == hotkey(net, "validator1")
    assert heldout_loss(runtime, following.params) < heldout_loss(runtime, net.model.params)


def test_a_report_out_of_reach_that_could_decide_the_quorum_is_waited_for(runtime, updates, tmp_path):
    net = build_network(runtime, tmp_path, stakes=(3000.0, 2000.0, 2000.0), updates=updates)
    net.publish_aggregate("validator0", COLLUDING)
    net.publish_aggregate("validator1", HONEST)
    shared, away = net.store, FileStore(tmp_path / "validator2-store")
    net.store = away
    net.publish_aggregate("validator2", HONEST)
    net.store = shared
    root = away.root
    root.rename(root.with_name("validator2-away"))
    root.symlink_to(root)  # validator2's store is down: every read fails (ELOOP), nothing is missing
    net.at(aggregate_deadline(net.cfg, WINDOW))
    syncer = Syncer(net.runtime, net.harness.chain, StoreCache())
    with pytest.raises(SyncUnavailable, match="could decide whether the quorum passes its update"):
        syncer.step(net.model, peer_view(net.harness.chain))

    root.unlink()
    root.with_name("validator2-away").rename(root)
    syncer.step(net.model, peer_view(net.harness.chain))
    (refusal,) = syncer.take_refusals()
    assert refusal.validator == hotkey(net, "validator0") and "4000 stake failed" in refusal.reason
    assert syncer.followed[WINDOW][0] == hotkey(net, "validator1")


@pytest.mark.parametrize("kept", [{}, {"miner0": 1.0}], ids=["nothing", "a subset"])
def test_a_top_stake_censor_is_refused_and_the_honest_aggregate_followed(runtime, updates, tmp_path, kept):
    """The leader, with 3000 of 7000 stake, reports the honest miners it censors as failing, and
    aggregates what that report implies: nothing (its result is its base, which no re-measurement can
    refuse), or one update of two. The honest reports, holding more than half the reporting stake, owe both
    updates a place, so its aggregate is refused, named, and the honest one followed."""
    net, syncer, following, refusal = leader_against_two_honest(runtime, updates, tmp_path, kept)
    assert refusal.validator == hotkey(net, "validator0")
    censored = net.miners["miner1"].hotkey.ss58_address
    assert f"{censored[:10]}… (passed as useful by 4000 of 7000 reporting stake" in refusal.reason, (
        refusal.reason
    )
    assert syncer.followed[WINDOW][0] == hotkey(net, "validator1")
    assert heldout_loss(runtime, following.params) < heldout_loss(runtime, net.model.params)
