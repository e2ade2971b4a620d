"""The bittensor adapter: the `Chain` interface over the bittensor 11 SDK (`bt.Subtensor`).

Reads go through the SDK's typed reads (the metagraph runtime API, the Commitments pallet, the
subnet hyperparameters); writes go through its intents and raw calls, signed by the wallet's
coldkey (registration, stake) or hotkey (weights, commitments). `set_weights` uses the SDK's
`SetWeights`, which conforms the weights to the subnet (max-weight clip, u16 quantization),
preflights registration and the rate limit, and commits timelock-encrypted weights instead of
setting them when the subnet runs commit-reveal. Every refusal becomes `ChainError(reason)` with
subtensor's error name, and whatever the node sends back is checked before it is trusted, so a
node that omits or garbles a value is a `ChainError` too.

A node's reads ride out an unreachable subtensor node. The SDK reconnects a dropped websocket by
itself and rotates through the network's fallback endpoints; when it gives up (`RpcConnectionError`,
here `ConnectionFailed`: a lite node restarting, a network outage), the read is tried again every
`RETRY_PAUSE_S` for up to `READ_PATIENCE_S`, with one log line when the outage starts and one when
it ends (the node's `distrai.store.outage.OutageLog`), and fails as before past it. The node's stop
signal ends the wait at once. A node that has not reached the chain yet (a wrong
`--subtensor.network`, at start-up) fails at once, as do one-shot commands and the dashboard, which
have no patience. Writes are not tried again: a write whose connection failed may have landed, and
each caller already handles a refused commit or weight set by waiting for its next chance.

`network` is `finney`, `test`, `local` (a subtensor node at ws://127.0.0.1:9944, or
`$BT_CHAIN_ENDPOINT`), or any ws:// or wss:// URL. Tests hand in a `substrate` instead.
"""

from __future__ import annotations

import contextlib
import math
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any, TypeVar

import bittensor as bt
from bittensor import hyperparams
from bittensor.settings import resolve_endpoint

from distrai.chain import rules
from distrai.chain.base import (
    Chain,
    ChainError,
    Commitment,
    Hyperparameters,
    Metagraph,
    Neuron,
    OutageLogLike,
    WalletLike,
)

T = TypeVar("T")

RAW_FIELD_BYTES = 128
"""A Commitments pallet `Raw` field holds at most 128 bytes; longer text spans several fields."""
REGISTRATION_PATIENCE_BLOCKS = 50
"""How many blocks `register` keeps retrying when the subnet's per-block registrations are full."""
MAX_POLL_SECONDS = 1.0
"""The longest pause between two polls of `wait_for_block`, which otherwise polls at a quarter block."""
READ_PATIENCE_S = 600.0
"""How long a node's read tries again through a subtensor node the SDK cannot reach: half a
`gpu-subnet.toml` window (50 blocks of 12 s), so an outage shorter than half a window costs at most
the window it hits. A reveal whose challenge draw waited through an outage from its commit deadline
has the last 19 of its 69 blocks left, what a 150m reveal takes at 100 Mbit/s (docs/reveal-size.md).
A node whose chain stays away longer ends, saying why, for its supervisor to start again
(docs/reliability.md, Notes)."""
RETRY_PAUSE_S = 1.0
"""The pause between two tries of an unreachable node."""

WEIGHT_PREFLIGHT_REASONS: Mapping[bt.ErrorCode, str] = {
    bt.ErrorCode.NOT_REGISTERED: "HotKeyNotRegisteredInSubNet",
    bt.ErrorCode.RATE_LIMITED: "SettingWeightsTooFast",
    bt.ErrorCode.INVALID_ARGUMENT: "WeightVecLengthIsLow",
    bt.ErrorCode.NOT_AUTHORIZED: "NeuronNoValidatorPermit",
}
"""The SDK refuses some weight sets before signing, with a code and no chain error name; these are
the names subtensor gives the same refusals."""
WEIGHT_POOL_ALIASES: Mapping[str, str] = {"RateLimitExceeded": "SettingWeightsTooFast"}
"""The transaction pool reports a weights rate limit as the generic `RateLimitExceeded`."""
RAO_PER_ALPHA = 10**9
NO_ACCOUNT = "5C4hrfjw9DjXZTzV3MwzrrAr9P1MJhSrvWGWqi1eSuyUpnhM"
"""The all-zero account: what subtensor's owner maps answer for a subnet that has none."""


