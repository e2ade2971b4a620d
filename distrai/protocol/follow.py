"""What a node checks before it follows a validator's aggregate: nothing in it may be the
aggregator's own choice, and nothing in it may rest on the aggregator's word alone.

- **Anchored.** The aggregate is the one whose sha256 the validator's chain commitment held
  before the window's aggregate deadline (an aggregate published or changed later never counts).
- **Miners' own work.** Every accepted update is the exact blob whose hash its miner signed in
  the manifest that the miner's chain commitment held before the commit deadline: the aggregate
  names that manifest's hash, the follower fetches the manifest (content-addressed, from the
  aggregator's store), checks the anchor, the miner's signature, the run and the window, and
  that the manifest names the accepted blob.
- **Weights by the rule.** The aggregate names the hash of the validator's signed report of the
  window; the accepted updates and their weights must be exactly what the run's rule
  (`distrai.protocol.aggregation.accepted_by_rule`) gives from that report's verdicts, scores and
  measured gains, so an update the report rejected, or any other weighting, is refused.
- **The report quorum.** Every accepted update must not be failed by the signed reports of
  validators holding at least as much stake as those that passed it, and no update the reports owe a
  place may be left out (`distrai.protocol.quorum`, "No censoring"): the reports that count are
  those named by the aggregates anchored on chain for the window (`window_quorum`), less those of
  validators whose own aggregate this node refused on a check of its own word
  (`distrai.protocol.sync`).
- **Recomputed.** Applying the outer step to the follower's own G_w must reach the aggregate's
  result hash and outer-momentum hash (`distrai.protocol.globalmodel.apply_aggregate`).
- **Re-measured.** The result must not raise the loss on a sample of the held-out split over its
  base by more than the run's tolerance (`distrai.protocol.remeasure`; `distrai.protocol.sync` runs it, as it needs
  G_w).

Any failure raises `SyncError` with the reason (`Contradiction` when the aggregate contradicts its
aggregator's own word); the follower then tries the next validator by stake and names the refused
one in its own report.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass

from distrai.chain.base import Chain, ChainError
from distrai.protocol.aggregation import Scored, accepted_by_rule
from distrai.protocol.announce import anchored_aggregates, committed_updates
from distrai.protocol.globalmodel import Contradiction, SyncError, SyncUnavailable, fetch_failed
from distrai.protocol.layout import aggregate_key, report_key
from distrai.protocol.quorum import Quorum
from distrai.protocol.run import RunConfig
from distrai.protocol.run import run_id as run_id_of
from distrai.protocol.windows import aggregate_deadline, commit_deadline, reveal_seed, window_start
from distrai.store import Store, StoreError
from distrai.wire import WireError, open_document, sha256_hex
from distrai.wire.verdicts import Number
from distrai.wire.window_documents import AggregateManifest, UpdateManifest, WindowReport, parse_body


@dataclass(frozen=True)
class WindowAnchors:
    """What the chain fixed for one window before its deadlines, by hotkey."""

    manifests: dict[str, str]
    """miner → sha256 of its update manifest, as committed before the commit deadline"""
    aggregates: dict[str, str]
    """validator → sha256 of its aggregate, as committed before the aggregate deadline"""
    seed: bytes
    """the window's challenge seed (from the hash of the block at the commit deadline): the rule's tie-break"""


def read_anchors(chain: Chain, config: RunConfig, window: int) -> WindowAnchors:
    """The window's anchors, read from the chain as it stood at the block before each deadline."""
    cfg = config.windows
    first = window_start(cfg, window)
    commit_end, aggregate_end = commit_deadline(cfg, window), aggregate_deadline(cfg, window)
    try:
        at_commit = chain.commitments(block=commit_end - 1)
        at_aggregate = chain.commitments(block=aggregate_end - 1)
        seed = reveal_seed(chain.block_hash(commit_end), run_id_of(config), window)
    except ChainError as exc:
        raise SyncUnavailable(f"the chain's commitments of window {window} cannot be read: {exc}") from exc
    manifests = committed_updates(at_commit, window, lambda b: first <= b < commit_end)
    aggregates = anchored_aggregates(at_aggregate, window, lambda b: first <= b < aggregate_end)
    return WindowAnchors(
        # Both lists hold only announcements with that anchor: the filters say so again for the types.
        manifests={hk: a.manifest_sha256 for hk, a in manifests.items() if a.manifest_sha256 is not None},
        aggregates={hk: a.aggregate_sha256 for hk, a in aggregates.items() if a.aggregate_sha256 is not None},
        seed=seed,
    )


def _registered_then(_hotkey: str) -> bool:
    """Signers of a past window's documents are vouched for by their anchors on chain, which only
    registered hotkeys could write; a miner pruned since still signed its manifest."""
    return True


def anchored_aggregate(
    config: RunConfig, run_id: str, window: int, validator: str, store: Store, anchors: WindowAnchors
) -> AggregateManifest:
    """`validator`'s aggregate of `window` as its anchor on chain names it, signed by it."""
    anchored = anchors.aggregates.get(validator)
    if anchored is None:
        raise SyncError("anchored no aggregate on chain before the aggregate deadline")
    limits = config.limits
    try:
        data = store.get(aggregate_key(run_id, window, validator), limits.max_manifest_bytes)
    except StoreError as exc:
        raise fetch_failed("its anchored aggregate", exc) from exc
    if sha256_hex(data) != anchored:
        raise SyncError("the aggregate in its store is not the one anchored on chain")
    return signed_body(
        AggregateManifest, data, limits.max_manifest_bytes, run_id, window, validator, "its aggregate"
    )


