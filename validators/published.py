"""Signed documents each validator publishes about a window in its own store (its measurements, its
replay receipts, its findings), read back by the others."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TypeVar

from distrai.chain.base import Metagraph
from distrai.protocol.announce import parse_announcement
from distrai.protocol.runtime import Runtime
from distrai.protocol.sync import StoreCache
from distrai.store import StoreError
from distrai.wire import WireError, open_document
from distrai.wire.window_documents import Measurements, ReplayReceipts, parse_body

Document = TypeVar("Document", Measurements, ReplayReceipts)


def publishing_validators(mg: Metagraph) -> dict[str, str]:
    """The validators whose documents are read: every hotkey with a validator permit whose commitment
    announces a store, by hotkey, with that store's URL. Not only those that anchored the window's
    aggregate in time: a validator slowed past the aggregate deadline has still caught what it caught
    and replayed what it replayed, and each of its documents is checked before it counts."""
    publishers = {}
    for neuron in mg.neurons:
        commitment = mg.commitments.get(neuron.hotkey)
        announcement = None if commitment is None else parse_announcement(commitment.data)
        if neuron.validator_permit and announcement is not None:
            publishers[neuron.hotkey] = announcement.store_url
    return publishers


@dataclass(frozen=True)
class OthersWindow:
    """Where the documents the other validators published about one window are read, and what makes
    one trusted: signed by its validator, registered now, for this run and window, within the size cap."""

    stores: StoreCache
    urls: Mapping[str, str]
    """validator → its store's URL, the reading validator left out"""
    run_id: str
    window: int
    max_bytes: int
    is_registered: Callable[[str], bool]

    @classmethod
    def of(cls, runtime: Runtime, stores: StoreCache, mg: Metagraph, window: int, me: str) -> OthersWindow:
        """Window `window` of every validator `publishing_validators(mg)` names but `me`."""
        return cls(
            stores,
            {v: url for v, url in publishing_validators(mg).items() if v != me},
            runtime.run_id,
            window,
            runtime.config.limits.max_manifest_bytes,
            lambda hk: mg.uid_of(hk) is not None,
        )


def read_published(
    others: OthersWindow, key_of: Callable[[str], str], model: type[Document]
) -> dict[str, Document]:
    """Validator → its document of the window at `key_of(validator)` in its store, parsed as `model`
    and signed by that validator for it; a missing, unreadable or forged one, or one that names another
    validator, is left out."""
    found = {}
    for validator, url in sorted(others.urls.items()):
        try:
            data = others.stores.get(url).get(key_of(validator), others.max_bytes)
            doc = open_document(
                data,
                max_bytes=others.max_bytes,
                is_registered=others.is_registered,
                run_id=others.run_id,
                window=others.window,
                signer=validator,
            )
            parsed: Document = parse_body(model, doc.body)
        except (StoreError, WireError, ValueError):
            continue
        if parsed.validator == validator:
            found[validator] = parsed
    return found