def resolve_network(network: str) -> tuple[str, str]:
    """(label, endpoint) for a network name or a ws:// / wss:// URL; ValueError names the choices."""
    try:
        return resolve_endpoint(network)
    except ValueError as exc:
        raise ValueError(
            f"unknown bittensor network {network!r}: use finney, test, local or a ws(s):// URL"
        ) from exc


def commitment_info(data: str) -> dict[str, list[dict[str, str]]]:
    """`data` as a Commitments `CommitmentInfo`: UTF-8 bytes in `Raw` fields of up to 128 bytes."""
    raw = data.encode()
    chunks = [raw[i : i + RAW_FIELD_BYTES] for i in range(0, len(raw), RAW_FIELD_BYTES)]
    return {"fields": [{f"Raw{len(chunk)}": "0x" + chunk.hex()} for chunk in chunks]}


def checked_weights(uids: Sequence[int], weights: Sequence[float]) -> tuple[list[int], list[float]]:
    """Parallel uid and weight lists, refused with subtensor's names where the arguments are malformed."""
    if len(uids) != len(weights):
        raise ChainError("WeightVecNotEqualSize", f"{len(uids)} uids but {len(weights)} weights")
    clean_uids = [int(u) for u in uids]
    if any(u < 0 for u in clean_uids):
        raise ChainError("UidVecContainInvalidOne", "uids must be non-negative")
    if len(set(clean_uids)) != len(clean_uids):
        raise ChainError("DuplicateUids", "a uid appears twice in the weights")
    clean_weights = [float(w) for w in weights]
    if any(not math.isfinite(w) or w < 0 for w in clean_weights):
        raise ChainError("InvalidWeights", "weights must be finite and non-negative")
    return clean_uids, clean_weights


def whole(name: str, value: Any) -> int:
    """A non-negative integer the node sent for `name`; ChainError for None or anything else."""
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ChainError("BadHyperparameter", f"the chain reported {name} = {value!r}, not a whole number")
    return value


def flag(name: str, value: Any) -> bool:
    """A boolean the node sent for `name` (SCALE bools may decode as 0 or 1)."""
    if isinstance(value, bool):
        return value
    if isinstance(value, int) and value in (0, 1):
        return bool(value)
    raise ChainError("BadHyperparameter", f"the chain reported {name} = {value!r}, not a boolean")


