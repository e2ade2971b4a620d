"""The held-out loss of the global model, window by window, rebuilt from what the network published.

G_w (the base of window w) is the run's initial model at the run's first window, then the outer step
of each window's followed aggregate (`distrai.protocol.sync`). Its loss on the run's held-out sequences is
what the local network prints at its end and what the dashboard charts. G_{w+1} is final once window
w's aggregate deadline has passed: the anchors a follower reads are fixed then.
"""

from __future__ import annotations

from distrai.chain.base import Chain
from distrai.protocol.globalmodel import GlobalModel
from distrai.protocol.runtime import Runtime
from distrai.protocol.sync import StoreCache, Syncer
from distrai.protocol.windows import aggregate_deadline
from distrai.train.evaluate import evaluate


class HeldoutCurve:
    """Follows the global model forward and evaluates it; each window's model is built once."""

    def __init__(self, runtime: Runtime, chain: Chain, stores: StoreCache):
        self.runtime = runtime
        self.syncer = Syncer(runtime, chain, stores)
        self.model: GlobalModel | None = None

    def first_window(self) -> int:
        return self.syncer.first_window()

    def final(self, window: int, block: int) -> bool:
        """Whether G_window can be built for good at `block`: the first window's model always can,
        a later one once the window before it passed its aggregate deadline."""
        return window <= self.first_window() or block >= aggregate_deadline(
            self.runtime.config.windows, window - 1
        )

    def loss(self, window: int) -> float:
        """Held-out loss of G_window. Raises `SyncUnavailable` while a store it needs is out of reach."""
        self.model = self.syncer.catch_up(self.model, window)
        self.runtime.load_params(self.model.params)
        return evaluate(self.runtime.model, self.runtime.data.heldout, loss_fn=self.runtime.loss_fn)

    def followed(self, window: int) -> str | None:
        """The validator whose aggregate of `window` the curve followed, once it has."""
        entry = self.syncer.followed.get(window)
        return None if entry is None else entry[0]
