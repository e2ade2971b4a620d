"""Reaching G_w from what the network published: checkpoints and aggregates in validators' stores.

Validators are tried in order of stake (the leader first); the first whose aggregate of a window
passes every check of `distrai.protocol.follow` and reaches its result hash is followed. Every aggregate
refused on the way is remembered with its reason (`take_refusals`), so a validator's report names
the leader it would not follow. A window nobody aggregated leaves the model as it was. A node
that joins late starts from the newest checkpoint that is the result of an aggregate it would
follow (`newest_checkpoint`), or from the run's initial parameters at the run's first window.

Passing over an aggregate out of reach is provisional: a node that did keeps the model it had then,
and goes back to it and waits for what it passed over once the other validators' aggregates show that
the network followed it (`distrai.protocol.rejoin`). Every node then ends on one model after an
outage, whoever's patience ran out first.
"""

from __future__ import annotations

import logging
from collections import defaultdict
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from distrai.chain.base import Chain, ChainError, Metagraph
from distrai.protocol.announce import Announcement, parse_announcement
from distrai.protocol.follow import (
    WindowAnchors,
    anchored_aggregate,
    checked_aggregate,
    read_anchors,
    window_quorum,
)
from distrai.protocol.globalmodel import (
    Contradiction,
    GlobalModel,
    SyncError,
    SyncUnavailable,
    apply_aggregate,
    decode_checkpoint,
    skip_window,
)
from distrai.protocol.layout import checkpoint_prefix, checkpoint_window
from distrai.protocol.quorum import Quorum
from distrai.protocol.rejoin import REJOIN_WINDOWS, BaseVote, Verdict, verdict
from distrai.protocol.remeasure import HeldoutJudge, check_not_worse, heldout_sample, loss_rise, sample_seed
from distrai.protocol.run import RUN_COMMITMENT_PREFIX, parse_run_commitment
from distrai.protocol.runtime import Runtime
from distrai.protocol.windows import aggregate_deadline, window_of
from distrai.store import Store, StoreError, StoreTimeouts, open_store
from distrai.store.outage import OutageLog
from distrai.train.outer import OuterState
from distrai.wire import WireError
from distrai.wire.window_documents import REASON_CHARS, AggregateManifest, Refusal, WindowReport

log = logging.getLogger(__name__)


def aggregate_of(w: int, validator: str) -> str:
    """An anchored aggregate, as the outage log names it."""
    return f"window {w}: {validator[:10]}'s aggregate"


def open_announced(url: str, timeouts: StoreTimeouts | None = None) -> Store:
    """Another node's store, as its announcement names it (opened to read: nothing is created), with
    `timeouts` for an S3 store (a node's, `distrai.store.timeouts.node_store_timeouts`)."""
    return open_store(url, create=False, timeouts=timeouts)


class StoreCache:
    """One open store per announced URL."""

    def __init__(self, opener: Callable[[str], Store] = open_announced):
        self._opener = opener
        self._stores: dict[str, Store] = {}

    def get(self, url: str) -> Store:
        if url not in self._stores:
            self._stores[url] = self._opener(url)
        return self._stores[url]


@dataclass(frozen=True)
class PeerView:
    """The metagraph and each hotkey's announcement, read once."""

    metagraph: Metagraph
    announcements: dict[str, Announcement]

    def validators_by_stake(self) -> list[tuple[str, str]]:
        """(hotkey, store URL) of permitted validators that announced a store, most stake first."""
        ranked = sorted(
            (n for n in self.metagraph.neurons if n.validator_permit and n.hotkey in self.announcements),
            key=lambda n: (-n.stake, n.uid),
        )
        return [(n.hotkey, self.announcements[n.hotkey].store_url) for n in ranked]


def peer_view(chain: Chain) -> PeerView:
    mg = chain.metagraph()
    announcements = {}
    for hotkey, commitment in mg.commitments.items():
        parsed = parse_announcement(commitment.data)
        if parsed is not None:
            announcements[hotkey] = parsed
    return PeerView(mg, announcements)


