"""The `distrai` command: development wallets, the embedded chain, the owner's run commitment, the local
network, and the link check."""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable, Sequence
from functools import partial

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from distrai.chain.base import ChainError
from distrai.chain_cmd import CHAIN_COMMANDS, add_chain_commands, wallet_args
from distrai.dashboard.cli import DEFAULT_PORT as DASHBOARD_PORT
from distrai.dashboard.cli import add_dashboard_parser, run_dashboard
from distrai.data.cli import add_data_commands
from distrai.node.settings import ChainSettings
from distrai.node.wallets import create_dev_wallet, public_hotkeys
from distrai.run_cmd import add_run_commands, cmd_data_prepare_run, cmd_run_publish

PIPED_WIDTH = 200
"""Columns of output that goes to a file or a pipe (rich's own default there is 80, which cuts the
metagraph's hotkeys and wraps long messages); a terminal's own width, or COLUMNS, wins."""
console = Console(width=None if sys.stdout.isatty() or "COLUMNS" in os.environ else PIPED_WIDTH)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="distrai", description=__doc__)
    parser.set_defaults(command=None)  # the groups without commands (localnet, doctor, dashboard)
    groups = parser.add_subparsers(dest="group", required=True)

    wallet = groups.add_parser("wallet", help="development wallets").add_subparsers(
        dest="command", required=True
    )
    create = wallet.add_parser("create", help="create an unencrypted coldkey and hotkey where missing")
    wallet_args(create, name_from_env=True)
    listing = wallet.add_parser("list", help="every wallet and hotkey under --wallet.path, with addresses")
    wallet_args(listing, name_from_env=False)

    add_chain_commands(groups)
    add_run_commands(groups)
    add_localnet_parser(groups)
    add_data_commands(groups)
    add_dashboard_parser(groups)
    doctor = groups.add_parser(
        "doctor",
        help="check that this miner's link uploads a challenged reveal before the reveal deadline",
        description="Measure the upload rate to the miner's store and compare it with the rate a "
        "challenged reveal needs under the run config (docs/links.md). Exit code 0 if the link is "
        "fast enough, 1 if it is not.",
    )
    doctor.add_argument("--run.config", dest="run_config", required=True, metavar="PATH", help="run config")
    doctor.add_argument(
        "--store.url", dest="store_url", required=True, metavar="URL", help="the miner's store"
    )
    doctor.add_argument("--store.endpoint", dest="store_endpoint", default=None, metavar="URL")
    doctor.add_argument(
        "--store.bandwidth",
        dest="store_bandwidth",
        type=float,
        default=None,
        metavar="BYTES_PER_S",
        help="pace the probe to this many bytes per second, as the miner's own --store.bandwidth would",
    )
    ChainSettings.add_flags(doctor)  # the nodes' flags it reads the chain's block time with
    doctor.add_argument(
        "--block-time",
        dest="block_time",
        type=float,
        default=None,
        metavar="SECONDS",
        help="seconds per block (default: the chain's, read from --subtensor.network)",
    )
    doctor.add_argument(
        "--validators",
        type=int,
        default=8,
        help="validators with a permit (default 8; 0: nobody challenges, the reveal is the update alone)",
    )
    doctor.add_argument(
        "--probe-bytes",
        dest="probe_bytes",
        type=int,
        default=8 << 20,
        metavar="N",
        help="bytes uploaded to measure the link (default 8 MiB)",
    )
    return parser


