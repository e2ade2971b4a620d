"""The flags of a node, in the style Bittensor operators know, each with an environment variable.

A plain list that loads nothing heavy, so a command can offer the same flags (`distrai dashboard`)
without loading what a node loads.
"""

from __future__ import annotations

from distrai.node.wallets import DEFAULT_WALLET_PATH

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
    (
        "--data.store",
        "DISTRAI_DATA_STORE",
        None,
        "where to read the run's prepared data (a mirror: every shard is checked against its hash); "
        "default: the run config's data.store, else --store.url",
    ),
    ("--data.endpoint", "DISTRAI_DATA_ENDPOINT", None, "S3 endpoint URL of --data.store"),
    ("--device", "DISTRAI_DEVICE", "cpu", "torch device: cpu, cuda, cuda:1, …"),
    (
        "--device.memory_gib",
        "DISTRAI_DEVICE_MEMORY_GIB",
        None,
        "device memory to fit the training step in, in GiB (default: 90%% of the GPU's; on a CPU, no "
        "planning); the node picks micro-batches and activation checkpointing to fit (docs/gpu.md)",
    ),
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
