"""What `neurons/miner.py` and `neurons/validator.py` share: flags in the style Bittensor operators
know (each with an environment variable), and building a node from them.

A node refuses to start, saying why, when its wallet is missing, its hotkey is not registered, or
its run config is not the one the subnet owner published on chain.
"""

from __future__ import annotations

import argparse
import logging
import os
import signal
import threading
from dataclasses import dataclass
from pathlib import Path

from rich.logging import RichHandler

from distrai.chain.base import Chain
from distrai.chain.local import LocalChain
from distrai.chain.subtensor import SubtensorChain
from distrai.metrics import Metrics
from distrai.run import RUN_COMMITMENT_PREFIX, RunConfig, check_run_matches, load_run_config
from distrai.runtime import Runtime, build_runtime
from distrai.store import Store, open_store
from distrai.sync import StoreCache
from distrai.train.determinism import configure_determinism
from distrai.wallets import DEFAULT_WALLET_PATH, open_wallet

FLAGS = [
    # (flag, env, default, help)
    ("--netuid", "BT_NETUID", "1", "subnet id"),
    ("--wallet.name", "BT_WALLET_NAME", "default", "wallet (coldkey) name"),
    ("--wallet.hotkey", "BT_WALLET_HOTKEY", "default", "hotkey name"),
    ("--wallet.path", "BT_WALLET_PATH", DEFAULT_WALLET_PATH, "folder of bittensor wallets"),
    (
        "--subtensor.network",
        "BT_SUBTENSOR_NETWORK",
        "embedded",
        "finney, test, local (a subtensor node on 127.0.0.1:9944), a ws:// or wss:// URL, or embedded",
    ),
    (
        "--chain.path",
        "DISTRAI_CHAIN",
        "distrai-chain.db",
        "the embedded chain's file (with --subtensor.network embedded)",
    ),
    (
        "--store.url",
        "DISTRAI_STORE_URL",
        None,
        "where this node publishes: file:///path or s3://bucket/prefix",
    ),
    ("--store.endpoint", "DISTRAI_STORE_ENDPOINT", None, "S3 endpoint URL (R2, MinIO, …); AWS S3 needs none"),
    (
        "--store.bandwidth",
        "DISTRAI_STORE_BANDWIDTH",
        None,
        "limit store traffic to this many bytes per second",
    ),
    ("--device", "DISTRAI_DEVICE", "cpu", "torch device: cpu, cuda, cuda:1, …"),
    ("--run.config", "DISTRAI_RUN_CONFIG", None, "the subnet owner's run config (TOML)"),
    (
        "--work.dir",
        "DISTRAI_WORK_DIR",
        None,
        "where this node keeps its state (default ~/.distrai/<wallet>-<hotkey>)",
    ),
    (
        "--wandb.project",
        "WANDB_PROJECT",
        None,
        "log metrics to this wandb project (offline without WANDB_API_KEY)",
    ),
    ("--wandb.entity", "WANDB_ENTITY", None, "wandb entity (team or user)"),
    (
        "--max.windows",
        "DISTRAI_MAX_WINDOWS",
        None,
        "stop after this many windows (default: run until stopped)",
    ),
    ("--logging.level", "DISTRAI_LOG_LEVEL", "INFO", "DEBUG, INFO, WARNING or ERROR"),
]


def build_parser(prog: str, description: str) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog=prog, description=description)
    for flag, env, default, text in FLAGS:
        parser.add_argument(flag, default=os.environ.get(env, default), help=f"{text} [env {env}]")
    return parser


@dataclass
class Node:
    runtime: Runtime
    chain: Chain
    wallet: object
    store: Store
    store_url: str
    work_dir: Path
    metrics: Metrics
    stores: StoreCache
    max_windows: int | None


def open_chain(args: argparse.Namespace) -> Chain:
    network, netuid = getattr(args, "subtensor.network"), int(args.netuid)
    if network == "embedded":
        return LocalChain(Path(getattr(args, "chain.path")), netuid)
    return SubtensorChain(network, netuid)


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
    logging.basicConfig(
        level=level.upper(), format="%(message)s", handlers=[RichHandler(show_path=False, markup=False)]
    )


def build_node(args: argparse.Namespace, role: str) -> Node:
    configure_logging(getattr(args, "logging.level"))
    run_path = getattr(args, "run.config")
    if not run_path:
        raise ValueError("no run config: pass --run.config PATH (the subnet owner's TOML)")
    config: RunConfig = load_run_config(run_path)
    chain = open_chain(args)
    wallet = open_wallet(
        getattr(args, "wallet.name"), getattr(args, "wallet.hotkey"), getattr(args, "wallet.path")
    )
    if chain.metagraph().uid_of(wallet.hotkey.ss58_address) is None:
        raise ValueError(
            f"hotkey {wallet.hotkey.ss58_address} is not registered on subnet {chain.netuid}; register it first"
        )
    check_run_matches(config, published_run(chain))
    store_url = getattr(args, "store.url")
    if not store_url:
        raise ValueError("no store: pass --store.url (file:///path or s3://bucket/prefix)")
    bandwidth = getattr(args, "store.bandwidth")
    store = open_store(
        store_url,
        endpoint=getattr(args, "store.endpoint"),
        bandwidth_bytes_per_s=float(bandwidth) if bandwidth else None,
    )
    work = getattr(args, "work.dir") or f"~/.distrai/{wallet.name}-{wallet.hotkey_str}"
    work_dir = Path(work).expanduser()
    work_dir.mkdir(parents=True, exist_ok=True)
    configure_determinism(args.device)
    runtime = build_runtime(config, args.device)
    metrics = Metrics(
        work_dir / "metrics.jsonl",
        role=role,
        hotkey=wallet.hotkey.ss58_address,
        run_id=runtime.run_id,
        wandb_project=getattr(args, "wandb.project"),
        wandb_entity=getattr(args, "wandb.entity"),
        config=config.model_dump(mode="json"),
    )
    max_windows = getattr(args, "max.windows")
    return Node(
        runtime=runtime,
        chain=chain,
        wallet=wallet,
        store=store,
        store_url=store.url,
        work_dir=work_dir,
        metrics=metrics,
        stores=StoreCache(),
        max_windows=int(max_windows) if max_windows else None,
    )


def stop_on_signals() -> threading.Event:
    """An event set by SIGINT or SIGTERM, so a node finishes its current step and exits cleanly."""
    stop = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: stop.set())
    return stop