def hyperparameters_from(
    raw: Mapping[str, Any], commitment_fields: Any, stake_threshold_rao: Any
) -> Hyperparameters:
    """`Hyperparameters` from the SDK's raw subnet hyperparameters (subtensor's names and units),
    the Commitments pallet's `MaxFields` and subtensor's global `StakeThreshold` (in rao).

    Fractions come back through the SDK's unit table (u16 and per-million), so they carry the
    chain's quantization. Subtensor limits commitments by space per epoch, not by a block count,
    so `commitment_rate_limit` is 0; `commitment_max_bytes` is what the pallet's fields can hold.
    A missing value is `MissingHyperparameter`; one of the wrong kind is `BadHyperparameter`."""

    def value(name: str) -> Any:
        if name not in raw:
            raise ChainError("MissingHyperparameter", f"the chain reported no {name!r}")
        return raw[name]

    def count(name: str) -> int:
        return whole(name, value(name))

    def fraction(name: str) -> float:
        share = hyperparams.normalized(name, count(name))
        if share is None or not 0.0 <= share <= 1.0:
            raise ChainError(
                "BadHyperparameter", f"the chain reported {name} = {raw[name]!r}, not a fraction"
            )
        return float(share)

    yuma3 = (
        flag("yuma3_enabled", raw["yuma3_enabled"]) if "yuma3_enabled" in raw else count("yuma_version") == 3
    )
    return Hyperparameters(
        tempo=count("tempo"),
        max_uids=count("max_allowed_uids"),
        max_validators=count("max_validators"),
        immunity_period=count("immunity_period"),
        min_allowed_weights=count("min_allowed_weights"),
        max_weight_limit=fraction("max_weights_limit"),
        weights_rate_limit=count("weights_rate_limit"),
        activity_cutoff=count("activity_cutoff"),
        kappa=fraction("kappa"),
        bonds_moving_avg=fraction("bonds_moving_avg"),
        yuma3=yuma3,
        commit_reveal_weights=flag("commit_reveal_weights_enabled", value("commit_reveal_weights_enabled")),
        commit_reveal_period=count("commit_reveal_period"),
        stake_threshold=whole("StakeThreshold", stake_threshold_rao) / RAO_PER_ALPHA,
        commitment_max_bytes=whole("MaxFields", commitment_fields) * RAW_FIELD_BYTES,
        commitment_rate_limit=0,
        max_registrations_per_block=count("max_regs_per_block"),
    )


def account(value: Any) -> str:
    """An account from an owner map: "" for none (absent, or subtensor's all-zero default)."""
    return "" if value is None or str(value) == NO_ACCOUNT else str(value)


def neuron_from(n: bt.MetagraphNeuron, validator_trust: float) -> Neuron:
    """A project `Neuron` from the SDK's metagraph row (stake and emission in alpha)."""
    return Neuron(
        uid=n.uid,
        hotkey=n.hotkey,
        coldkey=n.coldkey,
        stake=n.total_stake.amount,
        validator_permit=n.validator_permit,
        registered_at=n.block_at_registration,
        last_update=n.last_update,
        rank=n.rank,
        trust=n.trust,
        consensus=n.consensus,
        validator_trust=validator_trust,
        incentive=n.incentive,
        dividends=n.dividends,
        emission=n.emission.amount,
    )


def readable_commitments(by_hotkey: Mapping[str, bt.NeuronCommitment]) -> dict[str, Commitment]:
    """The commitments anyone can read now (plain, or timelocked and already revealed)."""
    out = {}
    for hotkey, c in by_hotkey.items():
        if c is not None and c.is_revealed:
            out[hotkey] = Commitment(
                hotkey=hotkey, data=c.value if c.value is not None else c.data, block=c.block
            )
    return out


def refusal(
    error: bt.ChainError | None,
    message: str,
    by_code: Mapping[bt.ErrorCode, str] | None = None,
    aliases: Mapping[str, str] | None = None,
) -> ChainError:
    """A project `ChainError` from the SDK's: its chain error name, else a name for its code."""
    if error is not None and error.name:
        return ChainError((aliases or {}).get(error.name, error.name), message)
    if error is not None and by_code and error.code in by_code:
        return ChainError(by_code[error.code], message)
    code = error.code.value if error is not None else bt.ErrorCode.UNKNOWN.value
    return ChainError(code, message)


@contextlib.contextmanager
def pinned_refusals(block: int | None) -> Iterator[None]:
    """A read pinned to a past block that fails without a chain error name failed for want of that
    block's state (a node prunes old state unless it is an archive node): `BlockUnavailable`."""
    try:
        yield
    except bt.ChainError as exc:
        if block is None or exc.name:
            raise
        raise ChainError(
            "BlockUnavailable", f"the node serves no state for block {block}: {exc.message}"
        ) from exc


