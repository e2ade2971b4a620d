"""Who a node is and where it stands (`Seat`): what a miner and a validator are built from.

The builder's `distrai.node.build.Node` is a seat (with the node's work folder, window budget and
store timeouts added), so a role is built from the node its entry point built; tests and tools build
one from their own parts. This module imports nothing heavy: the entry points read it before torch.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from distrai.chain.base import Chain, WalletLike
    from distrai.node.metrics import Metrics
    from distrai.protocol.runtime import Runtime
    from distrai.protocol.sync import StoreCache
    from distrai.store import Store


@dataclass(frozen=True)
class Seat:
    runtime: Runtime
    """the run's config, model and data"""
    chain: Chain
    wallet: WalletLike
    """its hotkey signs what it publishes"""
    store: Store
    """where it publishes"""
    store_url: str
    """the URL the other nodes read it at, as announced on chain"""
    metrics: Metrics | None = None
    """where its metrics records go (None: nowhere)"""
    stores: StoreCache | None = None
    """the other nodes' stores as it opens them (None: with the default timeouts)"""
