"""The `distrai` command: development wallets, the embedded chain, the local network, and the link check."""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence
from pathlib import Path

from rich.console import Console
from rich.table import Table

from distrai.chain.base import ChainError, Hyperparameters
from distrai.chain.local import LocalChain
from distrai.dashboard.cli import DEFAULT_PORT as DASHBOARD_PORT
from distrai.dashboard.cli import add_dashboard_parser, run_dashboard
from distrai.data.cli import add_data_commands, cmd_data_prepare
from distrai.wallets import DEFAULT_WALLET_PATH, create_dev_wallet, open_wallet

console = Console()
DEFAULT_CHAIN = os.environ.get("DISTRAI_CHAIN", "distrai-chain.db")
COMMIT_REVEAL_FIELDS = ("commit_reveal_weights", "commit_reveal_period")
"""Hyperparameters `chain init` takes as `--commit-reveal` and `--reveal-period`, not by field name."""
FIELD_HELP = {
    "stake_threshold": "alpha a hotkey needs to set weights and to count in Yuma (default 0)",
}


def _wallet_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--wallet.name", dest="wallet_name", default=os.environ.get("BT_WALLET_NAME", "default")
    )
    parser.add_argument(
        "--wallet.hotkey", dest="wallet_hotkey", default=os.environ.get("BT_WALLET_HOTKEY", "default")
    )
    parser.add_argument(
        "--wallet.path", dest="wallet_path", default=os.environ.get("BT_WALLET_PATH", DEFAULT_WALLET_PATH)
    )


