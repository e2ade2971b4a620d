"""`distrai chain`: create the embedded chain with its subnet and owner, register, stake, and look at it."""

from __future__ import annotations

import argparse
import dataclasses
from pathlib import Path

from rich.console import Console
from rich.table import Table

from distrai.chain.base import ChainError, Hyperparameters
from distrai.chain.local import LocalChain
from distrai.node.settings import FlagSettings, Settings, WalletSettings, setting
from distrai.node.wallets import open_wallet

NO_OWNER = (
    "a subnet needs an owner, whose hotkey publishes the run config (`distrai run publish`): pass "
    "--wallet.name NAME (a wallet made with `distrai wallet create`: its coldkey owns the subnet and its "
    "hotkey is the owner hotkey), or --owner-coldkey SS58 (and --owner-hotkey SS58)"
)


class ChainFileSettings(Settings):
    """The embedded chain's file and subnet, as the `distrai chain` commands take them (the subnet's
    variable is DISTRAI_NETUID here, the nodes' BT_NETUID)."""

    chain_path: str = setting(
        "--chain.path", "DISTRAI_CHAIN", "distrai-chain.db", "embedded chain file", aliases=["--chain"]
    )
    netuid: int = setting("--netuid", "DISTRAI_NETUID", 1, "subnet id")


def yes(value: str) -> bool:
    """A BOOL flag's value: 1, true or yes (any case) is true, anything else false."""
    return value.lower() in ("1", "true", "yes")


HP = Hyperparameters()
"""The hyperparameters' defaults: `chain init`'s flags' defaults."""


class ChainInitSettings(FlagSettings):
    """`distrai chain init`'s settings of the subnet it creates, and its owner's addresses when no
    --wallet.name names the owner: flags alone, no variables. Which flags were `given` matters: a file
    that holds the subnet with other settings is refused, each setting that differs named, and one not
    given named as a default (`LocalChain.create`'s `defaulted`)."""

    block_time: float = setting("--block-time", None, 12.0, "seconds per block (default 12)", type=float)
    emission_per_block: float = setting("--emission-per-block", None, 1.0, None, type=float)
    owner_cut: float = setting("--owner-cut", None, 0.18, None, type=float)
    owner_coldkey: str = setting(
        "--owner-coldkey", None, "", "ss58 address of the subnet owner's coldkey (without --wallet.name)"
    )
    owner_hotkey: str = setting(
        "--owner-hotkey",
        None,
        "",
        "ss58 address of the subnet owner's hotkey (Yuma's owner uid; without --wallet.name)",
    )
    commit_reveal_weights: bool = setting(
        "--commit-reveal",
        None,
        HP.commit_reveal_weights,
        "validators commit weights sealed; the chain reveals them --reveal-period epochs later",
        action="store_true",
    )
    commit_reveal_period: int = setting(
        "--reveal-period",
        None,
        HP.commit_reveal_period,
        f"epochs from a weights commit to its reveal (default {HP.commit_reveal_period})",
        type=int,
        metavar="EPOCHS",
    )
    tempo: int = setting("--tempo", None, HP.tempo, None, type=int)
    max_uids: int = setting("--max-uids", None, HP.max_uids, None, type=int)
    max_validators: int = setting("--max-validators", None, HP.max_validators, None, type=int)
    immunity_period: int = setting("--immunity-period", None, HP.immunity_period, None, type=int)
    min_allowed_weights: int = setting("--min-allowed-weights", None, HP.min_allowed_weights, None, type=int)
    max_weight_limit: float = setting("--max-weight-limit", None, HP.max_weight_limit, None, type=float)
    weights_rate_limit: int = setting("--weights-rate-limit", None, HP.weights_rate_limit, None, type=int)
    activity_cutoff: int = setting("--activity-cutoff", None, HP.activity_cutoff, None, type=int)
    kappa: float = setting("--kappa", None, HP.kappa, None, type=float)
    bonds_moving_avg: float = setting("--bonds-moving-avg", None, HP.bonds_moving_avg, None, type=float)
    yuma3: bool = setting("--yuma3", None, HP.yuma3, None, type=yes, metavar="BOOL")
    stake_threshold: float = setting(
        "--stake-threshold",
        None,
        HP.stake_threshold,
        "alpha a hotkey needs to set weights and to count in Yuma (default 0)",
        type=float,
    )
    commitment_max_bytes: int = setting(
        "--commitment-max-bytes", None, HP.commitment_max_bytes, None, type=int
    )
    commitment_rate_limit: int = setting(
        "--commitment-rate-limit", None, HP.commitment_rate_limit, None, type=int
    )
    max_registrations_per_block: int = setting(
        "--max-registrations-per-block", None, HP.max_registrations_per_block, None, type=int
    )

    def hyperparameters(self) -> Hyperparameters:
        """The subnet's hyperparameters: this model's fields of the same names."""
        return Hyperparameters(
            **self.model_dump(include={f.name for f in dataclasses.fields(Hyperparameters)})
        )

    def defaulted(self) -> frozenset[str]:
        """The subnet's settings whose flags were not given, by field name (the owner's addresses are
        no such setting: --wallet.name may name the owner)."""
        owner = {"owner_coldkey", "owner_hotkey"}
        return frozenset(type(self).model_fields.keys() - owner - self.given)


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
    ChainInitSettings.add_flags(init)
    for name, text in (("status", "block, subnet and epoch"), ("metagraph", "every neuron of the subnet")):
        chain_args(chain.add_parser(name, help=text))
    register = chain.add_parser("register", help="register a wallet's hotkey on the subnet")
    chain_args(register)
    wallet_args(register, name_from_env=True)
    stake = chain.add_parser("stake", help="add stake to a wallet's hotkey (signed by its coldkey)")
    chain_args(stake)
    wallet_args(stake, name_from_env=True)
    stake.add_argument("--amount", type=float, required=True)


def owner_keys(args: argparse.Namespace, init: ChainInitSettings) -> tuple[str, str]:
    """The subnet owner's coldkey and hotkey addresses: from its wallet, or as given."""
    if args.wallet_name is not None:
        if init.owner_coldkey or init.owner_hotkey:
            raise ValueError("name the owner once: --wallet.name, or --owner-coldkey and --owner-hotkey")
        owner = open_wallet(args.wallet_name, args.wallet_hotkey, args.wallet_path)
        return owner.coldkeypub.ss58_address, owner.hotkey.ss58_address
    if not init.owner_coldkey:
        raise ValueError(NO_OWNER)
    return init.owner_coldkey, init.owner_hotkey


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
    init = ChainInitSettings.from_args(args)
    coldkey, hotkey = owner_keys(args, init)
    subnet = ChainFileSettings.from_args(args)
    existed = subnet_exists(Path(subnet.chain_path), subnet.netuid)
    chain = LocalChain.create(
        Path(subnet.chain_path),
        netuid=subnet.netuid,
        block_time=init.block_time,
        hyperparameters=init.hyperparameters(),
        emission_per_block=init.emission_per_block,
        owner_cut=init.owner_cut,
        owner_coldkey=coldkey,
        owner_hotkey=hotkey,
        defaulted=init.defaulted(),
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
