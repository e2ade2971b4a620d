"""Refusing an unregistered hotkey with the command that registers it, from a node's own flags."""

from __future__ import annotations

import argparse
import shlex

from distrai.chain.base import Chain
from distrai.node.wallets import DEFAULT_WALLET_PATH


def register_command(args: argparse.Namespace) -> str:
    """The command that registers the hotkey of these flags on their subnet: `distrai chain register`
    on the embedded chain, `btcli subnet register` on a subtensor network."""
    name, hotkey, path = (getattr(args, f"wallet.{part}") for part in ("name", "hotkey", "path"))
    wallet = f"--wallet.name {shlex.quote(name)} --wallet.hotkey {shlex.quote(hotkey)}"
    if path != DEFAULT_WALLET_PATH:
        wallet += f" --wallet.path {shlex.quote(path)}"
    network = getattr(args, "subtensor.network")
    if network == "embedded":
        chain = shlex.quote(getattr(args, "chain.path"))
        return f"distrai chain register --chain.path {chain} --netuid {args.netuid} {wallet}"
    return f"btcli subnet register --netuid {args.netuid} {wallet} --network {shlex.quote(network)}"


def require_registered(chain: Chain, hotkey: str, args: argparse.Namespace) -> int:
    """The uid of `hotkey` on the chain's subnet; ValueError naming the command that registers it."""
    uid = chain.metagraph().uid_of(hotkey)
    if uid is None:
        raise ValueError(
            f"hotkey {hotkey} is not registered on subnet {chain.netuid}; register it with: "
            f"{register_command(args)}"
        )
    return uid