def _chain_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--chain", dest="chain", default=DEFAULT_CHAIN, help="embedded chain file (env DISTRAI_CHAIN)"
    )
    parser.add_argument("--netuid", type=int, default=int(os.environ.get("DISTRAI_NETUID", "1")))


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="distrai", description=__doc__)
    groups = parser.add_subparsers(dest="group", required=True)

    wallet = groups.add_parser("wallet", help="development wallets").add_subparsers(
        dest="command", required=True
    )
    create = wallet.add_parser("create", help="create an unencrypted coldkey and hotkey where missing")
    _wallet_args(create)

    chain = groups.add_parser("chain", help="the embedded chain").add_subparsers(
        dest="command", required=True
    )
    init = chain.add_parser("init", help="create a chain file and a subnet on it")
    _chain_args(init)
    defaults = Hyperparameters()
    init.add_argument("--block-time", type=float, default=12.0, help="seconds per block (default 12)")
    init.add_argument("--emission-per-block", type=float, default=1.0)
    init.add_argument("--owner-cut", type=float, default=0.18)
    init.add_argument("--owner-coldkey", default="", help="ss58 address of the subnet owner's coldkey")
    init.add_argument(
        "--owner-hotkey", default="", help="ss58 address of the subnet owner's hotkey (Yuma's owner uid)"
    )
    init.add_argument(
        "--commit-reveal",
        dest="commit_reveal_weights",
        action="store_true",
        help="validators commit weights sealed; the chain reveals them --reveal-period epochs later",
    )
    init.add_argument(
        "--reveal-period",
        dest="commit_reveal_period",
        type=int,
        default=defaults.commit_reveal_period,
        metavar="EPOCHS",
        help=f"epochs from a weights commit to its reveal (default {defaults.commit_reveal_period})",
    )
    for field, value in vars(defaults).items():
        if field in COMMIT_REVEAL_FIELDS:
            continue
        flag = "--" + field.replace("_", "-")
        if isinstance(value, bool):
            init.add_argument(
                flag, type=lambda s: s.lower() in ("1", "true", "yes"), default=value, metavar="BOOL"
            )
        else:
            init.add_argument(flag, type=type(value), default=value, help=FIELD_HELP.get(field))
    for name, text in (("status", "block, subnet and epoch"), ("metagraph", "every neuron of the subnet")):
        _chain_args(chain.add_parser(name, help=text))
    register = chain.add_parser("register", help="register a wallet's hotkey on the subnet")
    _chain_args(register)
    _wallet_args(register)
    stake = chain.add_parser("stake", help="add stake to a wallet's hotkey (signed by its coldkey)")
    _chain_args(stake)
    _wallet_args(stake)
    stake.add_argument("--amount", type=float, required=True)
    net = groups.add_parser(
        "localnet", help="run a whole subnet on this machine (chain, store, miners, validators)"
    )
    net.add_argument("--miners", type=int, default=3)
    net.add_argument("--validators", type=int, default=2)
    net.add_argument("--windows", type=int, default=5, help="windows each neuron runs before it stops")
    net.add_argument("--idle-miners", type=int, default=0, help="how many of the miners publish zero updates")
    net.add_argument(
        "--miner-ranks",
        type=int,
        default=1,
        help="run miner0 as this many data-parallel processes (torchrun; gloo on CPU), the others as one",
    )
    net.add_argument(
        "--sharded-miner-ranks",
        type=int,
        default=1,
        help="run miner1 as this many processes that shard the model over them (FSDP2, torchrun; gloo on CPU)",
    )
    net.add_argument(
        "--adversary",
        default="",
        metavar="TYPE[,TYPE…]",
        help="add one cheating miner per type beside the honest ones (idle, noise, copycat, stale, lazy, withhold, "
        "oldbase, wrongdata, forged, scaled, poison, nan, oversize, pickle, badsig, unregistered, replay)",
    )
    net.add_argument(
        "--leader-adversary",
        default="",
        metavar="TYPE[,TYPE…]",
        help="make the validators with the most stake try to steer the global model, one per type "
        "(poison, reweight, collude: with the poison miner of --adversary poison), and watch every "
        "follower refuse them and name them in its report",
    )
    net.add_argument("--block-time", type=float, default=1.0, help="seconds per block of the embedded chain")
    net.add_argument("--work", default="localnet", help="scratch folder for chain, store, wallets and logs")
    net.add_argument(
        "--run.config", dest="run_config", default=None, help="run config (default: the shipped CPU one)"
    )
    net.add_argument(
        "--device",
        default="cpu",
        help="every node's torch device: cpu, or cuda (the miners and validators then share the GPU)",
    )
    net.add_argument(
        "--data.files",
        dest="data_files",
        nargs="+",
        default=[],
        metavar="PATH",
        help="local text files to prepare the run's data from, when the run config's data is a template "
        "(no data.manifest): each file a document, tokenized by a BPE of data.vocab_size tokens trained on them",
    )
    net.add_argument(
        "--report",
        default=None,
        metavar="WORK",
        help="print the markdown report of the finished network in folder WORK (and write WORK/report.md); "
        "runs nothing",
    )
    net.add_argument(
        "--dashboard",
        action="store_true",
        help="serve the live dashboard (distrai dashboard) beside the network and print its address",
    )
    net.add_argument(
        "--dashboard-port",
        type=int,
        default=DASHBOARD_PORT,
        help=f"the dashboard's port (default {DASHBOARD_PORT})",
    )
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
    doctor.add_argument(
        "--block-time", dest="block_time", type=float, default=12.0, help="seconds per block (default 12)"
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


def _open_chain(args: argparse.Namespace) -> LocalChain:
    return LocalChain(Path(args.chain), args.netuid)


def cmd_wallet_create(args: argparse.Namespace) -> None:
    wallet, created = create_dev_wallet(args.wallet_name, args.wallet_hotkey, args.wallet_path)
    verb = "created" if created else "exists:"
    console.print(f"wallet {verb} {wallet.name}/{wallet.hotkey_str} at {wallet.path}")
    console.print(f"  coldkey {wallet.coldkeypub.ss58_address}\n  hotkey  {wallet.hotkey.ss58_address}")


def cmd_chain_init(args: argparse.Namespace) -> None:
    hp = Hyperparameters(**{k: getattr(args, k) for k in vars(Hyperparameters())})
    chain = LocalChain.create(
        Path(args.chain),
        netuid=args.netuid,
        block_time=args.block_time,
        hyperparameters=hp,
        emission_per_block=args.emission_per_block,
        owner_cut=args.owner_cut,
        owner_coldkey=args.owner_coldkey,
        owner_hotkey=args.owner_hotkey,
    )
    console.print(
        f"chain at {chain.path}: subnet {chain.netuid}, block {chain.block()}, genesis {chain.genesis[:18]}…"
    )


def cmd_chain_status(args: argparse.Namespace) -> None:
    chain = _open_chain(args)
    hp = chain.hyperparameters()
    info = chain.subnet_info()
    block = chain.block()
    table = Table(title=f"embedded chain {chain.path}", show_header=False)
    rows = [
        ("block", str(block)),
        ("block hash", chain.block_hash(block)),
        ("block time", f"{chain.block_time():g} s"),
        ("subnet", str(chain.netuid)),
        ("neurons", f"{chain.metagraph().n} / {hp.max_uids}"),
        ("tempo", str(hp.tempo)),
        (
            "weights",
            f"commit-reveal, revealed after {hp.commit_reveal_period} epoch(s)"
            if hp.commit_reveal_weights
            else "set directly",
        ),
        ("stake threshold", f"{hp.stake_threshold:g}"),
        ("owner hotkey", info["owner_hotkey"] or "none"),
        ("last epoch", str(info["last_epoch_block"])),
        ("emission per block", f"{info['emission_per_block']:g}"),
        ("owner emission", f"{info['owner_emission']:.4f}"),
    ]
    for key, value in rows:
        table.add_row(key, value)
    console.print(table)


def cmd_chain_metagraph(args: argparse.Namespace) -> None:
    chain = _open_chain(args)
    mg = chain.metagraph()
    table = Table(title=f"subnet {mg.netuid} at block {mg.block}")
    for col in (
        "uid",
        "hotkey",
        "stake",
        "permit",
        "trust",
        "incentive",
        "dividends",
        "emission",
        "earned",
        "updated",
    ):
        table.add_column(col, justify="right" if col not in ("hotkey",) else "left")
    for n in mg.neurons:
        table.add_row(
            str(n.uid),
            n.hotkey[:10] + "…",
            f"{n.stake:.2f}",
            "✓" if n.validator_permit else "",
            f"{n.trust:.3f}",
            f"{n.incentive:.3f}",
            f"{n.dividends:.3f}",
            f"{n.emission:.4f}",
            f"{n.total_emission:.4f}",
            str(n.last_update),
        )
    console.print(table)


def cmd_chain_register(args: argparse.Namespace) -> None:
    chain = _open_chain(args)
    wallet = open_wallet(args.wallet_name, args.wallet_hotkey, args.wallet_path)
    uid = chain.register(wallet)
    console.print(f"{args.wallet_name}/{args.wallet_hotkey} ({wallet.hotkey.ss58_address}) is uid {uid}")


def cmd_chain_stake(args: argparse.Namespace) -> None:
    chain = _open_chain(args)
    wallet = open_wallet(args.wallet_name, args.wallet_hotkey, args.wallet_path)
    chain.add_stake(wallet, args.amount)
    neuron = chain.metagraph().neuron(wallet.hotkey.ss58_address)
    total = neuron.stake if neuron else args.amount
    console.print(f"staked {args.amount:g} to {wallet.hotkey.ss58_address}; stake now {total:g}")


def cmd_localnet(args: argparse.Namespace) -> None:
    from distrai.localnet_cmd import run_localnet

    run_localnet(args, console)


def cmd_doctor(args: argparse.Namespace) -> int:
    from distrai import linkcheck
    from distrai.run import load_run_config
    from distrai.store import StoreError, open_store

    config = load_run_config(args.run_config)
    n_params = linkcheck.parameter_count(config)
    parts = linkcheck.reveal_bytes(config, n_params, args.validators)
    seconds = linkcheck.reveal_seconds(config, args.block_time)
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
            f"{linkcheck.reveal_blocks(config)} blocks × {args.block_time:g} s",
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


COMMANDS = {
    ("wallet", "create"): cmd_wallet_create,
    ("chain", "init"): cmd_chain_init,
    ("chain", "status"): cmd_chain_status,
    ("chain", "metagraph"): cmd_chain_metagraph,
    ("chain", "register"): cmd_chain_register,
    ("chain", "stake"): cmd_chain_stake,
    ("localnet", None): cmd_localnet,
    ("doctor", None): cmd_doctor,
    ("dashboard", None): lambda args: run_dashboard(args, console),
    ("data", "prepare"): lambda args: cmd_data_prepare(args, console),
}


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        code = COMMANDS[(args.group, getattr(args, "command", None))](args)
    except (ChainError, FileNotFoundError, ValueError) as exc:
        console.print(f"[red]error:[/red] {exc}", highlight=False)
        return 1
    return code or 0


if __name__ == "__main__":
    sys.exit(main())