def add_localnet_parser(groups: argparse._SubParsersAction) -> argparse.ArgumentParser:
    """`distrai localnet`'s flags; every flag's help ends with its default."""
    net = groups.add_parser(
        "localnet",
        help="run a whole subnet on this machine (chain, store, miners, validators)",
        description="Run a whole subnet on this machine: an embedded chain, a file store, and every miner "
        "and validator as its own process; a live table while it runs, each miner's results at the end.",
    )
    net.add_argument(
        "--miners", type=int, default=3, help="miners, the idle ones included (default %(default)s)"
    )
    net.add_argument("--validators", type=int, default=2, help="validators (default %(default)s)")
    net.add_argument(
        "--windows",
        type=int,
        default=5,
        help="windows each neuron runs before it stops (default %(default)s)",
    )
    net.add_argument(
        "--idle-miners",
        type=int,
        default=0,
        help="how many of the miners publish zero updates (default %(default)s)",
    )
    net.add_argument(
        "--miner-ranks",
        type=int,
        default=1,
        help="run miner0 as this many data-parallel processes (torchrun; gloo on CPU), the others as one "
        "(default %(default)s)",
    )
    net.add_argument(
        "--sharded-miner-ranks",
        type=int,
        default=1,
        help="run miner1 as this many processes that shard the model over them (FSDP2, torchrun; gloo on "
        "CPU) (default %(default)s)",
    )
    net.add_argument(
        "--adversary",
        default="",
        metavar="TYPE[,TYPE…]",
        help="add one cheating miner per type beside the honest ones (idle, noise, copycat, stale, lazy, withhold, "
        "oldbase, wrongdata, forged, scaled, poison, nan, oversize, pickle, badsig, unregistered, replay) "
        "(default: none)",
    )
    net.add_argument(
        "--leader-adversary",
        default="",
        metavar="TYPE[,TYPE…]",
        help="make the validators with the most stake try to steer the global model, one per type "
        "(poison, reweight, collude: with the poison miner of --adversary poison, censor, invent, skipper), and watch "
        "every follower refuse them and name them in its report (default: none)",
    )
    add_localnet_setting_flags(net)
    return net


def add_localnet_setting_flags(net: argparse.ArgumentParser) -> None:
    """`distrai localnet`'s flags for where and how the network runs, and what it shows."""
    net.add_argument(
        "--block-time",
        type=float,
        default=1.0,
        help="seconds per block of the embedded chain (default %(default)s)",
    )
    net.add_argument(
        "--work",
        default="localnet",
        help="scratch folder for chain, store, wallets and logs (default ./%(default)s)",
    )
    net.add_argument(
        "--run.config",
        dest="run_config",
        default=None,
        help="run config (default: the shipped CPU one, distrai/configs/cpu-localnet.toml)",
    )
    net.add_argument(
        "--device",
        default="cpu",
        help="every node's torch device: cpu, or cuda (the miners and validators then share the GPU) "
        "(default %(default)s)",
    )
    net.add_argument(
        "--data.files",
        dest="data_files",
        nargs="+",
        default=[],
        metavar="PATH",
        help="local text files to prepare the run's data from, when the run config's data is a template "
        "(no data.manifest): each file a document, tokenized by a BPE of data.vocab_size tokens trained on "
        "them (default: none)",
    )
    net.add_argument(
        "--report",
        default=None,
        metavar="WORK",
        help="print the markdown report of the finished network in folder WORK (and write WORK/report.md); "
        "runs nothing (default: run a network)",
    )
    net.add_argument(
        "--dashboard",
        action="store_true",
        help="serve the live dashboard (distrai dashboard) beside the network and print its address "
        "(default: off)",
    )
    net.add_argument(
        "--dashboard-port",
        type=int,
        default=DASHBOARD_PORT,
        help="the dashboard's port (default %(default)s)",
    )


def cmd_wallet_create(args: argparse.Namespace) -> None:
    wallet, created = create_dev_wallet(args.wallet_name, args.wallet_hotkey, args.wallet_path)
    verb = "created" if created else "exists:"
    console.print(f"wallet {verb} {wallet.name}/{wallet.hotkey_str} at {wallet.path}")
    console.print(f"  coldkey {wallet.coldkeypub.ss58_address}\n  hotkey  {wallet.hotkey.ss58_address}")


def cmd_wallet_list(args: argparse.Namespace) -> int:
    keys = public_hotkeys(args.wallet_path)
    if not keys:
        console.print(
            f"no wallets under {args.wallet_path}; make one with `distrai wallet create`", highlight=False
        )
        return 1
    table = Table(title=f"wallets under {args.wallet_path}")
    for column in ("wallet", "hotkey", "hotkey address", "coldkey address"):
        table.add_column(column, no_wrap=True)
    for key in keys:
        table.add_row(key.wallet, key.hotkey, key.address, key.coldkey or "(no coldkeypub.txt)")
    console.print(table)
    return 0


def cmd_localnet(args: argparse.Namespace) -> None:
    from distrai.localnet.preflight import preflight

    checked = None if args.report else preflight(args)  # refusals before the model code's imports
    from distrai.localnet.command import run_localnet

    run_localnet(args, console, checked)


