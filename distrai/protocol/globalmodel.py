"""The global model G_w, its checkpoints, and the step from G_w to G_{w+1} by an aggregate.

Every node holds the same G_w: the run's initial parameters, then, window after window, the outer
step over the updates the leader's aggregate accepted. `apply_aggregate` refuses an aggregate that
does not start from this node's G_w or does not land on the hashes it names (the parameters' and the
outer momentum's), so nodes never drift apart silently.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass

import torch

from distrai.codec import Codec, CodecError
from distrai.protocol.run import OuterConfig as RunOuterConfig
from distrai.protocol.runtime import params_hash
from distrai.protocol.update import decode_update
from distrai.store import StoreError
from distrai.store.base import IntegrityError, NotFound, TooLarge
from distrai.train.outer import Contribution, OuterConfig, OuterState, outer_state_hash, outer_step
from distrai.train.tensorfile import RecordError, decode_tensors, encode_tensors
from distrai.wire import WireError
from distrai.wire.blob_records import CheckpointRecord
from distrai.wire.window_documents import AggregateManifest


class SyncError(Exception):
    """An aggregate or checkpoint this node cannot follow, with the reason."""


class Contradiction(SyncError):
    """An aggregate that contradicts its aggregator's own signed word (its report's verdicts and gains,
    the miners' manifests, the result it names) or raises the held-out loss: evidence against the
    aggregator, whose report then no longer counts in the window's quorum (`distrai.protocol.sync`)."""


class SyncUnavailable(SyncError):
    """A store that holds what a node must read could not be reached: nothing is wrong with what
    was published, so the node tries again later rather than refusing it."""


def unreachable(exc: Exception) -> bool:
    """Whether a store error says the store could not be reached (not that an object is missing,
    too large, or not what its hash says)."""
    return isinstance(exc, StoreError) and not isinstance(exc, NotFound | TooLarge | IntegrityError)


def fetch_failed(what: str, exc: Exception) -> SyncError:
    """The error for a failed read of `what`: `SyncUnavailable` when the store was unreachable."""
    return (SyncUnavailable if unreachable(exc) else SyncError)(f"{what} cannot be fetched: {exc}")


@dataclass(frozen=True)
class GlobalModel:
    window: int
    """These parameters are G_window: the base every miner trains from in `window`."""
    params: dict[str, torch.Tensor]
    outer: OuterState

    @property
    def hash(self) -> str:
        return params_hash(self.params)

    @property
    def outer_hash(self) -> str:
        """The hash of the outer momentum and step count, which the aggregate that made G_window names."""
        return outer_state_hash(self.outer)


def outer_config(run_outer: RunOuterConfig) -> OuterConfig:
    return OuterConfig(
        lr=run_outer.lr,
        momentum=run_outer.momentum,
        nesterov=run_outer.nesterov,
        clip_to_median_norm=run_outer.clip_to_median_norm,
    )


def apply_aggregate(
    model: GlobalModel,
    aggregate: AggregateManifest,
    fetch_blob: Callable[[str], bytes],
    codec: Codec,
    config: RunOuterConfig,
    max_update_bytes: int,
) -> GlobalModel:
    """G_{w+1} from G_w and the aggregate of window w."""
    if aggregate.window != model.window:
        raise SyncError(f"aggregate is for window {aggregate.window}, the model is at {model.window}")
    if aggregate.base_hash != model.hash:
        raise SyncError(f"aggregate of window {aggregate.window} starts from another model")
    shapes = {name: tuple(t.shape) for name, t in model.params.items()}
    contributions = []
    for accepted in aggregate.accepted:
        try:
            blob = fetch_blob(accepted.update_sha256)
        except StoreError as exc:
            raise fetch_failed(f"update of {accepted.hotkey} in the aggregate", exc) from exc
        try:
            update = decode_update(blob, codec, shapes, max_update_bytes, accepted.hotkey, aggregate.window)
        except (WireError, CodecError) as exc:
            raise SyncError(f"update of {accepted.hotkey} in the aggregate is unreadable: {exc}") from exc
        contributions.append(
            Contribution(key=accepted.hotkey, pseudo_gradient=update, weight=accepted.weight)
        )
    result = outer_step(model.params, contributions, model.outer, outer_config(config))
    following = GlobalModel(window=model.window + 1, params=result.params, outer=result.state)
    if following.hash != aggregate.result_hash:
        raise Contradiction(
            f"applying the aggregate of window {aggregate.window} does not reach its result hash"
        )
    if following.outer_hash != aggregate.outer_hash:
        raise Contradiction(
            f"applying the aggregate of window {aggregate.window} does not reach the outer momentum it names"
        )
    return following


def skip_window(model: GlobalModel) -> GlobalModel:
    """A window without an aggregate leaves the model and the outer momentum as they were."""
    return GlobalModel(window=model.window + 1, params=model.params, outer=model.outer)


def encode_checkpoint(model: GlobalModel) -> bytes:
    tensors = {f"param/{k}": v for k, v in model.params.items()}
    tensors.update({f"momentum/{k}": v for k, v in model.outer.momentum.items()})
    return encode_tensors(tensors, CheckpointRecord(window=model.window, outer_step=model.outer.step))


def decode_checkpoint(data: bytes, shapes: Mapping[str, tuple[int, ...]], max_bytes: int) -> GlobalModel:
    """A published checkpoint, checked against the model's parameter names and shapes."""
    try:
        tensors, record = decode_tensors(data, CheckpointRecord, max_bytes=max_bytes)
    except RecordError as error:
        raise SyncError(str(error)) from None
    params = {k.removeprefix("param/"): v for k, v in tensors.items() if k.startswith("param/")}
    momentum = {k.removeprefix("momentum/"): v for k, v in tensors.items() if k.startswith("momentum/")}
    if len(params) + len(momentum) != len(tensors):
        raise SyncError("checkpoint holds tensors that are neither parameters nor momentum")
    for what, group in (("parameters", params), ("momentum", momentum)):
        if group and {k: tuple(v.shape) for k, v in group.items()} != dict(shapes):
            raise SyncError(f"checkpoint {what} do not match the model's names and shapes")
        if any(v.dtype != torch.float32 or not bool(torch.isfinite(v).all()) for v in group.values()):
            raise SyncError(f"checkpoint {what} must be finite float32")
    if not params:
        raise SyncError("checkpoint holds no parameters")
    return GlobalModel(
        window=record.window, params=params, outer=OuterState(momentum=momentum, step=record.outer_step)
    )