def run_start_block(chain: Chain, run_id: str) -> int | None:
    """The block at which the subnet owner published this run: its first window starts there."""
    mg = chain.metagraph()
    owner = chain.subnet_owner()
    blocks = [
        c.block
        for hotkey, c in mg.commitments.items()
        if c.data.startswith(RUN_COMMITMENT_PREFIX)
        and (neuron := mg.neuron(hotkey)) is not None
        and neuron.coldkey == owner
        and _run_of(c.data) == run_id
    ]
    return min(blocks) if blocks else None


def _run_of(data: str) -> str | None:
    try:
        return parse_run_commitment(data)
    except ValueError:
        return None


SETTLED_KEPT = 4
"""Windows whose `Settled` a node that never takes them keeps (a validator's)."""


@dataclass(frozen=True)
class Settled:
    """What a node saw of a window when it stepped over it: the validator whose aggregate it
    followed (None when none), that aggregate's (hotkey, weight) pairs, and the signed reports the
    quorum weighed."""

    window: int
    leader: str | None
    accepted: tuple[tuple[str, float], ...]
    reports: Mapping[str, WindowReport]


class Syncer:
    """Moves a node's copy of the global model forward to the window it needs."""

    def __init__(self, runtime: Runtime, chain: Chain, stores: StoreCache, me: str | None = None):
        self.runtime = runtime
        self.me = me
        """this node's hotkey: its own aggregates say nothing of where the network is"""
        self.chain = chain
        self.stores = stores
        self.outages = OutageLog(log)
        """aggregates and reports out of reach, each logged once when the wait starts and once when it ends"""
        self.limits = runtime.config.limits
        self.bytes_received = 0
        """Bytes of aggregates, updates and checkpoints this node has downloaded."""
        self.followed: dict[int, tuple[str, AggregateManifest]] = {}
        """Window → (validator hotkey, aggregate) this node followed."""
        self.refusals: list[Refusal] = []
        self.settled: dict[int, Settled] = {}
        """The windows stepped over since `take_settled` last took them (at most `SETTLED_KEPT`)."""
        self._first_window: int | None = None
        self.unreachable_since: dict[tuple[int, str], int] = {}
        """(window, validator) → the block at which its aggregate or report was first out of reach"""
        self.judge = HeldoutJudge(runtime)
        self._base_loss: tuple[int, str, float] | None = None
        """(window, base hash, its loss on the window's held-out sample), measured once per window"""
        self.passed_over: GlobalModel | None = None
        """G_w of the first window w whose aggregate or report this node passed over out of reach, held
        until it rejoins the network or `REJOIN_WINDOWS` windows pass without a sign that it is behind"""
        self._patient = False
        """while rejoining: nothing out of reach is passed over, it is waited for"""
        self._gave_up = False
        """whether the step under way passed over something out of reach"""

    def first_window(self) -> int:
        """The run's first window (read once: the owner's run commitment does not move)."""
        if self._first_window is None:
            start = run_start_block(self.chain, self.runtime.run_id)
            if start is None:
                return 0
            self._first_window = window_of(self.runtime.config.windows, start)
        return self._first_window

    def initial(self) -> GlobalModel:
        return GlobalModel(self.first_window(), self.runtime.initial_params(), OuterState(momentum={}))

    def catch_up(self, model: GlobalModel | None, target: int) -> GlobalModel:
        """G_target, starting from `model` when it is not ahead of the target."""
        view = peer_view(self.chain)
        if model is None or model.window > target:
            model = self.newest_checkpoint(view, target) or self.initial()
        while model.window < target:
            model = self.step(self.rejoined(model, view), view)
        return model

    def behind(self) -> bool:
        """Whether this node passed over something out of reach that the network may have followed:
        its model is provisional (`distrai.protocol.rejoin`)."""
        return self.passed_over is not None

    def rejoined(self, model: GlobalModel, view: PeerView) -> GlobalModel:
        """`model`, or, for a node that passed over something out of reach and now sees the other
        validators' aggregates of `model.window` built on another model, G_model.window stepped again from
        the model it passed over from, waiting for everything (`SyncUnavailable` while it cannot)."""
        held = self.passed_over
        if held is None or model.window <= held.window:
            return model
        if model.window - held.window > REJOIN_WINDOWS:
            # bounded: aggregates built on a base nobody can reach (a validator's own, or a liar's)
            # must not keep a node waiting for what it passed over for longer than this
            log.info(
                "window %d: %d windows after passing over what was out of reach in window %d, this node "
                "no longer holds the model it had then; its model stands",
                model.window,
                REJOIN_WINDOWS,
                held.window,
            )
            self.passed_over = None
            return model
        seen = verdict(self.base_votes(model.window, view), model.hash, self.me)
        if seen is not Verdict.BEHIND:
            return model
        log.warning(
            "window %d: the other validators' aggregates build on another model than this node's, which "
            "passed over what was out of reach in window %d: going back to window %d and waiting for it",
            model.window,
            held.window,
            held.window,
        )
        again, self._patient = held, True
        try:
            while again.window < model.window:
                again = self.step(again, view)
        finally:
            self._patient = False
        self.passed_over = None
        log.info(
            "window %d: rejoined the network's model (%s, was %s)",
            model.window,
            again.hash[:10],
            model.hash[:10],
        )
        return again

    def base_votes(self, w: int, view: PeerView) -> list[BaseVote]:
        """The model each validator's anchored, signed aggregate of window w was built on, with its
        stake; aggregates that cannot be read now are left out."""
        config = self.runtime.config
        try:
            anchors = read_anchors(self.chain, config, w)
        except SyncError:
            return []
        stake = {n.hotkey: n.stake for n in view.metagraph.neurons}
        votes = []
        for hotkey, url in view.validators_by_stake():
            if hotkey not in anchors.aggregates:
                continue
            try:
                aggregate = anchored_aggregate(
                    config, self.runtime.run_id, w, hotkey, self.stores.get(url), anchors
                )
            except (StoreError, OSError, SyncError, ValueError):
                continue
            votes.append(BaseVote(hotkey, aggregate.base_hash, stake.get(hotkey, 0.0)))
        return votes

    def step(self, model: GlobalModel, view: PeerView) -> GlobalModel:
        """G_{w+1} from the first aggregate of window w that passes every check, or G_w again if
        there is none. An anchored aggregate or report whose store cannot be reached is waited for
        (`SyncUnavailable`, for the caller to try again later) until a window after its
        deadline, and only then passed over: skipping it while others follow it would split the
        network over an outage.

        A validator whose aggregate contradicts its own word (`Contradiction`: it is not what its
        report implies, names updates its miners did not sign, does not recompute, or raises the
        held-out loss) has its report set aside from the quorum for the window: a liar refused on its
        own evidence cannot then outvote the honest aggregates, so the window's aggregates are weighed
        again without it. An aggregate refused for any other reason (built on another model, an
        object missing) leaves its report in the quorum."""
        w = model.window
        anchors = read_anchors(self.chain, self.runtime.config, w)
        self._gave_up = False
        quorum = self.quorum(w, view, anchors)
        set_aside: dict[str, Refusal] = {}
        while True:
            refused: list[Refusal] = []
            for hotkey, url in view.validators_by_stake():
                if hotkey not in anchors.aggregates or hotkey in set_aside:
                    continue
                try:
                    following, aggregate = self.follow(model, w, hotkey, url, anchors, quorum)
                except SyncUnavailable as exc:
                    self.pass_over(w, hotkey, exc)
                    refused.append(Refusal(validator=hotkey, window=w, reason=str(exc)[:REASON_CHARS]))
                    continue
                except Contradiction as exc:
                    set_aside[hotkey] = self.refused(w, hotkey, exc)
                    if hotkey in quorum.reports:
                        break
                    continue
                except (StoreError, WireError, SyncError, ValueError) as exc:
                    refused.append(self.refused(w, hotkey, exc))
                    continue
                log.info(
                    "window %d: applied %s's aggregate of %d updates", w, hotkey[:10], len(aggregate.accepted)
                )
                self.refusals += [*set_aside.values(), *refused]
                self.followed[w] = (hotkey, aggregate)
                self.settle(
                    Settled(
                        w, hotkey, tuple((a.hotkey, a.weight) for a in aggregate.accepted), quorum.reports
                    )
                )
                self.reached(w)
                self.hold_if_passed_over(model)
                return following
            else:
                break
            log.warning(
                "window %d: %s's aggregate contradicts its own word, so its report no longer counts "
                "in the quorum: the window's aggregates are weighed again without it",
                w,
                hotkey[:10],
            )
            quorum = quorum.without(set_aside)
        self.refusals += [*set_aside.values(), *refused]
        log.info("window %d: no aggregate anchored and verifiable; the global model stays", w)
        self.settle(Settled(w, None, (), quorum.reports))
        self.reached(w)
        self.hold_if_passed_over(model)
        return skip_window(model)

    def follow(
        self, model: GlobalModel, w: int, hotkey: str, url: str, anchors: WindowAnchors, quorum: Quorum
    ) -> tuple[GlobalModel, AggregateManifest]:
        """G_{w+1} by `hotkey`'s aggregate of window w, after every check; raises what refused it."""
        config = self.runtime.config
        try:
            store = self.stores.get(url)
        except (StoreError, OSError) as exc:
            raise SyncUnavailable(f"its store {url} cannot be opened: {exc}") from exc
        aggregate = checked_aggregate(config, self.runtime.run_id, w, hotkey, store, anchors, quorum)

        def fetch(sha: str) -> bytes:
            return self._counted(store.get_blob(sha, self.limits.max_update_bytes))

        following = apply_aggregate(
            model, aggregate, fetch, self.runtime.codec, config.outer, self.limits.max_update_bytes
        )
        self.remeasure(w, model, following, hotkey)
        return following, aggregate

    def refused(self, w: int, hotkey: str, exc: Exception) -> Refusal:
        log.warning("window %d: not following %s's aggregate: %s", w, hotkey[:10], exc)
        return Refusal(validator=hotkey, window=w, reason=str(exc)[:REASON_CHARS])

    def pass_over(self, w: int, hotkey: str, exc: SyncUnavailable) -> None:
        """Re-raise `exc` while `hotkey`'s aggregate of window w out of reach is still waited for;
        after the patience, pass it over (the node's model is then provisional: `rejoined`)."""
        now = self.chain.block()
        since = self.unreachable_since.setdefault((w, hotkey), now)
        patience = self.patience(w)
        if self._patient or now < patience or since >= patience:
            self.outages.failed(aggregate_of(w, hotkey), exc)
            raise exc
        self._gave_up = True
        self.outages.gave_up(aggregate_of(w, hotkey), "passed over")
        log.warning(
            "window %d: not following %s's aggregate, out of reach since its deadline: %s",
            w,
            hotkey[:10],
            exc,
        )

    def hold_if_passed_over(self, model: GlobalModel) -> None:
        """Hold G_w, the model a step passed over something out of reach from, unless an earlier one is
        held already (going back to it steps through this window again)."""
        if self._gave_up and self.passed_over is None:
            self.passed_over = model

    def reached(self, w: int) -> None:
        """End the outages of window w's aggregates and reports: the window is settled."""
        for what in [what for what in self.outages.open if what.startswith(f"window {w}: ")]:
            self.outages.answered(what)

    def settle(self, settled: Settled) -> None:
        self.settled[settled.window] = settled
        for w in sorted(self.settled)[:-SETTLED_KEPT]:
            del self.settled[w]

    def take_settled(self) -> list[Settled]:
        """The windows stepped over since the last call, oldest first."""
        taken, self.settled = self.settled, {}
        return [taken[w] for w in sorted(taken)]

    def patience(self, w: int) -> int:
        """The block until which an out-of-reach aggregate or report of window w is waited for.
        Passed over only by a node that was already waiting for it before the patience ran out, as
        every node following live was; a node catching up later waits instead, since it cannot tell
        whether the others reached it."""
        windows = self.runtime.config.windows
        return aggregate_deadline(windows, w) + windows.blocks_per_window

    def quorum(self, w: int, view: PeerView, anchors: WindowAnchors) -> Quorum:
        """The signed reports of window w that the quorum weighs, with the permitted validators' stake
        as this node sees it now (`distrai.protocol.quorum`)."""
        stake = {n.hotkey: n.stake for n in view.metagraph.neurons if n.validator_permit}
        urls = dict(view.validators_by_stake())
        patience = self.patience(w)

        def store_of(validator: str) -> Store:
            if validator not in urls:
                raise SyncError("it announces no store")
            try:
                return self.stores.get(urls[validator])
            except ValueError as exc:
                raise SyncError(f"its store URL {urls[validator]} is not usable: {exc}") from exc

        def still_due(validator: str, exc: SyncUnavailable) -> bool:
            now = self.chain.block()
            since = self.unreachable_since.setdefault((w, validator), now)
            due = self._patient or now < patience or since >= patience
            if due:
                self.outages.failed(f"window {w}: {validator[:10]}'s report", exc)
            else:
                self._gave_up = True
                self.outages.gave_up(f"window {w}: {validator[:10]}'s report", "it does not count")
                log.warning(
                    "window %d: %s's report does not count, out of reach since its deadline: %s",
                    w,
                    validator[:10],
                    exc,
                )
            return due

        return window_quorum(self.runtime.config, self.runtime.run_id, w, anchors, stake, store_of, still_due)

    def remeasure(self, w: int, base: GlobalModel, result: GlobalModel, validator: str) -> None:
        """Refuse (`SyncError`) a result of window w's aggregate that raises the loss on the window's
        held-out sample over its base by more than the run's tolerance (`distrai.protocol.remeasure`)."""
        if result.hash == base.hash:
            return
        follow = self.runtime.config.follow
        try:
            block_hash = self.chain.block_hash(aggregate_deadline(self.runtime.config.windows, w))
        except ChainError as exc:
            raise SyncUnavailable(
                f"the hash of window {w}'s aggregate deadline block cannot be read: {exc}"
            ) from exc
        indices = heldout_sample(
            sample_seed(block_hash, self.runtime.run_id, w),
            self.runtime.data.heldout.shape[0],
            follow.heldout_sequences,
        )
        if self._base_loss is None or self._base_loss[:2] != (w, base.hash):
            self._base_loss = (w, base.hash, self.judge.loss(base.params, indices))
        before = self._base_loss[2]
        after = self.judge.loss(result.params, indices)
        log.info(
            "window %d: %s's result on the held-out sample: loss %.4f -> %.4f (%+.3f%%)",
            w,
            validator[:10],
            before,
            after,
            100 * loss_rise(before, after),
        )
        check_not_worse(before, after, follow.heldout_tolerance)

    def take_refusals(self) -> list[Refusal]:
        """The aggregates refused since the last call, oldest first."""
        taken, self.refusals = self.refusals, []
        return taken

    def _counted(self, data: bytes) -> bytes:
        self.bytes_received += len(data)
        return data

    def newest_checkpoint(self, view: PeerView, target: int) -> GlobalModel | None:
        """The newest checkpoint of a window after the run's first, and at most `target`, whose
        parameters and outer momentum are the result of an aggregate of the window before that this
        node would follow (`tied_results`); of one window, the validators' are tried by stake. None
        when there is none: the node then follows from the run's initial model. A window that no
        aggregate moved (all refused, or none anchored) has no checkpoint this node takes."""
        published = self.published_checkpoints(view, target)
        for window in sorted(published, reverse=True):
            tied = self.tied_results(window - 1, view)
            if not tied:
                log.warning(
                    "checkpoints of window %d not used: no aggregate of window %d that this node would follow",
                    window,
                    window - 1,
                )
                continue
            for hotkey, store, key in published[window]:
                model = self.tied_checkpoint(hotkey, store, key, window, tied)
                if model is not None:
                    return model
        return None

    def published_checkpoints(self, view: PeerView, target: int) -> dict[int, list[tuple[str, Store, str]]]:
        """Window → (validator, its store, key) of every checkpoint after the run's first window and at
        most `target`, validators by stake."""
        first = self.first_window()
        found: dict[int, list[tuple[str, Store, str]]] = defaultdict(list)
        for hotkey, url in view.validators_by_stake():
            what = f"the checkpoint list of {hotkey[:10]}"
            try:
                store = self.stores.get(url)
                keys = store.list(checkpoint_prefix(self.runtime.run_id, hotkey))
            except (StoreError, OSError, ValueError) as exc:
                self.outages.failed(what, exc)  # said once when it starts, once when it ends, not once a try
                continue
            self.outages.answered(what)
            for key in sorted(keys):
                window = checkpoint_window(key)
                if window is not None and first < window <= target:
                    found[window].append((hotkey, store, key))
        return found

    def tied_results(self, w: int, view: PeerView) -> set[tuple[str, str]]:
        """(result hash, outer hash) of every aggregate of window w that passes each check that does
        not need G_w: anchored in time, signed, weighted by its report under the run's rule, the
        miners' own work, and the report quorum."""
        config = self.runtime.config
        try:
            anchors = read_anchors(self.chain, config, w)
            quorum = self.quorum(w, view, anchors)
        except SyncError as exc:
            log.warning("window %d: its aggregates cannot be read: %s", w, exc)
            return set()
        results = set()
        for hotkey, url in view.validators_by_stake():
            if hotkey not in anchors.aggregates:
                continue
            try:
                store = self.stores.get(url)
                aggregate = checked_aggregate(config, self.runtime.run_id, w, hotkey, store, anchors, quorum)
            except (StoreError, OSError, WireError, SyncError, ValueError) as exc:
                log.info("window %d: %s's aggregate vouches for no checkpoint: %s", w, hotkey[:10], exc)
                continue
            results.add((aggregate.result_hash, aggregate.outer_hash))
        return results

    def tied_checkpoint(
        self, hotkey: str, store: Store, key: str, window: int, tied: set[tuple[str, str]]
    ) -> GlobalModel | None:
        """The checkpoint at `key` when it decodes to G_window with a (parameters, outer momentum)
        pair among `tied`; None (the reason logged) when not."""
        try:
            data = self._counted(store.get(key, self.limits.max_checkpoint_bytes))
            model = decode_checkpoint(data, self.runtime.shapes(), self.limits.max_checkpoint_bytes)
        except (StoreError, WireError, SyncError, ValueError) as exc:
            log.warning("checkpoint of %s of window %d unusable: %s", hotkey[:10], window, exc)
            return None
        if model.window != window:
            log.warning(
                "checkpoint of %s of window %d refused: it says it is G_%d", hotkey[:10], window, model.window
            )
            return None
        if (model.hash, model.outer_hash) not in tied:
            what = (
                "its outer momentum is not the one"
                if model.hash in {result for result, _ in tied}
                else "its parameters are not the result"
            )
            log.warning(
                "checkpoint of %s of window %d refused: %s of any aggregate of window %d that this node would follow",
                hotkey[:10],
                window,
                what,
                window - 1,
            )
            return None
        log.info(
            "starting from %s's checkpoint of window %d, the result of an aggregate of window %d",
            hotkey[:10],
            window,
            window - 1,
        )
        return model
