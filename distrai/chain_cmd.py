"""`distrai chain`: create the embedded chain with its subnet and owner, register, stake, and look at it."""

from __future__ import annotations

import argparse
from pathlib import Path

from rich.console import Console
from rich.table import Table

from distrai.chain.base import ChainError, Hyperparameters
from distrai.chain.local import LocalChain
from distrai.node.settings import Settings, WalletSettings, setting
from distrai.node.wallets import open_wallet

COMMIT_REVEAL_FIELDS = ("commit_reveal_weights", "commit_reveal_period")
"""Hyperparameters `chain init` takes as `--commit-reveal` and `--reveal-period`, not by field name."""
FIELD_HELP = {
    "stake_threshold": "alpha a hotkey needs to set weights and to count in Yuma (default 0)",
}
NO_OWNER = (
    "a subnet needs an owner, whose hotkey publishes the run config (`distrai run publish`): pass "
    "--wallet.name NAME (a wallet made with `distrai wallet create`: its coldkey owns the subnet and its "
    "hotkey is the owner hotkey), or --owner-coldkey SS58 (and --owner-hotkey SS58)"
)


class Given(argparse.Action):
    """Stores a flag's value and notes that the user gave it (`given`), so that a refusal can tell a
    setting asked for from a default."""

    def __call__(self, parser, namespace, values, option_string=None):
        setattr(namespace, self.dest, self.const if self.nargs == 0 else values)
        namespace.given = {*getattr(namespace, "given", ()), self.dest}


def given(args: argparse.Namespace) -> set[str]:
    """The destinations of the flags the user gave (those stored with `Given`)."""
    return set(getattr(args, "given", ()))


class ChainFileSettings(Settings):
    """The embedded chain's file and subnet, as the `distrai chain` commands take them (the subnet's
    variable is DISTRAI_NETUID here, the nodes' BT_NETUID)."""

    chain_path: str = setting(
        "--chain.path", "DISTRAI_CHAIN", "distrai-chain.db", "embedded chain file", aliases=["--chain"]
    )
    netuid: int = setting("--netuid", "DISTRAI_NETUID", 1, "subnet id")


def wallet_args(parser: argparse.ArgumentParser, name_from_env: bool, name_help: str | None = None) -> None:
    """The wallet flags, their defaults the environment's (`WalletSettings`: BT_WALLET_NAME, …); without
    `name_from_env`, --wallet.name is unset unless given."""
    wallet = WalletSettings()
    name = wallet.wallet_name if name_from_env else None
    parser.add_argument("--wallet.name", dest="wallet_name", default=name, help=name_help)
    parser.add_argument("--wallet.hotkey", dest="wallet_hotkey", default=wallet.wallet_hotkey)
    parser.add_argument("--wallet.path", dest="wallet_path", default=wallet.wallet_path)


def chain_args(parser: argparse.ArgumentParser) -> None:
    ChainFileSettings.add_flags(parser)


def add_chain_commands(groups: argparse._SubParsersAction) -> None:
    chain = groups.add_parser("chain", help="the embedded chain").add_subparsers(
        dest="command", required=True
    )
    init = chain.add_parser(
        "init",
        help="create a chain file and a subnet on it, owned by a wallet",
        description="Create the chain file if it does not exist, and the subnet on it if it is missing. "
        "The subnet needs an owner: --wallet.name (the owner's wallet), or --owner-coldkey (and "
        "--owner-hotkey). A file that holds the subnet already is left as it is: with the same settings "
        "that is said, with others the command refuses, naming them.",
    )
    chain_args(init)
    wallet_args(
        init,
        name_from_env=False,
        name_help="the subnet owner's wallet: its coldkey owns the subnet, its hotkey is the owner hotkey",
    )
    defaults = Hyperparameters()
    init.add_argument(
        "--block-time", type=float, default=12.0, action=Given, help="seconds per block (default 12)"
    )
    init.add_argument("--emission-per-block", type=float, default=1.0, action=Given)
    init.add_argument("--owner-cut", type=float, default=0.18, action=Given)
    init.add_argument(
        "--owner-coldkey",
        default="",
        help="ss58 address of the subnet owner's coldkey (without --wallet.name)",
    )
    init.add_argument(
        "--owner-hotkey",
        default="",
        help="ss58 address of the subnet owner's hotkey (Yuma's owner uid; without --wallet.name)",
    )
    init.add_argument(
        "--commit-reveal",
        dest="commit_reveal_weights",
        action=Given,
        nargs=0,
        const=True,
        default=False,
        help="validators commit weights sealed; the chain reveals them --reveal-period epochs later",
    )
    init.add_argument(
        "--reveal-period",
        dest="commit_reveal_period",
        type=int,
        default=defaults.commit_reveal_period,
        action=Given,
        metavar="EPOCHS",
        help=f"epochs from a weights commit to its reveal (default {defaults.commit_reveal_period})",
    )
    for field, value in vars(defaults).items():
        if field in COMMIT_REVEAL_FIELDS:
            continue
        flag = "--" + field.replace("_", "-")
        if isinstance(value, bool):
            init.add_argument(
                flag,
                type=lambda s: s.lower() in ("1", "true", "yes"),
                default=value,
                action=Given,
                metavar="BOOL",
            )
        else:
            init.add_argument(flag, type=type(value), default=value, action=Given, help=FIELD_HELP.get(field))
    for name, text in (("status", "block, subnet and epoch"), ("metagraph", "every neuron of the subnet")):
        chain_args(chain.add_parser(name, help=text))
    register = chain.add_parser("register", help="register a wallet's hotkey on the subnet")
    chain_args(register)
    wallet_args(register, name_from_env=True)
    stake = chain.add_parser("stake", help="add stake to a wallet's hotkey (signed by its coldkey)")
    chain_args(stake)
    wallet_args(stake, name_from_env=True)
    stake.add_argument("--amount", type=float, required=True)


