"""An in-memory stand-in for the bittensor SDK's `Substrate`, backed by the embedded chain.

The SDK (bittensor 11) reaches a chain only through its `Substrate` protocol: storage reads,
runtime-API calls, constants, composing calls and submitting signed extrinsics. `MemorySubstrate`
answers those from a `LocalChain`, shaped as the SDK's decoders expect (plain decoded values), and
turns the calls the SDK composes into `LocalChain.submit(...)`. So the SDK's own code (metagraph
assembly, weight conforming and u16 quantization, preflight checks, result and error decoding)
runs in the tests, while the rules stay the embedded chain's: nothing here re-implements them.

It implements the members of the protocol that the adapter's paths use. A read names its block
by hash, as the SDK sends it; commitments and registrations answer as of that block (the embedded
chain keeps their history), every other read answers the current state. With `state_pruning`
set it serves state only for that many blocks behind the head, as a node that is not an archive
node does, and refuses older reads with the error the SDK makes of a node's "state discarded".
Commit-reveal weight commits are kept here, sealed (`timelocked_commits`): they are drand
ciphertext, and opening one needs the beacon's signature for its round, which cannot be had
offline.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import bittensor as bt
from bittensor._transport.errors import StateDiscardedError
from bittensor.result import chain_error_from_substrate_request

from distrai.chain import rules
from distrai.chain.base import ChainError, Hyperparameters
from distrai.chain.local import LocalChain

RAO_PER_TAO = 10**9
U16_MAX = 65535
PER_MILLION = 1_000_000
RAW_FIELD_BYTES = 128
"""The Commitments pallet's `Raw` data variants carry at most 128 bytes each."""
NO_ACCOUNT = "5C4hrfjw9DjXZTzV3MwzrrAr9P1MJhSrvWGWqi1eSuyUpnhM"
"""What subtensor's owner maps hold for a subnet without one: the all-zero account."""


@dataclass(frozen=True)
class ComposedCall:
    """A call the SDK composed: what `compose` returns and `submit` receives."""

    module: str
    function: str
    params: dict[str, Any]


@dataclass(frozen=True)
class TimelockedCommit:
    """A commit-reveal weights commit, kept sealed: its drand round cannot be opened offline."""

    hotkey: str
    netuid: int
    block: int
    commit: bytes
    reveal_round: int
    version: int


def u16_fraction(value: float) -> int:
    """A 0..1 float as the u16 fraction (65535 = 1.0) the runtime APIs carry."""
    return round(min(max(value, 0.0), 1.0) * U16_MAX)


def hyperparameter_entries(hp: Hyperparameters) -> list[dict]:
    """`get_subnet_hyperparams_v3` entries: subtensor's names and raw on-chain encodings."""
    named = {
        "tempo": ("u16", hp.tempo),
        "max_allowed_uids": ("u16", hp.max_uids),
        "max_validators": ("u16", hp.max_validators),
        "immunity_period": ("u16", hp.immunity_period),
        "min_allowed_weights": ("u16", hp.min_allowed_weights),
        "max_weights_limit": ("u16", u16_fraction(hp.max_weight_limit)),
        "weights_rate_limit": ("u64", hp.weights_rate_limit),
        "activity_cutoff": ("u16", hp.activity_cutoff),
        "kappa": ("u16", u16_fraction(hp.kappa)),
        "bonds_moving_avg": ("u64", round(hp.bonds_moving_avg * PER_MILLION)),
        "yuma3_enabled": ("bool", hp.yuma3),
        "commit_reveal_weights_enabled": ("bool", hp.commit_reveal_weights),
        "commit_reveal_period": ("u64", hp.commit_reveal_period),
        "max_regs_per_block": ("u16", hp.max_registrations_per_block),
    }
    return [{"name": name, "value": {tag: value}} for name, (tag, value) in named.items()]


