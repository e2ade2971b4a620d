"""Reading a run from the chain and the validators' stores, as a follower would, into `records`.

Every report is read with the run's size cap and opened only if its validator's signature verifies
(`distrai.protocol.follow.signed_body`); an aggregate is shown as followed only if it passes every check a
follower runs before the recomputation (`distrai.protocol.follow.checked_aggregate`). A window's documents
are read again at every refresh until they are final, then kept.
"""

from __future__ import annotations

from collections.abc import Callable

from distrai.chain.base import Chain, ChainError
from distrai.dashboard.records import AggregateCheck, ChainState, Problem, WindowDocs, clip
from distrai.protocol.announce import parse_announcement
from distrai.protocol.follow import (
    WindowAnchors,
    checked_aggregate,
    checked_manifest,
    read_anchors,
    signed_body,
    window_quorum,
)
from distrai.protocol.globalmodel import SyncError, SyncUnavailable, unreachable
from distrai.protocol.layout import report_key
from distrai.protocol.quorum import Quorum
from distrai.protocol.run import RunConfig, run_id
from distrai.protocol.sync import StoreCache, run_start_block
from distrai.protocol.windows import aggregate_deadline, window_of
from distrai.store import NotFound, RetryPolicy, Store, StoreError, open_store
from distrai.wire import sha256_hex
from distrai.wire.window_documents import WindowReport

QUICK_RETRY = RetryPolicy(attempts=2, base_delay_s=0.2, max_delay_s=1.0)
"""A page says a store is down rather than wait for it: few retries, short waits."""


def store_opener(endpoint: str | None = None) -> Callable[[str], Store]:
    """Opens announced store URLs with `QUICK_RETRY`; `endpoint` serves the stores that take one and
    whose URL names none (`distrai.store.store_config`'s defaults)."""

    def open_announced(url: str) -> Store:
        return open_store(url, retry=QUICK_RETRY, defaults={"endpoint": endpoint})

    return open_announced


class Unreachable(Exception):
    """The chain, or a store the page needs, cannot be read now; the message says which and why."""