@contextlib.contextmanager
def sdk_refusals(
    by_code: Mapping[bt.ErrorCode, str] | None = None, aliases: Mapping[str, str] | None = None
) -> Iterator[None]:
    """Turn the SDK's exceptions into `ChainError`: an unreachable node is `ConnectionFailed`, and
    arguments the SDK refuses before signing are `BadArguments`."""
    try:
        yield
    except bt.ChainError as exc:
        raise refusal(exc, exc.message, by_code, aliases) from exc
    except bt.RpcConnectionError as exc:
        raise ChainError("ConnectionFailed", str(exc)) from exc
    except bt.BittensorError as exc:
        raise ChainError("BadArguments", str(exc)) from exc


def raise_for(result: bt.ExtrinsicResult, aliases: Mapping[str, str] | None = None) -> None:
    if not result.success:
        raise refusal(result.error, result.message, aliases=aliases)


class SubtensorChain(Chain):
    """One subnet of a subtensor chain, through the bittensor SDK.

    `version_key` goes with every weight set; a subnet may require a minimum (its weights version).
    `patience_s` is how long a read waits through an unreachable node (a node's is
    `READ_PATIENCE_S`; 0, the default, fails at once), saying so in `outages` (needed with a
    patience), and `stop` (the node's stop signal) ends that wait. Construction does not connect:
    the first read or write does."""

    def __init__(
        self,
        network: str = "finney",
        netuid: int = 1,
        *,
        substrate: bt.Substrate | None = None,
        version_key: int = 0,
        stop: threading.Event | None = None,
        patience_s: float = 0.0,
        outages: OutageLogLike | None = None,
    ):
        if patience_s > 0 and outages is None:
            raise ValueError("a chain that waits through outages needs an outage log to say so")
        self.network, self.endpoint = resolve_network(network)
        self.netuid = netuid
        self.version_key = version_key
        self.stop = stop or threading.Event()
        self.patience_s = patience_s
        self.outages = outages
        self.reached = False
        """whether a read has been answered here: only an outage of a node once reached is waited through"""
        self._sdk = bt.Subtensor(network, substrate=substrate)
        self._requested, self._substrate = network, substrate

    def close(self) -> None:
        self._sdk.close()

    def connect_again(self) -> SubtensorChain:
        """A new connection to the same endpoint (an injected test substrate is shared), as patient
        as this one once this one has reached the node."""
        again = SubtensorChain(
            self._requested,
            self.netuid,
            substrate=self._substrate,
            version_key=self.version_key,
            stop=self.stop,
            patience_s=self.patience_s,
            outages=self.outages,
        )
        again.reached = self.reached
        return again

    # -- reads ----------------------------------------------------------------------------------

    def _read(self, read: Callable[[], T], block: int | None = None) -> T:
        """`read()` through the SDK, its refusals as `ChainError` (a read pinned to `block` that the
        node has no state for: `BlockUnavailable`); tried again while a node reached before cannot be
        reached now, until `patience_s` has passed or `stop` is set."""
        what = f"the chain at {self.endpoint}"
        give_up_at = time.monotonic() + self.patience_s
        while True:
            try:
                with sdk_refusals(), pinned_refusals(block):
                    value = read()
            except ChainError as exc:
                if exc.reason != "ConnectionFailed" or self.outages is None or not self.reached:
                    raise
                self.outages.failed(what, exc)
                if time.monotonic() >= give_up_at:
                    self.outages.gave_up(what, f"a read waited its {self.patience_s:.0f} s")
                    raise
                if self.stop.wait(RETRY_PAUSE_S):
                    self.outages.gave_up(what, "the node is stopping")
                    raise
                continue
            self.reached = True
            if self.outages is not None:
                self.outages.answered(what)
            return value

    def block(self) -> int:
        return self._read(lambda: self._sdk.block)

    def block_hash(self, block: int | None = None) -> str:
        info = self._read(lambda: self._sdk.block_info(block))
        if info is not None and info.hash is not None:
            return info.hash
        if block is not None and block <= self.block():
            raise ChainError("BlockUnavailable", f"the node serves no block {block}")
        raise ChainError("BlockNotYetProduced", f"block {block} is not on chain yet")

    def block_time(self) -> float:
        """Seconds per block as the SDK detects it from the chain (12 on finney, less on fast-block
        local chains)."""
        return float(self._read(self._sdk.block_time))

    def block_timestamp(self, block: int) -> float:
        """From the `Timestamp.set` inherent of `block`, or of the head plus a block time per block
        for a block not yet produced."""
        head = self.block()
        info = self._read(lambda: self._sdk.block_info(min(block, head)))
        if info is None or info.timestamp is None:
            raise ChainError("BlockUnavailable", f"the node serves no timestamp for block {min(block, head)}")
        return info.timestamp.timestamp() + max(0, block - head) * self.block_time()

    def wait_for_block(self, block: int, timeout: float | None = None, poll: float | None = None) -> int:
        """As `Chain.wait_for_block`; by default it polls every quarter block, or every second if sooner."""
        if poll is None:
            poll = min(MAX_POLL_SECONDS, self.block_time() / 4)
        return super().wait_for_block(block, timeout, poll)

    def hyperparameters(self) -> Hyperparameters:
        raw, fields, threshold = self._read(
            lambda: (
                self._sdk.read("subnet_hyperparameters", netuid=self.netuid),
                self._sdk.constant(bt.constants.Commitments.MaxFields),
                self._sdk.query(bt.storage.SubtensorModule.StakeThreshold),
            )
        )
        if raw is None:
            raise ChainError("SubnetNotExists", f"subnet {self.netuid} does not exist on {self.network}")
        if not isinstance(raw, Mapping):
            raise ChainError(
                "BadHyperparameter", f"the chain reported hyperparameters {raw!r}, not a mapping"
            )
        return hyperparameters_from(raw, fields, threshold)

    def metagraph(self) -> Metagraph:
        def read() -> tuple[Any, Any]:
            view = self._sdk.at()
            # SyncSnapshot sets its namespaces (subnets, ...) with setattr, out of the type checker's sight.
            mg = view.subnets.metagraph(self.netuid)  # type: ignore[attr-defined]
            return mg, view.query(bt.storage.SubtensorModule.ValidatorTrust, [self.netuid]) or []

        mg, trust = self._read(read)
        if mg is None:
            raise ChainError("SubnetNotExists", f"subnet {self.netuid} does not exist on {self.network}")
        vtrust = [hyperparams.ratio_fraction("PerU16", int(t)) for t in trust]
        neurons = tuple(neuron_from(n, vtrust[n.uid] if n.uid < len(vtrust) else 0.0) for n in mg.neurons)
        registered = {n.hotkey: mg.commitments[n.uid] for n in mg.neurons}
        return Metagraph(
            netuid=self.netuid, block=mg.block, neurons=neurons, commitments=readable_commitments(registered)
        )

    def commitments(self, block: int | None = None) -> dict[str, Commitment]:
        """The SDK's commitments, pinned to `block`; a block past the head is refused before the
        node is asked, since a node answers it with the head's state or a nameless error."""
        if block is not None:
            if block < 0:
                raise ChainError("BadBlock", f"block {block} does not exist")
            head = self.block()
            if block > head:
                raise ChainError("BlockNotYetProduced", f"block {block} is in the future (now {head})")
        every = self._read(lambda: self._sdk.subnets.commitments(self.netuid, block=block), block)
        return readable_commitments({hotkey: c for hotkey, c in every.items() if c.uid is not None})

    def registrations(self, block: int | None = None) -> dict[str, int]:
        """The subnet's `Uids` map (hotkey → uid), pinned to `block`."""
        if block is not None:
            head = self.block()
            if block < 0 or block > head:
                raise ChainError(
                    "BadBlock" if block < 0 else "BlockNotYetProduced",
                    f"block {block} is not on chain (now {head})",
                )
        rows = self._read(
            lambda: self._sdk.query_map(bt.storage.SubtensorModule.Uids, [self.netuid], block=block), block
        )
        return {str(hotkey): int(uid) for hotkey, uid in rows}

    def weights(self) -> dict[int, dict[int, float]]:
        """The subnet's `Weights` map: per setter uid, (destination uid, u16 weight) pairs."""
        rows = self._read(lambda: self._sdk.query_map(bt.storage.SubtensorModule.Weights, [self.netuid]))
        out = {}
        for uid, pairs in rows:
            dests, values = [int(d) for d, _ in pairs], [int(v) for _, v in pairs]
            if sum(values) > 0:
                out[int(uid)] = dict(zip(dests, rules.normalized(values), strict=True))
        return out

    def subnet_owner(self) -> str:
        return account(
            self._read(lambda: self._sdk.query(bt.storage.SubtensorModule.SubnetOwner, [self.netuid]))
        )

    def subnet_owner_hotkey(self) -> str:
        return account(
            self._read(lambda: self._sdk.query(bt.storage.SubtensorModule.SubnetOwnerHotkey, [self.netuid]))
        )

    def uid_of(self, hotkey: str) -> int | None:
        uid = self._read(lambda: self._sdk.query(bt.storage.SubtensorModule.Uids, [self.netuid, hotkey]))
        return None if uid is None else int(uid)

    # -- writes ---------------------------------------------------------------------------------

    def register(self, wallet: WalletLike) -> int:
        """Burned registration, retried while the subnet's per-block registrations are full."""
        hotkey = wallet.hotkey.ss58_address
        uid = self.uid_of(hotkey)
        if uid is not None:
            return uid
        call = bt.calls.SubtensorModule.burned_register(netuid=self.netuid, hotkey=hotkey)
        deadline = self.block() + REGISTRATION_PATIENCE_BLOCKS
        while True:
            with sdk_refusals():
                result = self._sdk.submit_call(call, wallet, signer="coldkey")
            try:
                raise_for(result)
                break
            except ChainError as exc:
                if exc.reason != "TooManyRegistrationsThisBlock" or self.block() > deadline:
                    raise
                self.wait_for_block(self.block() + 1)
        uid = self.uid_of(hotkey)
        if uid is None:
            raise ChainError("HotKeyNotRegisteredInSubNet", f"{hotkey} was registered but holds no uid now")
        return uid

    def add_stake(self, wallet: WalletLike, amount: float) -> None:
        """Stake `amount` TAO from the wallet's coldkey onto its hotkey (slippage-protected)."""
        with sdk_refusals():
            intent = bt.intents.AddStake(
                hotkey_ss58=wallet.hotkey.ss58_address, netuid=self.netuid, amount_tao=amount
            )
            raise_for(self._sdk.execute(intent, wallet))

    def commit(self, wallet: WalletLike, data: str) -> None:
        call = bt.calls.Commitments.set_commitment(netuid=self.netuid, info=commitment_info(data))
        with sdk_refusals():
            raise_for(self._sdk.submit_call(call, wallet, signer="hotkey"))

    def set_weights(self, wallet: WalletLike, uids: Sequence[int], weights: Sequence[float]) -> None:
        """Weights through the SDK's `SetWeights`, so its preflight (registration, rate limit) runs
        first whatever the weights. All-zero weights the SDK refuses to send: subtensor would
        refuse the empty vector they become as `WeightVecLengthIsLow`, and so does this."""
        clean_uids, clean_weights = checked_weights(uids, weights)
        with sdk_refusals(WEIGHT_PREFLIGHT_REASONS, WEIGHT_POOL_ALIASES):
            intent = bt.intents.SetWeights(
                netuid=self.netuid, uids=clean_uids, weights=clean_weights, version_key=self.version_key
            )
            try:
                result = self._sdk.execute(intent, wallet)
            except bt.ChainError:
                raise
            except bt.BittensorError as exc:
                if any(w > 0 for w in clean_weights):
                    raise
                raise ChainError("WeightVecLengthIsLow", f"all weights are zero: {exc}") from exc
        raise_for(result, WEIGHT_POOL_ALIASES)