def commitment_fields(data: str) -> list[dict[str, str]]:
    """A commitment's text as the pallet's `Raw` fields, as the SDK decodes them (0x-hex payloads)."""
    raw = data.encode()
    chunks = [raw[i : i + RAW_FIELD_BYTES] for i in range(0, len(raw), RAW_FIELD_BYTES)]
    return [{f"Raw{len(chunk)}": "0x" + chunk.hex()} for chunk in chunks]


def commitment_text(info: Any) -> str:
    """The text in a composed `CommitmentInfo` of `Raw` fields; ChainError if it holds anything else."""
    fields = info.get("fields") if isinstance(info, dict) else None
    if not isinstance(fields, list):
        raise ChainError("BadArguments", f"commitment info must be {{'fields': [...]}}, got {info!r}")
    raw = b""
    for entry in fields:
        if not (isinstance(entry, dict) and len(entry) == 1):
            raise ChainError(
                "BadArguments", f"a commitment field must be one {{variant: value}}, got {entry!r}"
            )
        ((variant, value),) = entry.items()
        payload = bytes.fromhex(value.removeprefix("0x")) if isinstance(value, str) else bytes(value)
        if variant != f"Raw{len(payload)}" or len(payload) > RAW_FIELD_BYTES:
            raise ChainError("BadArguments", f"field {variant} does not hold {len(payload)} raw bytes")
        raw += payload
    try:
        return raw.decode()
    except UnicodeDecodeError as exc:
        raise ChainError("BadArguments", "the embedded chain keeps commitments as UTF-8 text") from exc


