"""`distrai run publish`: the subnet owner publishes its run config's run id, as the nodes read it; and
`distrai data prepare --run.template T --run.out F`, which writes the run config naming the data it
prepared."""

from __future__ import annotations

import argparse
import tomllib
from pathlib import Path
from typing import TYPE_CHECKING

from rich.console import Console
from rich.markup import escape

from distrai.chain.base import Chain
from distrai.data.cli import cmd_data_prepare, prepared_data
from distrai.node.registration import require_registered
from distrai.node.settings import HotkeySettings, NodeSettings, WalletSettings, like

if TYPE_CHECKING:
    from distrai.protocol.run import RunConfig


class PublishSettings(HotkeySettings):
    """The nodes' settings `run publish` takes, with its own help where their meaning differs."""

    wallet_name: str = like(WalletSettings, "wallet_name", help="the subnet owner's wallet (coldkey) name")
    wallet_hotkey: str = like(
        WalletSettings,
        "wallet_hotkey",
        help="the owner's hotkey that publishes the commitment (registered on the subnet)",
    )
    run_config: str | None = like(
        NodeSettings,
        "run_config",
        help="the run config to publish (TOML): every miner and validator runs this file",
    )


def add_run_commands(groups: argparse._SubParsersAction) -> None:
    run = groups.add_parser("run", help="the subnet owner's run").add_subparsers(
        dest="command", required=True
    )
    publish = run.add_parser(
        "publish",
        help="publish the run config's run id as the commitment of the subnet owner's hotkey",
        description="Publish 'distrai-run:<run id>' as the commitment of the owner's hotkey, the run id "
        "computed as every node computes it from the same file, then read it back as the nodes read it. "
        "Refused unless the wallet's coldkey owns the subnet and its hotkey is registered on it.",
    )
    PublishSettings.add_flags(publish)


def publish_run(chain: Chain, wallet, config: RunConfig, settings: HotkeySettings) -> bool:
    """Publish `config`'s run commitment with `wallet`'s hotkey, then check it as every node does at
    start-up; False when it was published already. ValueError, saying why, for a wallet that does not
    own the subnet or a hotkey not registered on it (naming the command that registers it, from `settings`)."""
    from distrai.node.build import published_run
    from distrai.protocol.run import check_run_matches, run_commitment

    owner = chain.subnet_owner()
    coldkey = wallet.coldkeypub.ss58_address
    if coldkey != owner:
        raise ValueError(
            f"wallet {wallet.name} (coldkey {coldkey}) does not own subnet {chain.netuid} (its owner is "
            f"{owner or 'nobody'}): the nodes read the run commitment of the owner's hotkeys only"
        )
    require_registered(chain, wallet.hotkey.ss58_address, settings)
    commitment = run_commitment(config)
    if published_run(chain) == commitment:
        return False
    chain.commit(wallet, commitment)
    check_run_matches(config, published_run(chain))
    return True


def cmd_run_publish(args: argparse.Namespace, console: Console) -> None:
    from distrai.node.build import open_chain
    from distrai.node.wallets import open_wallet
    from distrai.protocol.run import load_run_config, run_id

    settings = PublishSettings.from_args(args)
    path = settings.run_config
    if not path:
        raise ValueError("no run config: pass --run.config PATH (the TOML every node will run)")
    config = load_run_config(path)
    chain = open_chain(settings)
    wallet = open_wallet(settings.wallet_name, settings.wallet_hotkey, settings.wallet_path)
    if not publish_run(chain, wallet, config, settings):
        console.print(
            f"run {run_id(config)} ({config.name}) is published already; nothing changed", highlight=False
        )
        return
    console.print(
        f"published run {run_id(config)} ({config.name}) as the commitment of hotkey {wallet.hotkey.ss58_address} "
        f"on subnet {chain.netuid}: nodes started with --run.config {path} run it",
        highlight=False,
    )


def run_config_text(template: Path, store_url: str, digest: str) -> tuple[str, RunConfig]:
    """`template`'s text with the prepared data named (`data.run_text.with_data`), and the run config
    it is; a `ValueError` naming the template when it cannot take the lines or is no run config with them."""
    from distrai.data.run_text import with_data
    from distrai.protocol.run import parse_run_config

    try:
        text = with_data(template.read_text(encoding="utf-8"), prepared_data(store_url, digest))
        return text, parse_run_config(tomllib.loads(text), str(template))
    except OSError as exc:
        raise ValueError(f"{template}: cannot read the run config template: {exc.strerror or exc}") from None
    except tomllib.TOMLDecodeError as exc:
        raise ValueError(f"{template}: not valid TOML: {exc}") from None
    except ValueError as exc:
        raise ValueError(str(exc) if str(exc).startswith(str(template)) else f"{template}: {exc}") from None


def cmd_data_prepare_run(args: argparse.Namespace, console: Console) -> None:
    """`distrai data prepare`, the manifest's hash its last line; with `--run.template` and `--run.out`,
    the template is checked before the work (a template that cannot take the data's lines wastes no
    preparing) and written with them after it, all or nothing."""
    from distrai.protocol.run import run_id
    from distrai.store.file import write_atomically

    template, out = args.run_template, args.run_out
    if (template is None) != (out is None):
        raise ValueError("--run.template and --run.out go together: the template, and where to write it")
    if template is not None:
        run_config_text(template, args.store_url, "0" * 64)
    store_url, digest = cmd_data_prepare(args, console)
    if template is not None:
        text, config = run_config_text(template, store_url, digest)
        write_atomically(out, lambda file: file.write(text.encode()))
        console.print(
            f"wrote {escape(str(out))}: {escape(str(template))} naming the prepared data, run id "
            f"{run_id(config)}; publish it with `distrai run publish --run.config {escape(str(out))}`",
            highlight=False,
        )
    print(digest)  # the last line: the manifest's hash, for scripts
