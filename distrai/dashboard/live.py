"""The dashboard's background work: the page's records refreshed every few seconds, and the global
model's held-out loss followed once per window in a thread of its own, so no request ever waits on
the chain, a store or a model.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace

from distrai.chain.base import Chain, ChainError
from distrai.dashboard.nodes import NodeMetrics
from distrai.dashboard.reading import RunReader, Unreachable
from distrai.dashboard.records import (
    ChainState,
    MinerPage,
    RunInfo,
    RunView,
    Sample,
    WindowDocs,
    clip,
    miner_page,
    run_view,
)
from distrai.protocol.globalmodel import SyncError
from distrai.protocol.run import RunConfig
from distrai.protocol.sync import run_start_block
from distrai.protocol.windows import activities, window_of
from distrai.store import StoreError

log = logging.getLogger("distrai.dashboard")

REFRESH_FAILED = "the last refresh failed: "
HISTORY_SAMPLES = 2000
"""The most chain samples kept per miner."""


class HeldoutFollower:
    """Builds G_w for each window once it is final and evaluates it on the run's held-out data.

    `build_curve(chain)` makes a `distrai.protocol.heldout.HeldoutCurve`; it loads the model and the data, so
    it runs in this thread, not at start-up."""

    def __init__(
        self, config: RunConfig, run_id: str, open_chain: Callable[[], Chain], build_curve, history: int
    ):
        self.config = config
        self.run_id = run_id
        self.open_chain = open_chain
        self.build_curve = build_curve
        self.history = history
        self.losses: dict[int, float] = {}
        self.status: str | None = None
        """why the curve is not following the run now, if it is not"""

    def next_window(self, curve, chain: Chain) -> int | None:
        """The next window whose model can be built for good, or None."""
        start = run_start_block(chain, self.run_id)
        if start is None:
            return None
        block = chain.block()
        first, current = window_of(self.config.windows, start), window_of(self.config.windows, block)
        w = max(self.losses) + 1 if self.losses else max(first, current - self.history + 1)
        return w if curve.final(w, block) else None

    def run(self, stop: threading.Event, poll: float) -> None:
        curve = None
        while not stop.is_set():
            try:
                if curve is None:
                    chain = self.open_chain()
                    try:
                        curve = self.build_curve(chain)
                    except Exception as exc:  # a model or data that cannot load: said once, not retried
                        log.exception("the held-out loss cannot be computed")
                        self.status = (
                            f"the held-out loss cannot be computed: {type(exc).__name__}: {clip(str(exc))}"
                        )
                        return
                w = self.next_window(curve, chain)
                if w is None:
                    stop.wait(poll)
                    continue
                self.losses[w] = curve.loss(w)
                self.status = None
            except (SyncError, StoreError) as exc:
                self.status = f"the held-out loss waits for a store: {clip(str(exc))}"
                stop.wait(poll)
            except (ChainError, OSError) as exc:
                self.status = f"the held-out loss waits for the chain: {clip(str(exc))}"
                curve = None
                stop.wait(poll)


@dataclass
class Live:
    """The latest records, refreshed by `run` (or `refresh`, once); read by the server at any time."""

    reader: RunReader
    metrics: NodeMetrics
    labels: dict[str, str]
    heldout: HeldoutFollower | None = None
    view: RunView | None = None
    pages: dict[str, MinerPage] = field(default_factory=dict)
    history: dict[str, list[Sample]] = field(default_factory=dict)
    docs: list[WindowDocs] = field(default_factory=list)

    def run_info(self) -> RunInfo:
        config = self.reader.config
        return RunInfo(
            config.name,
            self.reader.run_id,
            config.netuid,
            config.windows.blocks_per_window,
            self.reader.first_window,
        )

    def refresh(self) -> None:
        banners, state = [], None
        try:
            state = self.reader.chain_state()
        except Unreachable as exc:
            banners.append(str(exc))
        if state is not None:
            self.docs, unreachable = self.reader.windows(state)
            banners += unreachable
            if self.reader.first_window is None:
                banners.append(
                    f"the subnet owner has published no commitment of run {self.reader.run_id[:16]}… on subnet "
                    f"{self.reader.chain.netuid}: check --run.config and --netuid"
                )
            self.sample(state)
        if self.heldout is not None and self.heldout.status:
            banners.append(self.heldout.status)
        phases = (
            [f"window {w}: {p.value}" for w, p in activities(self.reader.config.windows, state.block)]
            if state
            else []
        )
        view = run_view(
            self.run_info(),
            state,
            self.docs,
            dict(self.heldout.losses) if self.heldout else {},
            self.labels,
            self.metrics.utilization(),
            phases,
            banners,
            time.time(),
            heldout_on=self.heldout is not None,
        )
        own = self.metrics.miner_windows()
        self.pages = {
            row.hotkey: miner_page(
                row,
                self.docs,
                self.labels,
                self.history.get(row.hotkey, []),
                self.reader.config.scoring.aggregate_top_n,
                own.get(row.hotkey),
            )
            for row in view.miners
        }
        self.view = view

    def sample(self, state: ChainState) -> None:
        """Remember each miner's weight, incentive and earnings when they change (the chain keeps
        only the present)."""
        for neuron in state.metagraph.neurons:
            point = Sample(state.block, state.weight_on(neuron.uid), neuron.incentive, neuron.total_emission)
            series = self.history.setdefault(neuron.hotkey, [])
            if not series or (series[-1].weight, series[-1].incentive, series[-1].earned) != (
                point.weight,
                point.incentive,
                point.earned,
            ):
                series.append(point)
                del series[:-HISTORY_SAMPLES]

    def run(self, stop: threading.Event, every: float) -> None:
        """Refresh every `every` seconds until `stop`. A refresh that fails for a reason nobody
        foresaw is logged with its traceback and shown as a banner; the next one tries again."""
        while not stop.is_set():
            try:
                self.refresh()
            except Exception as exc:  # the page must outlive any one bad refresh
                log.exception("refreshing the dashboard failed")
                if self.view is not None:
                    failed = f"{REFRESH_FAILED}{type(exc).__name__}: {clip(str(exc))}"
                    kept = [b for b in self.view.banners if not b.startswith(REFRESH_FAILED)]
                    self.view = replace(self.view, banners=[*kept, failed])
            stop.wait(every)