class RunReader:
    """One run's documents and chain state. Not shared between threads: each holds its own chain."""

    def __init__(
        self,
        config: RunConfig,
        open_chain: Callable[[], Chain],
        stores: StoreCache,
        *,
        store_url: str | None = None,
        history: int = 48,
    ):
        self.config = config
        self.run_id = run_id(config)
        self._open_chain = open_chain
        self._chain: Chain | None = None
        self.stores = stores
        self.store_url = store_url
        """read every validator's documents here instead of the store it announced"""
        self.history = history
        self.first_window: int | None = None
        self._final: dict[int, WindowDocs] = {}
        self._followed: dict[int, tuple[dict[str, AggregateCheck], str | None, int | None]] = {}
        self._opened: dict[tuple[int, str, str], WindowReport] = {}
        """reports already checked, by window, validator and the sha256 of their bytes: a report read
        again unchanged is not verified again"""

    @property
    def chain(self) -> Chain:
        if self._chain is None:
            self._chain = self._open_chain()
        return self._chain

    def chain_state(self) -> ChainState:
        """The chain now; `Unreachable` when it cannot be read (the next call connects again)."""
        try:
            chain = self.chain
            block = chain.block()
            metagraph = chain.metagraph()
            state = ChainState(block, metagraph, chain.weights(), chain.subnet_owner_hotkey())
            if self.first_window is None:
                start = run_start_block(chain, self.run_id)
                if start is not None:
                    self.first_window = window_of(self.config.windows, start)
        except (ChainError, OSError) as exc:
            self._chain = None
            raise Unreachable(f"the chain cannot be read: {clip(str(exc))}") from exc
        return state

    def shown_windows(self, block: int) -> list[int]:
        """The windows the page shows at `block`: the run's, the last `history` of them."""
        if self.first_window is None:
            return []
        current = window_of(self.config.windows, block)
        return list(range(max(self.first_window, current - self.history + 1), current + 1))

    def final(self, window: int, block: int) -> bool:
        """Whether nothing more of `window` can count: a window after its aggregate deadline."""
        cfg = self.config.windows
        return block >= aggregate_deadline(cfg, window) + cfg.blocks_per_window

    def windows(self, state: ChainState) -> tuple[list[WindowDocs], list[str]]:
        """Every shown window's documents, and a banner for each store out of reach."""
        docs, banners = [], []
        stores = self.validator_stores(state)
        for w in self.shown_windows(state.block):
            if w in self._final:
                docs.append(self._final[w])
                continue
            try:
                window = self.window(w, state, stores)
            except Unreachable as exc:
                banners.append(str(exc))
                continue
            if self.final(w, state.block):
                self._final[w] = window
            docs.append(window)
        oldest = window_of(self.config.windows, state.block) - self.history
        self._final = {w: d for w, d in self._final.items() if w >= oldest}
        self._opened = {k: r for k, r in self._opened.items() if k[0] >= oldest}
        self._followed = {w: f for w, f in self._followed.items() if w >= oldest}
        return docs, list(dict.fromkeys(banners))

    def validator_stores(self, state: ChainState) -> dict[str, str]:
        """Where each validator publishes, most stake first: its announcement on chain (or `store_url`)."""
        out = {}
        for hotkey in state.validators():
            commitment = state.metagraph.commitments.get(hotkey)
            announced = parse_announcement(commitment.data) if commitment else None
            if self.store_url:
                out[hotkey] = self.store_url
            elif announced:
                out[hotkey] = announced.store_url
        return out

    def window(self, w: int, state: ChainState, stores: dict[str, str]) -> WindowDocs:
        reports, problems = {}, []
        for validator, url in stores.items():
            try:
                report = self.report(w, validator, url)
            except NotFound:
                continue
            except SyncError as exc:
                problems.append(Problem(w, validator, f"its report is not shown: {clip(str(exc))}"))
                continue
            reports[validator] = report
        settled = state.block >= aggregate_deadline(self.config.windows, w)
        aggregates, leader, tokens = self.followed(w, state, stores) if settled else ({}, None, None)
        problems += [
            Problem(w, v, f"followers refuse its aggregate: {a.problem}")
            for v, a in aggregates.items()
            if a.problem
        ]
        return WindowDocs(w, reports, aggregates, leader, tokens, tuple(problems), settled)

    def followed(
        self, w: int, state: ChainState, stores: dict[str, str]
    ) -> tuple[dict[str, AggregateCheck], str | None, int | None]:
        """Window `w`'s anchored aggregates as a follower checks them, the one followed (the first
        that passes, by stake) and the tokens in it; read once, after the aggregate deadline, since
        what the chain anchored before it never changes."""
        if w not in self._followed:
            try:
                anchors = read_anchors(self.chain, self.config, w)
            except SyncUnavailable as exc:
                raise Unreachable(f"the anchors of window {w} cannot be read: {clip(str(exc))}") from exc
            aggregates = self.aggregates(w, stores, anchors, self.quorum(w, state, stores, anchors))
            leader = next((v for v, a in aggregates.items() if a.problem is None), None)
            tokens = self.tokens(w, aggregates[leader], stores[leader], anchors) if leader else None
            self._followed[w] = (aggregates, leader, tokens)
        return self._followed[w]

    def report(self, w: int, validator: str, url: str) -> WindowReport:
        """`validator`'s signed report of window `w`; `NotFound` when it published none, `SyncError`
        naming why it is not shown, `Unreachable` when its store cannot be read now."""
        max_bytes = self.config.limits.max_report_bytes
        try:
            data = self._store(url).get(report_key(self.run_id, w, validator), max_bytes)
        except NotFound:
            raise
        except StoreError as exc:
            if unreachable(exc):
                raise Unreachable(
                    f"the store {clip(url, 120)} of validator {validator} cannot be read: {clip(str(exc))}"
                ) from exc
            raise SyncError(f"its report cannot be read: {exc}") from exc
        key = (w, validator, sha256_hex(data))
        if key not in self._opened:
            report = signed_body(WindowReport, data, max_bytes, self.run_id, w, validator, "its report")
            if report.validator != validator:
                raise SyncError(f"its report names {report.validator} as its validator")
            self._opened = {k: v for k, v in self._opened.items() if k[:2] != key[:2]}
            self._opened[key] = report
        return self._opened[key]

    def quorum(self, w: int, state: ChainState, stores: dict[str, str], anchors: WindowAnchors) -> Quorum:
        """The signed reports of window `w` the quorum weighs, as a follower weighs them
        (`distrai.protocol.quorum`); one out of reach stays pending, so the page says so rather than guess."""
        stake = {n.hotkey: n.stake for n in state.metagraph.neurons if n.validator_permit}

        def store_of(validator: str) -> Store:
            if validator not in stores:
                raise SyncError("it announces no store")
            return self._store(stores[validator])

        return window_quorum(self.config, self.run_id, w, anchors, stake, store_of, lambda *_: True)

    def aggregates(
        self, w: int, stores: dict[str, str], anchors: WindowAnchors, quorum: Quorum
    ) -> dict[str, AggregateCheck]:
        """The aggregates of window `w` the validators anchored on chain, each as a follower checks
        it, most stake first."""
        out = {}
        for validator, url in stores.items():
            if validator not in anchors.aggregates:
                continue
            try:
                aggregate = checked_aggregate(
                    self.config, self.run_id, w, validator, self._store(url), anchors, quorum
                )
            except SyncUnavailable as exc:
                raise Unreachable(
                    f"validator {validator}'s aggregate of window {w} cannot be read: {clip(str(exc))}"
                ) from exc
            except (SyncError, StoreError) as exc:
                out[validator] = AggregateCheck(validator, problem=clip(str(exc)))
                continue
            accepted = tuple((a.hotkey, a.weight) for a in aggregate.accepted)
            out[validator] = AggregateCheck(
                validator, accepted, aggregate.result_hash, base_hash=aggregate.base_hash
            )
        return out

    def tokens(self, w: int, aggregate: AggregateCheck, url: str, anchors: WindowAnchors) -> int | None:
        """Tokens trained in the updates `aggregate` took: their manifests' steps × the batch's
        predicted tokens; None when a manifest cannot be read."""
        try:
            store = self._store(url)
            steps = sum(
                checked_manifest(self.config, self.run_id, w, hotkey, store, anchors.manifests[hotkey]).steps
                for hotkey, _ in aggregate.accepted
            )
        except (SyncError, StoreError, KeyError):
            return None
        return steps * self.config.train.batch_size * (self.config.data.seq_len - 1)

    def _store(self, url: str) -> Store:
        try:
            return self.stores.get(url)
        except (StoreError, ValueError) as exc:
            raise SyncError(f"its store {clip(url, 120)} cannot be opened: {exc}") from exc
