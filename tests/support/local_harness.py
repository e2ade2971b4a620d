"""A fresh embedded chain whose clock moves only when a test advances it."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import bittensor as bt

from distrai.chain.base import Hyperparameters
from distrai.chain.local import LocalChain
from distrai.node.wallets import create_dev_wallet

TEST_HYPERPARAMETERS = Hyperparameters(
    tempo=10,
    max_uids=8,
    max_validators=4,
    immunity_period=20,
    min_allowed_weights=1,
    weights_rate_limit=5,
    activity_cutoff=1000,
    commitment_max_bytes=256,
    commitment_rate_limit=1,
    max_registrations_per_block=64,
)
FROZEN_BLOCK_TIME = 100_000.0
OWNER_WALLET = "subnet-owner"


@dataclass
class LocalHarness:
    chain: LocalChain
    local: LocalChain
    wallet_path: Path
    owner_coldkey: str
    owner_hotkey: str = ""

    def owner(self) -> bt.Wallet:
        """The subnet owner's wallet: its coldkey owns the subnet, its hotkey is the owner hotkey."""
        return self.new_wallet(OWNER_WALLET)

    def new_wallet(self, name: str) -> bt.Wallet:
        wallet, _ = create_dev_wallet(name, "default", str(self.wallet_path))
        return wallet

    def add_stake(self, wallet: bt.Wallet, amount: float) -> None:
        self.local.add_stake(wallet, amount)

    def advance(self, blocks: int) -> None:
        self.local.advance(blocks)


def make_local_harness(
    tmp_path: Path, hyperparameters: Hyperparameters = TEST_HYPERPARAMETERS, *, owner_hotkey: bool = True
) -> LocalHarness:
    """`owner_hotkey`: whether the subnet names the owner wallet's hotkey its owner hotkey."""
    owner, _ = create_dev_wallet(OWNER_WALLET, "default", str(tmp_path / "wallets"))
    chain = LocalChain.create(
        tmp_path / "chain.db",
        netuid=1,
        block_time=FROZEN_BLOCK_TIME,
        hyperparameters=hyperparameters,
        owner_coldkey=owner.coldkeypub.ss58_address,
        owner_hotkey=owner.hotkey.ss58_address if owner_hotkey else "",
    )
    return LocalHarness(
        chain=chain,
        local=chain,
        wallet_path=tmp_path / "wallets",
        owner_coldkey=owner.coldkeypub.ss58_address,
        owner_hotkey=owner.hotkey.ss58_address if owner_hotkey else "",
    )