def doctor_block_time(args: argparse.Namespace) -> tuple[float, str]:
    """Seconds per block, and where they come from: --block-time, else the chain's own."""
    if args.block_time is not None:
        return args.block_time, "--block-time"
    from distrai.node.build import open_chain

    chain = ChainSettings.from_args(args)
    network = chain.subtensor_network
    where = f"the embedded chain {chain.chain_path}" if network == "embedded" else network
    try:
        return open_chain(chain).block_time(), f"the block time of {where}"
    except ChainError as exc:
        raise ValueError(
            f"cannot read the seconds per block of {where} ({exc}): name the run's chain with "
            "--subtensor.network (and --chain.path), or give them with --block-time"
        ) from None


def cmd_doctor(args: argparse.Namespace) -> int:
    from distrai.node import linkcheck
    from distrai.protocol.run import load_run_config
    from distrai.store import StoreError, open_store

    config = load_run_config(args.run_config)
    block_time, clock = doctor_block_time(args)
    n_params = linkcheck.parameter_count(config)
    parts = linkcheck.reveal_bytes(config, n_params, args.validators)
    seconds = linkcheck.reveal_seconds(config, block_time)
    try:
        store = open_store(
            args.store_url, endpoint=args.store_endpoint, bandwidth_bytes_per_s=args.store_bandwidth
        )
        measured = linkcheck.measure_upload_rate(store, args.probe_bytes)
    except StoreError as exc:
        console.print(
            f"[red]error:[/red] cannot measure the upload rate to {args.store_url}: {exc}", highlight=False
        )
        return 1
    verdict = linkcheck.LinkVerdict(measured, parts.total, seconds)
    model = config.model.preset or config.model.path_or_id
    update_note = (
        f"codec {config.codec.name}" if parts.update_source == "codec" else "limits.max_update_bytes"
    )
    table = Table(title=f"link check: {config.name} → {args.store_url}", show_header=False)
    table.add_column(style="bold")
    table.add_column(justify="right")
    table.add_column(style="dim")
    rows = [
        ("parameters", f"{n_params:,}", f"{model}, {config.model.dtype}"),
        ("update", linkcheck.format_bytes(parts.update), update_note),
        (
            "trajectory",
            linkcheck.format_bytes(parts.trajectory),
            f"{config.verification.trajectory_fraction:g} of the last parameters and of the fp32 residual",
        ),
        (
            "states",
            linkcheck.format_bytes(parts.states),
            f"{parts.n_states} × {linkcheck.format_bytes(parts.state)}: the start of the run of "
            f"{config.verification.challenge_segments} challenged segment(s) of {config.train.n_segments}, "
            "whatever the validators",
        ),
        ("reveal", linkcheck.format_bytes(parts.total), f"{parts.total:,} bytes"),
        (
            "time to reveal",
            linkcheck.format_duration(seconds),
            f"{linkcheck.reveal_blocks(config)} blocks × {block_time:g} s ({clock})",
        ),
        ("rate needed", linkcheck.format_rate(verdict.required_rate), "reveal / time to reveal"),
        (
            "rate measured",
            linkcheck.format_rate(measured),
            f"{linkcheck.format_bytes(args.probe_bytes)} probe",
        ),
        ("margin", f"{verdict.margin:.2f}×", "measured / needed"),
        ("verdict", "[green]OK[/green]" if verdict.ok else "[red]TOO SLOW[/red]", ""),
    ]
    for row in rows:
        table.add_row(*row)
    console.print(table)
    colour = "green" if verdict.ok else "red"
    console.print(f"[{colour}]this link {verdict.message}[/{colour}]", highlight=False)
    return 0 if verdict.ok else 1


COMMANDS: dict[tuple[str, str | None], Callable[[argparse.Namespace], int | None]] = {
    ("wallet", "create"): cmd_wallet_create,
    ("wallet", "list"): cmd_wallet_list,
    **{("chain", name): partial(command, console=console) for name, command in CHAIN_COMMANDS.items()},
    ("run", "publish"): lambda args: cmd_run_publish(args, console),
    ("localnet", None): cmd_localnet,
    ("doctor", None): cmd_doctor,
    ("dashboard", None): lambda args: run_dashboard(args, console),
    ("data", "prepare"): lambda args: cmd_data_prepare_run(args, console),
}


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        code = COMMANDS[(args.group, args.command)](args)
    except (ChainError, FileNotFoundError, ValueError) as exc:
        console.print(f"[red]error:[/red] {escape(str(exc))}", highlight=False, soft_wrap=True)
        return 1
    return code or 0


if __name__ == "__main__":
    sys.exit(main())
