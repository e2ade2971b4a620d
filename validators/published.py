"""Signed documents each validator publishes about a window in its own store (its measurements, its
replay receipts), read back by the others."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import TypeVar

from distrai.protocol.sync import StoreCache
from distrai.store import StoreError
from distrai.wire import WireError, open_document
from distrai.wire.window_documents import Measurements, ReplayReceipts, parse_body

Document = TypeVar("Document", Measurements, ReplayReceipts)


def read_published(
    stores: StoreCache,
    urls: Mapping[str, str],
    key_of: Callable[[str], str],
    model: type[Document],
    run_id: str,
    window: int,
    max_bytes: int,
    is_registered: Callable[[str], bool],
) -> dict[str, Document]:
    """Validator → its document of `window` at `key_of(validator)` in its store (`urls`: validator →
    store URL), parsed as `model` and signed by that validator for it; a missing, unreadable or
    forged one, or one that names another validator, is left out."""
    found = {}
    for validator, url in sorted(urls.items()):
        try:
            data = stores.get(url).get(key_of(validator), max_bytes)
            doc = open_document(
                data,
                max_bytes=max_bytes,
                is_registered=is_registered,
                run_id=run_id,
                window=window,
                signer=validator,
            )
            parsed: Document = parse_body(model, doc.body)
        except (StoreError, WireError, ValueError):
            continue
        if parsed.validator == validator:
            found[validator] = parsed
    return found