class MemorySubstrate:
    """The SDK's chain-access seam over one subnet of a `LocalChain`."""

    def __init__(self, local: LocalChain, state_pruning: int | None = None):
        self.local = local
        self.netuid = local.netuid
        self.state_pruning = state_pruning
        self.token_symbols: dict[int, str] = {}
        self.timelocked_commits: list[TimelockedCommit] = []
        self.storage_reads: list[tuple[str, str]] = []
        """Every storage item read, in order: what the SDK asked the chain."""
        self.submitted: list[ComposedCall] = []
        """Every call submitted, in order, whether the chain took it or not."""
        self._storage: dict[tuple[str, str], Callable[[list], Any]] = {
            ("SubtensorModule", "Uids"): self._uid,
            ("SubtensorModule", "SubnetOwner"): self._owner,
            ("SubtensorModule", "SubnetOwnerHotkey"): self._owner_hotkey,
            ("SubtensorModule", "StakeThreshold"): lambda p: round(
                self.local.hyperparameters().stake_threshold * RAO_PER_TAO
            ),
            ("SubtensorModule", "CommitRevealWeightsEnabled"): lambda p: self._hp(p).commit_reveal_weights,
            ("SubtensorModule", "WeightsSetRateLimit"): lambda p: self._hp(p).weights_rate_limit,
            ("SubtensorModule", "MinAllowedWeights"): lambda p: self._hp(p).min_allowed_weights,
            ("SubtensorModule", "MaxWeightsLimit"): lambda p: u16_fraction(self._hp(p).max_weight_limit),
            ("SubtensorModule", "Tempo"): lambda p: self._hp(p).tempo,
            ("SubtensorModule", "SubnetEpochConsensus"): self._fixed("Yuma"),
            ("SubtensorModule", "LastUpdate"): self._last_update,
            ("SubtensorModule", "ValidatorTrust"): self._validator_trust,
            ("SubtensorModule", "LastEpochBlock"): self._last_epoch_block,
            ("SubtensorModule", "BlocksSinceLastStep"): lambda p: (
                self.local.block() - self._last_epoch_block(p)
            ),
            ("SubtensorModule", "SubnetEpochIndex"): self._epoch_index,
            ("SubtensorModule", "PendingEpochAt"): self._fixed(0),
            ("SubtensorModule", "RevealPeriodEpochs"): lambda p: self._hp(p).commit_reveal_period,
        }
        self._maps: dict[tuple[str, str], Callable[[list, int | None], list[tuple[Any, Any]]]] = {
            ("SubtensorModule", "Uids"): self._uid_rows,
            ("SubtensorModule", "Weights"): self._weight_rows,
            ("Commitments", "CommitmentOf"): self._commitment_rows,
            ("Commitments", "RevealedCommitments"): self._revealed_commitment_rows,
        }
        self._runtime: dict[tuple[str, str], Callable[[list], Any]] = {
            ("SubnetInfoRuntimeApi", "get_metagraph"): self._metagraph,
            ("SubnetInfoRuntimeApi", "get_subnet_hyperparams_v3"): lambda p: hyperparameter_entries(
                self._hp(p)
            ),
            ("SwapRuntimeApi", "current_alpha_price"): self._fixed(RAO_PER_TAO),
        }
        self._calls: dict[tuple[str, str], Callable[[Any, dict], None]] = {
            ("SubtensorModule", "burned_register"): self._burned_register,
            ("SubtensorModule", "add_stake"): self._add_stake,
            ("SubtensorModule", "add_stake_limit"): self._add_stake,
            ("SubtensorModule", "set_mechanism_weights"): self._set_weights,
            ("SubtensorModule", "commit_timelocked_mechanism_weights"): self._commit_timelocked,
            ("Commitments", "set_commitment"): self._set_commitment,
        }

    # -- lifecycle ---------------------------------------------------------------------------

    async def connect(self) -> None:
        return None

    async def close(self) -> None:
        return None

    # -- blocks ---------------------------------------------------------------------------------

    async def block_number(self) -> int:
        return self.local.block()

    async def block_hash(self, block: int | None = None) -> str:
        try:
            return self.local.block_hash(block)
        except ChainError as exc:
            raise bt.ChainError(exc.detail or exc.reason, exc.reason) from exc

    async def block_time(self) -> float:
        return self.local.block_time()

    async def get_block(self, block_number: int | None = None, block_hash: str | None = None) -> dict | None:
        """A block's header and its `Timestamp.set` inherent; None for a block not yet produced."""
        if block_hash is not None:
            raise bt.ChainError("the memory substrate finds blocks by number only")
        number = self.local.block() if block_number is None else block_number
        try:
            block_hash = self.local.block_hash(number)
        except ChainError:
            return None
        parent = self.local.block_hash(number - 1) if number > 0 else "0x" + "00" * 32
        moment_ms = round(self.local.block_timestamp(number) * 1000)
        inherent = {
            "call_module": "Timestamp",
            "call_function": "set",
            "call_args": [{"name": "now", "value": moment_ms}],
        }
        return {
            "header": {"number": number, "hash": block_hash, "parentHash": parent},
            "extrinsics": [{"call": inherent}],
        }

    # -- reads ----------------------------------------------------------------------------------

    async def query(
        self, module: str, storage_function: str, params: list | None = None, block_hash=None
    ) -> Any:
        self._block_at(block_hash)
        self.storage_reads.append((module, storage_function))
        return self._lookup(self._storage, "storage", module, storage_function)(params or [])

    async def query_map(
        self, module: str, storage_function: str, params: list | None = None, block_hash=None
    ):
        at = self._block_at(block_hash)
        self.storage_reads.append((module, storage_function))
        return self._lookup(self._maps, "storage map", module, storage_function)(params or [], at)

    async def runtime_call(self, api: str, method: str, params: list, block_hash=None) -> Any:
        self._block_at(block_hash)
        return self._lookup(self._runtime, "runtime API", api, method)(params)

    def _block_at(self, block_hash: str | None) -> int | None:
        """The number of the block a read names (None: the head), refused as a node would refuse it."""
        if block_hash is None:
            return None
        number = self.local.block_number(block_hash)
        if number is None:
            raise bt.ChainError(f"no block has hash {block_hash}")
        if self.state_pruning is not None and number < self.local.block() - self.state_pruning:
            raise chain_error_from_substrate_request(StateDiscardedError(block_hash))
        return number

    async def constant(self, module: str, name: str) -> Any:
        if (module, name) != ("Commitments", "MaxFields"):
            raise bt.ChainError(f"constant {module}.{name} is not held by the memory substrate")
        return math.ceil(self.local.hyperparameters().commitment_max_bytes / RAW_FIELD_BYTES)

    @staticmethod
    def _lookup(table: dict, kind: str, container: str, name: str) -> Callable:
        handler = table.get((container, name))
        if handler is None:
            raise bt.ChainError(f"{kind} {container}.{name} is not held by the memory substrate")
        return handler

    def _netuid(self, params: list) -> int:
        if not params or params[0] != self.netuid:
            raise bt.ChainError(f"the memory substrate holds subnet {self.netuid} only; asked for {params!r}")
        return self.netuid

    def _fixed(self, value: Any) -> Callable[[list], Any]:
        """A handler answering `value` for this subnet: state the embedded chain does not vary."""
        return lambda params: (self._netuid(params), value)[1]

    def _hp(self, params: list) -> Hyperparameters:
        self._netuid(params)
        return self.local.hyperparameters()

    def _owner(self, params: list) -> str:
        self._netuid(params)
        return self.local.subnet_owner() or NO_ACCOUNT

    def _owner_hotkey(self, params: list) -> str:
        self._netuid(params)
        return self.local.subnet_owner_hotkey() or NO_ACCOUNT

    def _uid(self, params: list) -> int | None:
        self._netuid(params)
        return self.local.metagraph().uid_of(params[1])

    def _uid_rows(self, params: list, at: int | None) -> list[tuple[str, int]]:
        self._netuid(params)
        return list(self.local.registrations(at).items())

    def _weight_rows(self, params: list, at: int | None) -> list[tuple[int, list[tuple[int, int]]]]:
        """Each setter's weights as subtensor keeps them: u16, the largest scaled to 65535."""
        self._netuid(params)
        if at is not None:
            raise bt.ChainError("the memory substrate holds the weights of the head only")
        return [
            (uid, [(dest, round(w / max(row.values()) * U16_MAX)) for dest, w in row.items()])
            for uid, row in self.local.weights().items()
        ]

    def _last_update(self, params: list) -> list[int]:
        """The block each uid last set weights or registered: the anchor of the chain's rate limit."""
        self._netuid(params)
        return [n.last_update for n in self.local.metagraph().neurons]

    def _validator_trust(self, params: list) -> list[int]:
        self._netuid(params)
        return [u16_fraction(n.validator_trust) for n in self.local.metagraph().neurons]

    def _last_epoch_block(self, params: list) -> int:
        self._netuid(params)
        return int(self.local.subnet_info()["last_epoch_block"])

    def _epoch_index(self, params: list) -> int:
        """Epochs run so far: the embedded chain's own count."""
        return rules.epoch_index(self.local.block(), self.netuid, self._hp(params).tempo)

    def _commitment_rows(self, params: list, at: int | None) -> list[tuple[str, dict]]:
        self._netuid(params)
        return [
            (hotkey, {"block": c.block, "deposit": 0, "info": {"fields": commitment_fields(c.data)}})
            for hotkey, c in self.local.commitments(at).items()
        ]

    def _revealed_commitment_rows(self, params: list, at: int | None) -> list[tuple[str, Any]]:
        """None: the embedded chain keeps commitments in plain text, never timelocked."""
        self._netuid(params)
        return []

    def _metagraph(self, params: list) -> dict:
        """The `SubnetInfoRuntimeApi.get_metagraph` record, with the fields the SDK's decoder reads."""
        hp = self._hp(params)
        mg = self.local.metagraph()
        info = self.local.subnet_info()
        last_step = int(info["last_epoch_block"])
        neurons = mg.neurons
        stakes = [round(n.stake * RAO_PER_TAO) for n in neurons]
        return {
            "netuid": self.netuid,
            "name": "",
            "symbol": "",
            "identity": None,
            "network_registered_at": 0,
            "owner_hotkey": info["owner_hotkey"] or NO_ACCOUNT,
            "owner_coldkey": info["owner_coldkey"] or NO_ACCOUNT,
            "block": mg.block,
            "tempo": hp.tempo,
            "last_step": last_step,
            "blocks_since_last_step": mg.block - last_step,
            "num_uids": len(neurons),
            "max_uids": hp.max_uids,
            "hotkeys": [n.hotkey for n in neurons],
            "coldkeys": [n.coldkey for n in neurons],
            "active": [True for _ in neurons],
            "validator_permit": [n.validator_permit for n in neurons],
            "last_update": [n.last_update for n in neurons],
            "block_at_registration": [n.registered_at for n in neurons],
            "emission": [round(n.emission * RAO_PER_TAO) for n in neurons],
            "rank": [u16_fraction(n.rank) for n in neurons],
            "trust": [u16_fraction(n.trust) for n in neurons],
            "consensus": [u16_fraction(n.consensus) for n in neurons],
            "incentives": [u16_fraction(n.incentive) for n in neurons],
            "dividends": [u16_fraction(n.dividends) for n in neurons],
            "alpha_stake": stakes,
            "tao_stake": [0 for _ in neurons],
            "total_stake": stakes,
        }

    # -- calls ----------------------------------------------------------------------------------

    async def compose(self, call) -> ComposedCall:
        module, function, params = call
        self._lookup(self._calls, "call", module, function)
        return ComposedCall(module, function, dict(params))

    async def estimate_fee(self, call, keypair) -> bt.Balance:
        """The embedded chain charges no transaction fees."""
        return bt.Balance.from_rao(0)

    async def submit(self, call: ComposedCall, keypair, **_options) -> bt.ExtrinsicResult:
        """Apply `call` signed by `keypair`; a refusal comes back as a failed result, as from a node."""
        self.submitted.append(call)
        try:
            if call.params.get("netuid") != self.netuid:
                raise ChainError("SubnetNotExists", f"the memory substrate holds subnet {self.netuid} only")
            self._calls[(call.module, call.function)](keypair, call.params)
        except ChainError as exc:
            message = exc.detail or exc.reason
            return bt.ExtrinsicResult(
                success=False, message=message, error=bt.ChainError(message, exc.reason)
            )
        return bt.ExtrinsicResult(success=True, message="Success", block_hash=self.local.block_hash())

    def _burned_register(self, keypair, params: dict) -> None:
        self.local.submit(keypair, "burned_register", hotkey=params["hotkey"])

    def _add_stake(self, keypair, params: dict) -> None:
        """The embedded chain stakes TAO 1:1 into alpha, so a limit price can never bind."""
        amount = int(params["amount_staked"]) / RAO_PER_TAO
        self.local.submit(keypair, "add_stake", hotkey=params["hotkey"], amount=amount)

    def _set_weights(self, keypair, params: dict) -> None:
        if params["mecid"] != 0:
            raise ChainError(
                "MechanismDoesNotExist", f"the embedded chain has mechanism 0 only, not {params['mecid']}"
            )
        self.local.submit(
            keypair,
            "set_weights",
            uids=[int(u) for u in params["dests"]],
            weights=[int(w) for w in params["weights"]],
            version_key=int(params["version_key"]),
        )

    def _commit_timelocked(self, keypair, params: dict) -> None:
        self.timelocked_commits.append(
            TimelockedCommit(
                hotkey=keypair.ss58_address,
                netuid=int(params["netuid"]),
                block=self.local.block(),
                commit=bytes(params["commit"]),
                reveal_round=int(params["reveal_round"]),
                version=int(params["commit_reveal_version"]),
            )
        )

    def _set_commitment(self, keypair, params: dict) -> None:
        self.local.submit(keypair, "set_commitment", data=commitment_text(params["info"]))