def anchored_report(
    config: RunConfig, run_id: str, window: int, validator: str, store: Store, anchors: WindowAnchors
) -> WindowReport:
    """The signed report that `validator`'s anchored aggregate of `window` names: the anchor ties the
    report to the chain."""
    aggregate = anchored_aggregate(config, run_id, window, validator, store, anchors)
    return _checked_report(config, run_id, window, validator, store, aggregate.report_sha256)


def window_quorum(
    config: RunConfig,
    run_id: str,
    window: int,
    anchors: WindowAnchors,
    stake: Mapping[str, float],
    store_of: Callable[[str], Store],
    still_due: Callable[[str, SyncUnavailable], bool],
) -> Quorum:
    """The reports of `window` that count for the quorum: the one named by each anchored aggregate of
    a validator in `stake` (the permitted validators). One that cannot be read, or is not what its
    aggregate names, does not count; one whose store is out of reach is pending while
    `still_due(validator, error)` says it is still worth waiting for, and does not count after."""
    reports, pending = {}, set()
    for validator in sorted(set(anchors.aggregates) & set(stake)):
        try:
            try:
                store = store_of(validator)
            except (StoreError, OSError, ValueError) as exc:
                raise SyncUnavailable(f"its store cannot be opened: {exc}") from exc
            reports[validator] = anchored_report(config, run_id, window, validator, store, anchors)
        except SyncUnavailable as exc:
            if still_due(validator, exc):
                pending.add(validator)
        except SyncError:
            continue
    return Quorum(stake=dict(stake), reports=reports, pending=frozenset(pending))


def checked_aggregate(
    config: RunConfig,
    run_id: str,
    window: int,
    validator: str,
    store: Store,
    anchors: WindowAnchors,
    quorum: Quorum,
) -> AggregateManifest:
    """`validator`'s aggregate of `window`, after every check but the recomputation (which
    `apply_aggregate` does) and the re-measurement (which needs G_w); SyncError names the first
    that failed."""
    aggregate = anchored_aggregate(config, run_id, window, validator, store, anchors)
    report = _checked_report(config, run_id, window, validator, store, aggregate.report_sha256)
    expected = accepted_by_rule(
        {
            hk: Scored(e.reason is None, e.score, e.numbers.get(Number.DROP_UNSEEN, 0.0))
            for hk, e in report.miners.items()
        },
        config.scoring.aggregate_top_n,
        anchors.seed,
    )
    listed = [(a.hotkey, a.weight) for a in aggregate.accepted]
    if listed != expected:
        raise Contradiction(
            f"its aggregate takes {_describe(listed)}, but its signed report's scores give {_describe(expected)}"
        )
    for accepted in aggregate.accepted:
        if anchors.manifests.get(accepted.hotkey) != accepted.manifest_sha256:
            raise Contradiction(
                f"the manifest it names for {accepted.hotkey} is not the one that miner anchored on chain "
                "before the commit deadline"
            )
        manifest = checked_manifest(config, run_id, window, accepted.hotkey, store, accepted.manifest_sha256)
        if manifest.update.sha256 != accepted.update_sha256:
            raise Contradiction(
                f"it takes an update of {accepted.hotkey} that the miner's signed manifest does not name"
            )
    quorum.check([a.hotkey for a in aggregate.accepted])
    quorum.check_not_censored([a.hotkey for a in aggregate.accepted], config.scoring.aggregate_top_n)
    return aggregate


def _checked_report(
    config: RunConfig, run_id: str, window: int, validator: str, store: Store, digest: str
) -> WindowReport:
    try:
        data = store.get(report_key(run_id, window, validator), config.limits.max_report_bytes)
    except StoreError as exc:
        raise fetch_failed("the report its aggregate names", exc) from exc
    if sha256_hex(data) != digest:
        raise SyncError("its report is not the one its aggregate names")
    report = signed_body(
        WindowReport, data, config.limits.max_report_bytes, run_id, window, validator, "its report"
    )
    if report.validator != validator:
        raise SyncError(f"its report names {report.validator} as its validator")
    return report


def checked_manifest(
    config: RunConfig, run_id: str, window: int, miner: str, store: Store, digest: str
) -> UpdateManifest:
    """The manifest `miner` signed for this run and window, from `store` by its sha256 `digest`."""
    try:
        data = store.get_blob(digest, config.limits.max_manifest_bytes)
    except StoreError as exc:
        raise fetch_failed(f"the manifest of {miner} it names", exc) from exc
    what = f"the manifest of {miner} it names"
    return signed_body(UpdateManifest, data, config.limits.max_manifest_bytes, run_id, window, miner, what)


def signed_body(model, data: bytes, max_bytes: int, run_id: str, window: int, signer: str, what: str):
    """The body of a document `signer` signed for this run and window, as `model`."""
    try:
        doc = open_document(
            data,
            max_bytes=max_bytes,
            is_registered=_registered_then,
            run_id=run_id,
            window=window,
            signer=signer,
        )
        return parse_body(model, doc.body)
    except WireError as exc:
        raise SyncError(f"{what} is not a valid document signed by {signer}: {exc}") from exc


def _describe(pairs: list[tuple[str, float]]) -> str:
    if not pairs:
        return "no update"
    return ", ".join(f"{hotkey[:10]}… at {weight:.4g}" for hotkey, weight in pairs)
