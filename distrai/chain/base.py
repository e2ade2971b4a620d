"""The `Chain` interface: the small part of a Bittensor chain that DisTrAI uses.

Both implementations (the embedded SQLite chain in `local.py` and the bittensor SDK adapter in
`subtensor.py`) speak in these types. Everything outside `distrai.chain` receives a `Chain` and
never knows which one it has.
"""

from __future__ import annotations

import time
from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Protocol


class WalletLike(Protocol):
    """What the chain needs from a wallet: the bittensor `Wallet` satisfies it."""

    @property
    def hotkey(self): ...

    @property
    def coldkey(self): ...

    @property
    def coldkeypub(self): ...


class OutageLogLike(Protocol):
    """Where a chain that retries an unreachable node says so: `distrai.store.outage.OutageLog`,
    handed in by the node (the chain room imports nothing from the store room beside it)."""

    def failed(self, what: str, error: object) -> bool: ...

    def answered(self, what: str) -> float | None: ...

    def gave_up(self, what: str, why: str) -> float | None: ...


class ChainError(Exception):
    """A write or read the chain refused. `reason` is subtensor's error name where one exists."""

    def __init__(self, reason: str, detail: str = ""):
        self.reason = reason
        self.detail = detail
        super().__init__(f"{reason}: {detail}" if detail else reason)


@dataclass(frozen=True)
class Hyperparameters:
    """Subnet hyperparameters, in plain units (fractions in [0, 1], not u16)."""

    tempo: int = 360
    max_uids: int = 256
    max_validators: int = 64
    immunity_period: int = 5000
    min_allowed_weights: int = 1
    max_weight_limit: float = 1.0
    weights_rate_limit: int = 100
    activity_cutoff: int = 5000
    kappa: float = 0.5
    bonds_moving_avg: float = 0.9
    yuma3: bool = True
    commit_reveal_weights: bool = False
    commit_reveal_period: int = 1
    """Epochs (tempos) between a weights commit and the epoch that reveals it (`RevealPeriodEpochs`)."""
    stake_threshold: float = 0.0
    """Alpha a hotkey needs to set weights and to count in Yuma (subtensor's global `StakeThreshold`)."""
    commitment_max_bytes: int = 1024
    commitment_rate_limit: int = 1
    max_registrations_per_block: int = 1


@dataclass(frozen=True)
class Neuron:
    uid: int
    hotkey: str
    coldkey: str
    stake: float
    validator_permit: bool
    registered_at: int
    last_update: int
    rank: float = 0.0
    trust: float = 0.0
    consensus: float = 0.0
    validator_trust: float = 0.0
    incentive: float = 0.0
    dividends: float = 0.0
    emission: float = 0.0
    """Emission of the last epoch, in alpha (TAO-like units)."""
    total_emission: float = 0.0
    """Everything this hotkey earned on this subnet since it registered (embedded chain only)."""


@dataclass(frozen=True)
class Commitment:
    hotkey: str
    data: str
    block: int


@dataclass(frozen=True)
class Metagraph:
    netuid: int
    block: int
    neurons: tuple[Neuron, ...]
    commitments: dict[str, Commitment] = field(default_factory=dict)

    @property
    def n(self) -> int:
        return len(self.neurons)

    @property
    def hotkeys(self) -> list[str]:
        return [n.hotkey for n in self.neurons]

    @property
    def uids(self) -> list[int]:
        return [n.uid for n in self.neurons]

    @property
    def stake(self) -> list[float]:
        return [n.stake for n in self.neurons]

    def uid_of(self, hotkey: str) -> int | None:
        for n in self.neurons:
            if n.hotkey == hotkey:
                return n.uid
        return None

    def neuron(self, hotkey: str) -> Neuron | None:
        uid = self.uid_of(hotkey)
        return None if uid is None else self.neurons[uid]


class Chain(ABC):
    """One subnet (`netuid`) of a chain."""

    netuid: int

    @abstractmethod
    def block(self) -> int:
        """The current block number."""

    @abstractmethod
    def block_hash(self, block: int | None = None) -> str:
        """The 0x-prefixed hex hash of `block` (the current block by default).

        Raises `ChainError("BlockNotYetProduced")` for a block in the future."""

    @abstractmethod
    def hyperparameters(self) -> Hyperparameters: ...

    @abstractmethod
    def metagraph(self) -> Metagraph: ...

    @abstractmethod
    def subnet_owner(self) -> str:
        """The ss58 address of the subnet owner's coldkey ("" when the subnet has none)."""

    @abstractmethod
    def subnet_owner_hotkey(self) -> str:
        """The ss58 address of the subnet owner's hotkey ("" when none is set).

        Yuma treats the uid of this one hotkey as the owner's: its permit and its stake survive the
        stake threshold, and its self-weight is kept."""

    @abstractmethod
    def register(self, wallet: WalletLike) -> int:
        """Register the wallet's hotkey on the subnet (signed by its coldkey); returns its uid.

        Registering a hotkey that is already registered returns its uid and changes nothing."""

    @abstractmethod
    def commit(self, wallet: WalletLike, data: str) -> None:
        """Publish `data` as this hotkey's commitment (signed by the hotkey)."""

    @abstractmethod
    def commitments(self, block: int | None = None) -> dict[str, Commitment]:
        """Every hotkey registered at the end of `block` (now by default), with its latest commitment then.

        A commitment replaced later still reads as it stood at `block`, so anyone can check what was
        anchored before a deadline. Raises `ChainError("BlockNotYetProduced")` for a block in the
        future and `ChainError("BlockUnavailable")` for one whose state the node no longer serves."""

    @abstractmethod
    def registrations(self, block: int | None = None) -> dict[str, int]:
        """Each hotkey registered at the end of `block` (now by default), with its uid then.

        Raises `ChainError("BlockNotYetProduced")` for a block in the future and
        `ChainError("BlockUnavailable")` for one whose state the node no longer serves."""

    @abstractmethod
    def weights(self) -> dict[int, dict[int, float]]:
        """Every uid's weights as they stand on chain (revealed, for commit-reveal subnets), by
        destination uid, normalized to sum to 1; uids that set none are absent."""

    @abstractmethod
    def set_weights(self, wallet: WalletLike, uids: Sequence[int], weights: Sequence[float]) -> None:
        """Set this validator's weights (signed by the hotkey); subtensor's checks apply."""

    def block_time(self) -> float:
        """Seconds per block (subtensor's 12 unless the implementation knows better)."""
        return 12.0

    inclusion_blocks: int = 1
    """How many blocks after the head a call submitted now lands in (subtensor: the next one)."""

    @abstractmethod
    def block_timestamp(self, block: int) -> float:
        """Unix time at which `block` began; for a block not yet produced, the head's plus one block
        time per block in between."""

    @abstractmethod
    def connect_again(self) -> Chain:
        """Another connection to the same subnet, for another thread: a connection is used by one
        thread at a time."""

    def commitment(self, hotkey: str) -> Commitment | None:
        return self.commitments().get(hotkey)

    def wait_for_block(self, block: int, timeout: float | None = None, poll: float = 0.05) -> int:
        """Sleep until the chain reaches `block`; returns the block reached."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            now = self.block()
            if now >= block:
                return now
            if deadline is not None and time.monotonic() >= deadline:
                raise TimeoutError(f"block {block} not reached within {timeout}s (at {now})")
            time.sleep(poll)
