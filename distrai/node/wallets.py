"""Development wallets in the bittensor wallet format (`~/.bittensor/wallets/<name>/...`).

`btcli` and the bittensor SDK read what this writes. Keys made here are unencrypted: they are
for local networks and tests, never for keys that hold value.

The `bittensor` package (0.4 s to import) is imported when a wallet is opened or made, not with this
module: the nodes read `DEFAULT_WALLET_PATH` for their flags before they parse them.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import bittensor as bt

DEFAULT_WALLET_PATH = str(Path("~/.bittensor/wallets").expanduser())


def open_wallet(name: str, hotkey: str = "default", path: str = DEFAULT_WALLET_PATH) -> bt.Wallet:
    """An existing wallet; raises FileNotFoundError naming the missing key file."""
    import bittensor as bt

    wallet = bt.Wallet(name=name, hotkey=hotkey, path=str(Path(path).expanduser()))
    for keyfile in (wallet.coldkeypub_file, wallet.hotkey_file):
        if not keyfile.exists_on_device():
            raise FileNotFoundError(
                f"wallet {name}/{hotkey}: no key file at {keyfile.path}; create it with `distrai wallet create`"
            )
    return wallet


def create_dev_wallet(
    name: str, hotkey: str = "default", path: str = DEFAULT_WALLET_PATH
) -> tuple[bt.Wallet, bool]:
    """Create a wallet's coldkey and hotkey where missing, without passwords.

    Returns the wallet and whether anything new was written; existing keys are never replaced.
    """
    import bittensor as bt

    wallet = bt.Wallet(name=name, hotkey=hotkey, path=str(Path(path).expanduser()))
    created = False
    if not wallet.coldkey_file.exists_on_device():
        wallet.create_new_coldkey(use_password=False, overwrite=False, suppress=True)
        created = True
    if not wallet.hotkey_file.exists_on_device():
        wallet.create_new_hotkey(use_password=False, overwrite=False, suppress=True)
        created = True
    return wallet, created


@dataclass(frozen=True)
class PublicHotkey:
    """One hotkey under a wallet folder, from its public key files only."""

    wallet: str
    hotkey: str
    address: str
    coldkey: str | None
    """the wallet's coldkey address (None when its coldkeypub.txt is missing or unreadable)"""


def _ss58_of(pub: Path) -> str | None:
    try:
        address = json.loads(pub.read_text(encoding="utf-8")).get("ss58Address")
    except (OSError, UnicodeDecodeError, json.JSONDecodeError, AttributeError):
        return None
    return address if isinstance(address, str) else None


def public_hotkeys(path: str | Path) -> list[PublicHotkey]:
    """Every hotkey of the wallets under `path` (the bittensor layout:
    <wallet>/hotkeys/<hotkey>pub.txt and <wallet>/coldkeypub.txt), by wallet and hotkey name; files
    that are not public keys are passed over. No secret key file is read."""
    found = []
    for pub in sorted(Path(path).expanduser().glob("*/hotkeys/*pub.txt")):
        address = _ss58_of(pub)
        if address is not None:
            folder = pub.parent.parent
            found.append(
                PublicHotkey(
                    folder.name,
                    pub.name.removesuffix("pub.txt"),
                    address,
                    _ss58_of(folder / "coldkeypub.txt"),
                )
            )
    return found
