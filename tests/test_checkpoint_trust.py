"""A node that joins late takes a checkpoint of window w only if its parameters and its outer
momentum are the result of an aggregate of window w − 1 that it would follow: a poisoned checkpoint
from the validator with the most stake is refused, with the reason logged, and the node starts from
an honest one, or from the run's initial model by following the aggregates. In one process, as
tests/test_follow.py: checkpoints encoded as validators publish them, in their stores, and the
project's `Syncer`."""

from __future__ import annotations

import logging

import pytest
import torch
from test_follow import CONFIG, HONEST_SCORES, WINDOW, build_network

from distrai.protocol.globalmodel import GlobalModel, encode_checkpoint
from distrai.protocol.layout import checkpoint_key
from distrai.protocol.run import load_run_config
from distrai.protocol.runtime import build_runtime
from distrai.protocol.sync import StoreCache, Syncer, peer_view
from distrai.train.outer import OuterState


@pytest.fixture(scope="module")
def runtime():
    return build_runtime(load_run_config(CONFIG))


def other_params(model: GlobalModel) -> GlobalModel:
    generator = torch.Generator().manual_seed(7)
    params = {n: p + 0.5 * torch.randn(p.shape, generator=generator) for n, p in model.params.items()}
    return GlobalModel(model.window, params, model.outer)


def other_momentum(model: GlobalModel) -> GlobalModel:
    momentum = {n: 10.0 * m for n, m in model.outer.momentum.items()}
    return GlobalModel(model.window, model.params, OuterState(momentum, model.outer.step))


@pytest.fixture
def honest(runtime, tmp_path):
    """Both validators' aggregates of `WINDOW` anchored, and G_{WINDOW+1} as a follower reached it."""
    net = build_network(runtime, tmp_path)
    net.publish_aggregate("validator0", HONEST_SCORES)
    net.publish_aggregate("validator1", HONEST_SCORES)
    _, following = net.follow()
    assert following.window == WINDOW + 1 and following.outer.momentum
    return net, following


def publish_checkpoint(net, validator: str, model: GlobalModel) -> None:
    hotkey = net.validators[validator].hotkey.ss58_address
    net.store.put(checkpoint_key(net.runtime.run_id, model.window, hotkey), encode_checkpoint(model))


def joiner(net) -> Syncer:
    return Syncer(net.runtime, net.harness.chain, StoreCache())


@pytest.mark.parametrize(
    ("poison", "words"),
    [
        (other_params, "its parameters are not the result of any aggregate of window"),
        (other_momentum, "its outer momentum is not the one of any aggregate of window"),
    ],
    ids=["other-parameters", "other-momentum"],
)
def test_a_poisoned_checkpoint_of_the_top_validator_is_refused_and_an_honest_one_taken(
    honest, poison, words, caplog
):
    net, following = honest
    publish_checkpoint(net, "validator0", poison(following))
    publish_checkpoint(net, "validator1", following)
    with caplog.at_level(logging.WARNING, logger="distrai.protocol.sync"):
        model = joiner(net).newest_checkpoint(peer_view(net.harness.chain), WINDOW + 1)
    assert model is not None and model.window == WINDOW + 1
    assert (model.hash, model.outer_hash) == (following.hash, following.outer_hash)
    top = net.validators["validator0"].hotkey.ss58_address
    assert any(top[:10] in r.message and words in r.message for r in caplog.records), caplog.text


def test_with_no_honest_checkpoint_a_joiner_follows_from_the_initial_model(honest, caplog):
    net, following = honest
    publish_checkpoint(net, "validator0", other_params(following))
    publish_checkpoint(net, "validator1", other_momentum(following))
    syncer = joiner(net)
    with caplog.at_level(logging.WARNING, logger="distrai.protocol.sync"):
        assert syncer.newest_checkpoint(peer_view(net.harness.chain), WINDOW + 1) is None
        model = syncer.catch_up(None, WINDOW + 1)
    assert (model.hash, model.outer_hash) == (following.hash, following.outer_hash)
    assert syncer.followed[WINDOW][0] == net.validators["validator0"].hotkey.ss58_address
    assert caplog.text.count("refused:") >= 2, caplog.text


def test_a_checkpoint_after_a_window_no_aggregate_moved_is_not_taken(runtime, tmp_path, caplog):
    net = build_network(runtime, tmp_path)
    net.at(net.harness.local.block() + net.cfg.blocks_per_window * 3)
    publish_checkpoint(net, "validator0", GlobalModel(WINDOW + 1, net.model.params, net.model.outer))
    with caplog.at_level(logging.WARNING, logger="distrai.protocol.sync"):
        assert joiner(net).newest_checkpoint(peer_view(net.harness.chain), WINDOW + 1) is None
    assert f"no aggregate of window {WINDOW} that this node would follow" in caplog.text
