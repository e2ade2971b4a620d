"""A node that passed over an aggregate out of reach while others followed it goes back and follows
it too, once the store answers and the next window's aggregates show that the network moved on; a
node whose pass-over the network shared keeps its model. In one process, on the network of
tests/test_follow.py (an embedded chain with a frozen clock, a file store, signed documents and the
project's `Syncer`)."""

from __future__ import annotations

import hashlib

import pytest
from test_follow import CONFIG, HONEST_SCORES, WINDOW, Network, Outage, build_network

from distrai.protocol.announce import Announcement
from distrai.protocol.globalmodel import GlobalModel, SyncUnavailable, outer_config
from distrai.protocol.layout import aggregate_key, report_key
from distrai.protocol.rejoin import REJOIN_WINDOWS, BaseVote, Verdict, verdict
from distrai.protocol.run import load_run_config
from distrai.protocol.runtime import build_runtime, params_hash
from distrai.protocol.sync import StoreCache, Syncer, peer_view
from distrai.protocol.windows import aggregate_deadline, reveal_deadline, window_start
from distrai.train.outer import outer_state_hash, outer_step
from distrai.wire import sign_document

NEXT = WINDOW + 1


def publish_empty_aggregate(net: Network, validator: str, window: int, base: GlobalModel) -> GlobalModel:
    """`validator`'s signed report and aggregate of a window no miner committed to, built on `base`,
    anchored on chain; returns the model it leads to."""
    wallet, rt = net.validators[validator], net.runtime
    hotkey = wallet.hotkey.ss58_address
    report = sign_document(
        wallet.hotkey,
        {
            "kind": "report",
            "run_id": rt.run_id,
            "window": window,
            "validator": hotkey,
            "observed_block": reveal_deadline(net.cfg, window),
            "miners": {},
            "refused": [],
        },
    )
    result = outer_step(base.params, [], base.outer, outer_config(rt.config.outer))
    aggregate = sign_document(
        wallet.hotkey,
        {
            "kind": "aggregate",
            "run_id": rt.run_id,
            "window": window,
            "base_hash": base.hash,
            "report_sha256": hashlib.sha256(report).hexdigest(),
            "accepted": [],
            "result_hash": params_hash(result.params),
            "outer_hash": outer_state_hash(result.state),
        },
    )
    net.store.put(report_key(rt.run_id, window, hotkey), report)
    net.store.put(aggregate_key(rt.run_id, window, hotkey), aggregate)
    net.harness.chain.commit(
        wallet,
        Announcement(
            store_url=net.store.url, window=window, aggregate_sha256=hashlib.sha256(aggregate).hexdigest()
        ).encode(),
    )
    return GlobalModel(window + 1, result.params, result.state)


@pytest.fixture(scope="module")
def runtime():
    return build_runtime(load_run_config(CONFIG))


@pytest.fixture
def net(runtime, tmp_path):
    return build_network(runtime, tmp_path, stakes=(3000.0, 2000.0, 1000.0))


def pass_over_window(net: Network, next_base) -> tuple[Syncer, GlobalModel, GlobalModel]:
    """validator0 aggregates window `WINDOW`; a node ("validator2") waits for it through an outage
    until its patience runs out and passes over it. Before that, validator0 anchors its aggregate of
    the next window built on `next_base(network's G_next, the skipping node's G_next)`. Returns the
    node's syncer, its model and the network's G_next."""
    net.publish_aggregate("validator0", HONEST_SCORES)
    net.at(aggregate_deadline(net.cfg, WINDOW))
    network = Syncer(net.runtime, net.harness.chain, StoreCache()).step(
        net.model, peer_view(net.harness.chain)
    )
    node = Syncer(
        net.runtime, net.harness.chain, StoreCache(), me=net.validators["validator2"].hotkey.ss58_address
    )
    outage = Outage(net)
    with pytest.raises(SyncUnavailable):
        node.step(net.model, peer_view(net.harness.chain))
    outage.end()
    skipped = GlobalModel(NEXT, net.model.params, net.model.outer)
    publish_empty_aggregate(net, "validator0", NEXT, next_base(network, skipped))
    outage = Outage(net)
    net.at(node.patience(WINDOW))
    provisional = node.step(net.model, peer_view(net.harness.chain))
    outage.end()
    assert provisional.hash == net.model.hash and node.behind()
    return node, provisional, network


def test_a_node_that_passed_over_the_networks_aggregate_goes_back_for_it_when_the_store_answers(net):
    node, provisional, network = pass_over_window(net, lambda network, skipped: network)
    net.at(aggregate_deadline(net.cfg, NEXT) + 1)
    rejoined = node.catch_up(provisional, NEXT + 1)
    leader = Syncer(net.runtime, net.harness.chain, StoreCache()).catch_up(network, NEXT + 1)
    assert rejoined.hash == leader.hash and rejoined.outer_hash == leader.outer_hash
    assert node.followed[WINDOW][0] == net.validators["validator0"].hotkey.ss58_address
    assert not node.behind()


def test_a_node_whose_pass_over_the_network_shared_keeps_its_model(net):
    node, provisional, _ = pass_over_window(net, lambda network, skipped: skipped)
    net.at(aggregate_deadline(net.cfg, NEXT) + 1)
    moved = node.catch_up(provisional, NEXT + 1)
    assert (
        WINDOW not in node.followed
        and node.followed[NEXT][0] == net.validators["validator0"].hotkey.ss58_address
    )
    assert (
        moved.window == NEXT + 1 and node.behind()
    )  # held a while yet, in case the network's leader is late


def test_only_the_other_validators_stake_tells_where_the_network_is():
    ours, theirs = "aa" * 32, "bb" * 32
    assert verdict([], ours, "me") is Verdict.UNKNOWN
    assert verdict([BaseVote("me", ours, 9e9), BaseVote("v1", theirs, 1.0)], ours, "me") is Verdict.BEHIND
    assert verdict([BaseVote("v1", theirs, 1.0), BaseVote("v2", ours, 2.0)], ours, "me") is Verdict.WITH
    assert verdict([BaseVote("v1", theirs, 2.0), BaseVote("v2", ours, 2.0)], ours, None) is Verdict.UNKNOWN
    assert verdict(
        [BaseVote("v1", theirs, 0.0), BaseVote("v2", theirs, 0.0), BaseVote("v3", ours, 0.0)], ours, None
    ) is (Verdict.BEHIND)
    assert REJOIN_WINDOWS >= 2, "a leader's aggregate of the next window may come late"


def test_a_node_holds_what_it_passed_over_for_rejoin_windows_at_most(net):
    """An aggregate built on a model this node lacks, anchored more than `REJOIN_WINDOWS` windows after
    its pass-over (a liar's base, say), no longer sends it back to wait for what it passed over."""
    node, provisional, network = pass_over_window(net, lambda network, skipped: network)
    far = WINDOW + REJOIN_WINDOWS + 1
    net.at(window_start(net.cfg, far) + 1)
    publish_empty_aggregate(net, "validator0", far, GlobalModel(far, network.params, network.outer))
    net.at(aggregate_deadline(net.cfg, far) + 1)
    later = GlobalModel(far, provisional.params, provisional.outer)
    assert node.rejoined(later, peer_view(net.harness.chain)) is later
    assert not node.behind()
