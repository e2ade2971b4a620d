"""A node's store timeouts follow the chain's block time (`distrai.store.timeouts`): the rule at
1-s and 12-s blocks and its clamps; the S3 stores a node builds (its own, the other nodes' it reads,
its data store) carry them while the CLI's defaults stay; and a store opened with a node's timeouts
on 1-s blocks gives up on a paused server after its tries, each one read timeout long."""

from __future__ import annotations

import logging

import pytest

import distrai.data.access as access_module
from distrai.chain.base import Hyperparameters
from distrai.chain.local import LocalChain
from distrai.data.access import open_data_access
from distrai.localnet.network import publish_builtin_data
from distrai.localnet.s3server import make_bucket, pause, resume
from distrai.node.build import build_node
from distrai.node.settings import NodeSettings
from distrai.node.wallets import create_dev_wallet
from distrai.protocol.run import load_run_config, run_commitment, shipped_config_path
from distrai.store import (
    FileStore,
    RetryPolicy,
    S3Config,
    Store,
    StoreTimeouts,
    node_store_timeouts,
    open_store,
)
from distrai.store.base import Unreachable

pytest_plugins = ["tests.support.s3server"]

CPU = shipped_config_path("cpu-localnet")
RETRY_LOGGER = "distrai.store.retry"


@pytest.mark.parametrize(
    ("block_time", "connect", "read"),
    [
        (1.0, 5.0, 5.0),  # cpu-localnet, gpu-smoke: 2 s, raised to the 5-s floor
        (0.8, 5.0, 5.0),  # the chaos run's faster blocks
        (2.5, 5.0, 5.0),  # exactly the floor
        (4.0, 8.0, 8.0),  # connect follows a read timeout under 10 s
        (12.0, 10.0, 24.0),  # gpu-subnet on finney
        (30.0, 10.0, 60.0),  # exactly the cap
        (45.0, 10.0, 60.0),  # capped at botocore's default
    ],
)
def test_a_nodes_store_timeouts_are_two_blocks_within_5_and_60_s(block_time, connect, read):
    assert node_store_timeouts(block_time) == StoreTimeouts(connect_s=connect, read_s=read)


@pytest.mark.parametrize("block_time", [0.0, -1.0, float("nan")])
def test_a_block_time_that_is_not_positive_is_refused(block_time):
    with pytest.raises(ValueError, match="block time must be positive"):
        node_store_timeouts(block_time)


def test_open_store_sets_s3_timeouts_only_when_given_and_a_file_store_ignores_them(tmp_path):
    url = "s3://bucket/prefix?endpoint=http://127.0.0.1:1&path_style=true"
    default = open_store(url).config  # type: ignore[attr-defined]
    assert (default.connect_timeout_s, default.read_timeout_s) == (10.0, 60.0)
    node = open_store(url, timeouts=StoreTimeouts(connect_s=3.0, read_s=7.0)).config  # type: ignore[attr-defined]
    assert (node.connect_timeout_s, node.read_timeout_s) == (3.0, 7.0)
    assert isinstance(open_store(f"file://{tmp_path}", timeouts=node_store_timeouts(1.0)), FileStore)


def node_args(tmp_path, block_time: float, store_url: str):
    """The settings of a miner on a fresh embedded chain of `block_time`-second blocks that published
    the cpu-localnet run."""
    wallets = str(tmp_path / "wallets")
    owner, _ = create_dev_wallet("owner", "default", wallets)
    miner, _ = create_dev_wallet("miner", "default", wallets)
    chain = LocalChain.create(
        tmp_path / "chain.db",
        block_time=block_time,
        owner_coldkey=owner.coldkeypub.ss58_address,
        # both in the first block: at one a block the second waits out a 12-s block
        hyperparameters=Hyperparameters(max_registrations_per_block=2),
    )
    chain.register(owner)
    chain.register(miner)
    chain.commit(owner, run_commitment(load_run_config(CPU)))
    return NodeSettings(
        run_config=str(CPU),
        wallet_name="miner",
        wallet_path=wallets,
        subtensor_network="embedded",
        chain_path=str(chain.path),
        store_url=store_url,
        work_dir=str(tmp_path / "work"),
    )


def test_every_s3_store_a_node_opens_carries_the_timeouts_of_its_chains_block_time(
    tmp_path, s3_endpoint, s3_bucket, s3_credentials, monkeypatch
):
    # 12-s blocks: 24 s, not a clamp (the clamps are the rule's own test above)
    block_time, connect, read = 12.0, 10.0, 24.0
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", s3_credentials["access_key_id"])
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", s3_credentials["secret_access_key"])
    own = f"s3://{s3_bucket}/node?endpoint={s3_endpoint}&path_style=true"
    publish_builtin_data(load_run_config(CPU), open_store(own))  # the run's data, in the node's store
    opened: list[Store] = []

    def data_store(*args, **kwargs) -> Store:
        opened.append(open_store(*args, **kwargs))
        return opened[-1]

    monkeypatch.setattr(access_module, "open_store", data_store)
    node = build_node(node_args(tmp_path, block_time, own), "miner")
    try:
        assert node.store_timeouts == StoreTimeouts(connect_s=connect, read_s=read)
        other = node.stores.get("s3://other/miner?endpoint=http://127.0.0.1:2&path_style=true")
        assert len(opened) == 1  # the data store: the run config names none, so the node's own
        for store in (node.store, other, opened[0]):
            config: S3Config = store.config  # type: ignore[attr-defined]
            assert (config.connect_timeout_s, config.read_timeout_s) == (connect, read), store
    finally:
        node.metrics.close()


def test_a_data_store_opened_with_a_nodes_timeouts_carries_them(tmp_path):
    class Data:  # the run config's `data` section, naming a data store of S3
        store = "s3://data/run?endpoint=http://127.0.0.1:3&path_style=true"
        endpoint = None

    access = open_data_access(Data(), tmp_path / "data", own_url=None, timeouts=node_store_timeouts(12.0))
    config: S3Config = access.store.config  # type: ignore[attr-defined]
    assert (config.connect_timeout_s, config.read_timeout_s) == (10.0, 24.0)
    default: S3Config = open_data_access(Data(), tmp_path / "data", own_url=None).store.config  # type: ignore[attr-defined]
    assert (default.connect_timeout_s, default.read_timeout_s) == (10.0, 60.0)


def test_a_store_with_a_nodes_timeouts_gives_up_on_a_paused_server_after_its_tries(
    own_s3_server, s3_credentials, caplog
):
    """At 1-s blocks each try waits out the 5-s read timeout, and the store stops after its tries
    with `Unreachable` (time is not asserted: the tries are counted by their log lines)."""
    endpoint, server = own_s3_server
    make_bucket(endpoint, "paused")
    retry = RetryPolicy(attempts=2, base_delay_s=0.0, max_delay_s=0.0)
    store = open_store(
        f"s3://paused/node?endpoint={endpoint}&path_style=true",
        retry=retry,
        timeouts=node_store_timeouts(1.0),
        **s3_credentials,
    )
    store.put("window-1/manifest.json", b"before")
    caplog.set_level(logging.DEBUG, logger=RETRY_LOGGER)
    pause(server)
    try:
        with pytest.raises(Unreachable, match=r"s3 get 'window-1/manifest.json' .* failed: Read timeout"):
            store.get("window-1/manifest.json", 1024)
    finally:
        resume(server)
    tries = [r.getMessage() for r in caplog.records if r.name == RETRY_LOGGER]
    assert len(tries) == retry.attempts - 1 and "ReadTimeoutError" in tries[0], tries
    assert store.get("window-1/manifest.json", 1024) == b"before"