def owner_keys(args: argparse.Namespace) -> tuple[str, str]:
    """The subnet owner's coldkey and hotkey addresses: from its wallet, or as given."""
    if args.wallet_name is not None:
        if args.owner_coldkey or args.owner_hotkey:
            raise ValueError("name the owner once: --wallet.name, or --owner-coldkey and --owner-hotkey")
        owner = open_wallet(args.wallet_name, args.wallet_hotkey, args.wallet_path)
        return owner.coldkeypub.ss58_address, owner.hotkey.ss58_address
    if not args.owner_coldkey:
        raise ValueError(NO_OWNER)
    return args.owner_coldkey, args.owner_hotkey


def open_subnet(args: argparse.Namespace) -> LocalChain:
    subnet = ChainFileSettings.from_args(args)
    return LocalChain(Path(subnet.chain_path), subnet.netuid)


def subnet_exists(path: Path, netuid: int) -> bool:
    try:
        LocalChain(path, netuid)
    except ChainError:
        return False
    return True


def cmd_chain_init(args: argparse.Namespace, console: Console) -> None:
    coldkey, hotkey = owner_keys(args)
    subnet = ChainFileSettings.from_args(args)
    existed = subnet_exists(Path(subnet.chain_path), subnet.netuid)
    hp = Hyperparameters(**{k: getattr(args, k) for k in vars(Hyperparameters())})
    settings = {"block_time", "emission_per_block", "owner_cut", *vars(Hyperparameters())}
    chain = LocalChain.create(
        Path(subnet.chain_path),
        netuid=subnet.netuid,
        block_time=args.block_time,
        hyperparameters=hp,
        emission_per_block=args.emission_per_block,
        owner_cut=args.owner_cut,
        owner_coldkey=coldkey,
        owner_hotkey=hotkey,
        defaulted=frozenset(settings - given(args)),
    )
    if existed:
        console.print(
            f"chain at {chain.path} already holds subnet {chain.netuid} with these settings; nothing changed",
            highlight=False,
        )
        return
    console.print(
        f"chain at {chain.path}: subnet {chain.netuid} owned by {coldkey} (owner hotkey {hotkey or 'none'}), "
        f"block {chain.block()}, genesis {chain.genesis[:18]}…",
        highlight=False,
    )


def cmd_chain_status(args: argparse.Namespace, console: Console) -> None:
    chain = open_subnet(args)
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
        ("owner coldkey", info["owner_coldkey"] or "none"),
        ("owner hotkey", info["owner_hotkey"] or "none"),
        ("last epoch", str(info["last_epoch_block"])),
        ("emission per block", f"{info['emission_per_block']:g}"),
        ("owner emission", f"{info['owner_emission']:.4f}"),
    ]
    for key, value in rows:
        table.add_row(key, value)
    console.print(table)


def cmd_chain_metagraph(args: argparse.Namespace, console: Console) -> None:
    chain = open_subnet(args)
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


def cmd_chain_register(args: argparse.Namespace, console: Console) -> None:
    chain = open_subnet(args)
    wallet = open_wallet(args.wallet_name, args.wallet_hotkey, args.wallet_path)
    uid = chain.register(wallet)
    console.print(f"{args.wallet_name}/{args.wallet_hotkey} ({wallet.hotkey.ss58_address}) is uid {uid}")


def cmd_chain_stake(args: argparse.Namespace, console: Console) -> None:
    chain = open_subnet(args)
    wallet = open_wallet(args.wallet_name, args.wallet_hotkey, args.wallet_path)
    chain.add_stake(wallet, args.amount)
    neuron = chain.metagraph().neuron(wallet.hotkey.ss58_address)
    total = neuron.stake if neuron else args.amount
    console.print(f"staked {args.amount:g} to {wallet.hotkey.ss58_address}; stake now {total:g}")


CHAIN_COMMANDS = {
    "init": cmd_chain_init,
    "status": cmd_chain_status,
    "metagraph": cmd_chain_metagraph,
    "register": cmd_chain_register,
    "stake": cmd_chain_stake,
}
