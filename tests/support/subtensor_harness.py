"""The bittensor adapter over the SDK over an in-memory substrate over a fresh embedded chain.

The contract tests run this harness beside the embedded one: the same behaviours, reached through
`SubtensorChain` and the SDK's own code instead of `LocalChain` directly.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import bittensor as bt

from distrai.chain.base import Hyperparameters
from distrai.chain.local import LocalChain
from distrai.chain.subtensor import SubtensorChain
from distrai.node.wallets import create_dev_wallet
from support.local_harness import FROZEN_BLOCK_TIME, OWNER_WALLET, TEST_HYPERPARAMETERS, LocalHarness
from support.memory_substrate import MemorySubstrate


@dataclass
class SubtensorHarness(LocalHarness):
    """The embedded harness with `chain` swapped for the adapter over the memory substrate."""

    substrate: MemorySubstrate | None = None

    def add_stake(self, wallet: bt.Wallet, amount: float) -> None:
        self.chain.add_stake(wallet, amount)


def make_subtensor_harness(
    tmp_path: Path, hyperparameters: Hyperparameters = TEST_HYPERPARAMETERS, *, owner_hotkey: bool = True
) -> SubtensorHarness:
    owner, _ = create_dev_wallet(OWNER_WALLET, "default", str(tmp_path / "wallets"))
    local = LocalChain.create(
        tmp_path / "chain.db",
        netuid=1,
        block_time=FROZEN_BLOCK_TIME,
        hyperparameters=hyperparameters,
        owner_coldkey=owner.coldkeypub.ss58_address,
        owner_hotkey=owner.hotkey.ss58_address if owner_hotkey else "",
    )
    substrate = MemorySubstrate(local)
    chain = SubtensorChain("local", netuid=1, substrate=substrate)
    return SubtensorHarness(
        chain=chain,
        local=local,
        substrate=substrate,
        wallet_path=tmp_path / "wallets",
        owner_coldkey=owner.coldkeypub.ss58_address,
        owner_hotkey=owner.hotkey.ss58_address if owner_hotkey else "",
    )
