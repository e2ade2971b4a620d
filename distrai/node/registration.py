"""Refusing an unregistered hotkey with the command that registers it, from a node's own settings."""

from __future__ import annotations

import shlex

from distrai.chain.base import Chain
from distrai.node.settings import HotkeySettings
from distrai.node.wallets import DEFAULT_WALLET_PATH


def register_command(settings: HotkeySettings) -> str:
    """The command that registers the hotkey of these settings on their subnet: `distrai chain
    register` on the embedded chain, `btcli subnet register` on a subtensor network."""
    wallet = f"--wallet.name {shlex.quote(settings.wallet_name)} --wallet.hotkey {shlex.quote(settings.wallet_hotkey)}"
    if settings.wallet_path != DEFAULT_WALLET_PATH:
        wallet += f" --wallet.path {shlex.quote(settings.wallet_path)}"
    network, netuid = settings.subtensor_network, settings.netuid
    if network == "embedded":
        chain = shlex.quote(settings.chain_path)
        return f"distrai chain register --chain.path {chain} --netuid {netuid} {wallet}"
    return f"btcli subnet register --netuid {netuid} {wallet} --network {shlex.quote(network)}"


def require_registered(chain: Chain, hotkey: str, settings: HotkeySettings) -> int:
    """The uid of `hotkey` on the chain's subnet; ValueError naming the command that registers it."""
    uid = chain.metagraph().uid_of(hotkey)
    if uid is None:
        raise ValueError(
            f"hotkey {hotkey} is not registered on subnet {chain.netuid}; register it with: "
            f"{register_command(settings)}"
        )
    return uid
