"""`distrai dashboard`: its flags (the chain and store flags are the nodes' own) and how it starts."""

from __future__ import annotations

import argparse
import socket
import threading
from pathlib import Path

from distrai.node.settings import ChainSettings, NodeSettings, like

DEFAULT_PORT = 8700
DEFAULT_WORK = "~/.distrai/dashboard"


class DashboardSettings(ChainSettings):
    """The nodes' settings the dashboard takes, with its own help where their meaning differs."""

    run_config: str | None = like(NodeSettings, "run_config")
    store_url: str | None = like(
        NodeSettings,
        "store_url",
        help="read every validator's documents from this store (a shared bucket, or a mirror) instead of "
        "the store it announced on chain",
    )
    store_endpoint: str | None = like(
        NodeSettings,
        "store_endpoint",
        help="S3 endpoint URL of --store.url, and of announced s3:// stores that name none",
    )
    wallet_path: str | None = like(
        NodeSettings,
        "wallet_path",
        help="show the hotkeys of the wallets in this folder by their wallet names (only public key files "
        "are read)",
    )
    data_store: str | None = like(
        NodeSettings,
        "data_store",
        help="where to read the run's prepared data to evaluate the held-out loss (a mirror: every shard is "
        "checked against its hash); default: the run config's data.store, else --store.url",
    )
    data_endpoint: str | None = like(NodeSettings, "data_endpoint")
    work_dir: str = like(
        NodeSettings,
        "work_dir",
        help=f"where the dashboard keeps the data it fetched (default {DEFAULT_WORK})",
        default=DEFAULT_WORK,
    )


def add_dashboard_parser(groups) -> argparse.ArgumentParser:
    parser = groups.add_parser(
        "dashboard",
        help="serve a read-only web page of a run, from the chain and the validators' stores",
        description="Serve a live, read-only web page of a run: the global model's held-out loss, every "
        "miner's accepted and rejected windows with the validators' signed reasons, scores, weights and "
        "emission, and every validator's checks and agreement. It reads the chain and the stores the "
        "validators announce on it, as any follower does.",
    )
    parser.add_argument(
        "--host", default="127.0.0.1", help="address to serve on (default 127.0.0.1: this machine only)"
    )
    parser.add_argument(
        "--port", type=int, default=DEFAULT_PORT, help=f"port to serve on (default {DEFAULT_PORT})"
    )
    DashboardSettings.add_flags(parser)
    parser.add_argument(
        "--metrics",
        action="append",
        default=[],
        metavar="PATH",
        help="a node's work folder or metrics.jsonl, for its utilization (a folder of such folders too); "
        "may be given more than once",
    )
    parser.add_argument("--history", type=int, default=48, help="windows shown, the newest (default 48)")
    parser.add_argument(
        "--refresh",
        type=float,
        default=2.0,
        help="seconds between reads of the chain and the stores (default 2)",
    )
    parser.add_argument(
        "--heldout",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="follow the global model and evaluate it on the run's held-out data once per window, in the "
        "background on the CPU (default on)",
    )
    return parser


def check_port_free(host: str, port: int) -> None:
    """Raise ValueError, naming the flag to change, when nothing could listen on host:port."""
    with socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET) as probe:
        try:
            probe.bind((host, port))
        except OSError as exc:
            raise ValueError(
                f"cannot serve on {host}:{port} ({exc.strerror}): choose another --port or --host"
            ) from None


def run_dashboard(args: argparse.Namespace, console) -> None:
    import torch
    import uvicorn

    from distrai.dashboard.live import HeldoutFollower, Live
    from distrai.dashboard.nodes import NodeMetrics, wallet_labels
    from distrai.dashboard.reading import RunReader, store_opener
    from distrai.dashboard.server import create_app
    from distrai.node.build import open_chain
    from distrai.protocol.run import load_run_config, run_id
    from distrai.protocol.sync import StoreCache

    settings = DashboardSettings.from_args(args)
    if not settings.run_config:
        raise ValueError("no run config: pass --run.config PATH (the subnet owner's TOML)")
    if args.history < 1 or not args.refresh > 0:
        raise ValueError("--history must be at least 1 and --refresh positive")
    config = load_run_config(settings.run_config)
    check_port_free(args.host, args.port)
    torch.set_num_threads(1)
    opener = store_opener(settings.store_endpoint)

    def chain():
        return open_chain(settings)

    reader = RunReader(config, chain, StoreCache(opener), store_url=settings.store_url, history=args.history)
    heldout = (
        HeldoutFollower(config, run_id(config), chain, curve_builder(settings, config, opener), args.history)
        if args.heldout
        else None
    )
    wallets = settings.wallet_path
    live = Live(
        reader,
        NodeMetrics([Path(p) for p in args.metrics]),
        wallet_labels(Path(wallets) if wallets else None),
        heldout,
    )
    stop = threading.Event()
    threading.Thread(
        target=live.run, args=(stop, args.refresh), name="dashboard-refresh", daemon=True
    ).start()
    if heldout is not None:
        threading.Thread(
            target=heldout.run, args=(stop, args.refresh), name="dashboard-heldout", daemon=True
        ).start()
    console.print(
        f"DisTrAI dashboard of run {config.name}: http://{args.host}:{args.port}/ (Ctrl-C stops it)"
    )
    try:
        uvicorn.run(
            create_app(live),
            host=args.host,
            port=args.port,
            log_level="warning",
            server_header=False,
            access_log=False,
        )
    finally:
        stop.set()


def curve_builder(settings: DashboardSettings, config, opener):
    """Builds the held-out curve (model, data, a chain of its own) in the thread that follows it."""

    def build(chain):
        from distrai.protocol.heldout import HeldoutCurve
        from distrai.protocol.runtime import build_runtime
        from distrai.protocol.sync import StoreCache

        access = None
        if config.data.source == "prepared":
            from distrai.data.access import open_data_access

            access = open_data_access(
                config.data,
                Path(settings.work_dir).expanduser() / "data",
                own_url=settings.store_url,
                own_endpoint=settings.store_endpoint,
                mirror_url=settings.data_store,
                mirror_endpoint=settings.data_endpoint,
            )
        return HeldoutCurve(build_runtime(config, data_access=access), chain, StoreCache(opener))

    return build
