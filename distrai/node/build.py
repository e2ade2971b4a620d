"""What a miner and a validator share: building a node from its typed settings
(`distrai.node.settings.NodeSettings`, which the role's entry point reads once from its flags and
environment).

A node refuses to start, saying why, when its work folder cannot be written in, its wallet is missing,
its hotkey is not registered (naming the command that registers it), or its run config is not the one
the subnet owner published on chain.

This module imports no torch, transformers or `bittensor` package: `build_node` makes those checks
(opening the wallet imports the `bittensor` package; the embedded chain does not) before
`prepare_runtime` loads torch and the model code, some 3 s of imports (`tests/test_startup.py`,
docs/startup.md).
"""

from __future__ import annotations

import logging
import sys
import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from distrai.chain.base import Chain
from distrai.node.folders import writable_folder
from distrai.node.metrics import Metrics
from distrai.node.registration import require_registered
from distrai.node.seat import Seat
from distrai.node.settings import ChainSettings, NodeSettings
from distrai.node.stopping import chain_lost
from distrai.node.wallets import open_wallet
from distrai.protocol.run import RUN_COMMITMENT_PREFIX, RunConfig, check_run_matches, load_run_config
from distrai.store import StoreTimeouts, node_store_timeouts, open_store
from distrai.store.outage import OutageLog
from distrai.train.launch import Launch

if TYPE_CHECKING:
    from distrai.data.access import DataAccess
    from distrai.protocol.runtime import Runtime
    from distrai.protocol.sync import StoreCache


@dataclass(frozen=True, kw_only=True)
class Node(Seat):
    """A node built from its settings: the seat its role is built from (`Miner(node, …)`,
    `Validator(node, …)`), with its own metrics and stores, and what its entry point runs it with."""

    metrics: Metrics
    stores: StoreCache
    work_dir: Path
    max_windows: int | None
    store_timeouts: StoreTimeouts
    """the S3 timeouts of every store this node opens: its own, the other nodes' (`stores`), its data
    store (`distrai.store.timeouts.node_store_timeouts` of the chain's block time)"""


def open_chain(settings: ChainSettings, stop: threading.Event | None = None) -> Chain:
    """The chain of `--subtensor.network`. With `stop` (a node's stop signal), a read of subtensor
    waits through an outage of the node it reads (`READ_PATIENCE_S`, or until `stop`); without (a
    one-shot command), it fails at once."""
    network, netuid = settings.subtensor_network, settings.netuid
    if network == "embedded":
        from distrai.chain.local import LocalChain

        return LocalChain(Path(settings.chain_path), netuid)
    from distrai.chain.subtensor import READ_PATIENCE_S, SubtensorChain  # imports the bittensor package

    if stop is None:
        return SubtensorChain(network, netuid)
    outages = OutageLog(logging.getLogger("distrai.chain"))
    return SubtensorChain(network, netuid, stop=stop, patience_s=READ_PATIENCE_S, outages=outages)


def published_run(chain: Chain) -> str | None:
    """The run commitment of the subnet owner's hotkeys, if any."""
    mg = chain.metagraph()
    owner = chain.subnet_owner()
    found = sorted(
        (c.block, c.data)
        for hotkey, c in mg.commitments.items()
        if c.data.startswith(RUN_COMMITMENT_PREFIX) and (n := mg.neuron(hotkey)) and n.coldkey == owner
    )
    return found[-1][1] if found else None


def configure_logging(level: str) -> None:
    from rich.logging import RichHandler

    logging.basicConfig(
        level=level.upper(), format="%(message)s", handlers=[RichHandler(show_path=False, markup=False)]
    )
    # boto3 says where it found the S3 keys once per session (distrai.store.s3: one per set of keys) at INFO
    logging.getLogger("botocore.credentials").setLevel(max(logging.WARNING, logging.getLogger().level))


def build_node(
    settings: NodeSettings,
    role: str,
    launch: Launch | None = None,
    budget: int | None = None,
    stop: threading.Event | None = None,
    shard: bool = False,
) -> Node:
    """The node of `role` from its settings. With `launch`, rank 0 of a miner on several processes, whose ranks agreed
    on the memory `budget`; without, the budget is this device's. `stop` is the node's stop signal
    (its chain's reads wait through an outage until it is set); `shard`: a miner's --miner.shard."""
    configure_logging(settings.logging_level)
    if not settings.run_config:
        raise ValueError("no run config: pass --run.config PATH (the subnet owner's TOML)")
    config: RunConfig = load_run_config(settings.run_config)
    work_dir = node_work_dir(settings)
    chain = open_chain(settings, stop)
    wallet = open_wallet(settings.wallet_name, settings.wallet_hotkey, settings.wallet_path)
    require_registered(chain, wallet.hotkey.ss58_address, settings)
    check_run_matches(config, published_run(chain))
    if not settings.store_url:
        raise ValueError("no store: pass --store.url (file:///path or s3://bucket/prefix)")
    timeouts = node_store_timeouts(chain.block_time())
    store = open_store(
        settings.store_url,
        endpoint=settings.store_endpoint,
        bandwidth_bytes_per_s=settings.store_bandwidth,
        timeouts=timeouts,
    )
    from distrai.protocol.sync import StoreCache, open_announced
    from distrai.train.determinism import configure_determinism  # the first import of torch

    configure_determinism(settings.device)
    if launch is None:
        budget = memory_budget(settings)
    runtime = prepare_runtime(settings, config, role, budget, launch, timeouts, shard)
    metrics = Metrics(
        work_dir / "metrics.jsonl",
        role=role,
        hotkey=wallet.hotkey.ss58_address,
        run_id=runtime.run_id,
        wandb_project=settings.wandb_project,
        wandb_entity=settings.wandb_entity,
        config=config.model_dump(mode="json"),
    )
    return Node(
        runtime=runtime,
        chain=chain,
        wallet=wallet,
        store=store,
        store_url=store.url,
        work_dir=work_dir,
        metrics=metrics,
        stores=StoreCache(lambda url: open_announced(url, timeouts)),
        max_windows=settings.max_windows,
        store_timeouts=timeouts,
    )


def node_work_dir(settings: NodeSettings) -> Path:
    """This node's folder (made, and checked writable): `--work.dir`, else ~/.distrai/<wallet>-<hotkey>."""
    work = settings.work_dir or f"~/.distrai/{settings.wallet_name}-{settings.wallet_hotkey}"
    return writable_folder(Path(work).expanduser(), "--work.dir")


def data_access(
    settings: NodeSettings, config: RunConfig, timeouts: StoreTimeouts | None = None
) -> DataAccess | None:
    """Where this node reads the run's prepared data (`--data.store`, else the run config's
    `data.store`, else its own store), caching shards in <work dir>/data, an S3 store with `timeouts`;
    None for built-in data."""
    if config.data.source != "prepared":
        return None
    from distrai.data.access import open_data_access

    return open_data_access(
        config.data,
        node_work_dir(settings) / "data",
        own_url=settings.store_url,
        own_endpoint=settings.store_endpoint,
        mirror_url=settings.data_store,
        mirror_endpoint=settings.data_endpoint,
        bandwidth_bytes_per_s=settings.store_bandwidth,
        timeouts=timeouts,
    )


def prepare_runtime(
    settings: NodeSettings,
    config: RunConfig,
    role: str,
    budget: int | None,
    launch: Launch | None = None,
    timeouts: StoreTimeouts | None = None,
    shard: bool = False,
) -> Runtime:
    """The run's runtime on this process's device: on its rank of `launch` when given, its step
    fitted to `budget` bytes of memory (a miner may split its batch further, and `shard` its state
    over its ranks; a validator replays the miner's split), the plan logged. `timeouts`: its data
    store's (`data_access`)."""
    from distrai.protocol.runtime import build_runtime, fit_memory, run_on_ranks

    runtime = build_runtime(config, settings.device, data_access(settings, config, timeouts))
    if launch is not None:
        run_on_ranks(runtime, launch)
    plan = fit_memory(runtime, budget, split_further=role == "miner", shard=shard)
    if plan is not None:
        logging.getLogger(f"distrai.{role}").info("memory: %s", plan.describe())
    return runtime


def memory_budget(settings: NodeSettings) -> int | None:
    """Bytes of device memory to fit the step in: `--device.memory_gib` when given, else 90% of the
    GPU's (`distrai.train.memory.device_budget`), else None (a CPU: nothing is planned)."""
    import torch

    from distrai.train.memory import GIB, device_budget

    if settings.device_memory_gib is None:
        return device_budget(torch.device(settings.device))
    return int(settings.device_memory_gib * GIB)


def run_node(role: str, node: Node, loop: Callable[[], None], stop: threading.Event) -> int:
    """Run a started node's `loop` (a miner's or a validator's `run`) to its end and return the exit
    status: 0 when it ended or was stopped, 1 when the run's data cannot be read or the chain was
    lost while the node was not stopping (`chain_lost`). Its metrics and any parallel ranks are
    closed whatever happens."""
    from distrai.chain.base import ChainError
    from distrai.data.cache import ShardError

    try:
        loop()
    except ShardError as exc:
        print(f"{role} stopped: the run's data cannot be read: {exc}", file=sys.stderr)
        return 1
    except ChainError as exc:
        return chain_lost(role, exc, stop)
    finally:
        node.metrics.close()
        if node.runtime.parallel is not None:
            node.runtime.parallel.shutdown()
    return 0
