"""A validator's aggregate of a window: the updates the run's rule takes from its verdicts
(`distrai.protocol.aggregation.accepted_by_rule`), the outer step they make from the window's model,
and the manifest that names them, the report they follow from and the model they reach. Pure; the
validator publishes the accepted blobs, signs and publishes the manifest and anchors it on chain.
Next window, its own aggregate is compared with the one the network followed (`leader_agreement`)."""

from __future__ import annotations

import logging
from collections.abc import Callable

from distrai.protocol.aggregation import Scored, accepted_by_rule
from distrai.protocol.globalmodel import GlobalModel, outer_config
from distrai.protocol.runtime import Runtime, params_hash
from distrai.protocol.windows import reveal_seed
from distrai.train.outer import Contribution, outer_state_hash, outer_step
from distrai.wire import sha256_hex
from distrai.wire.verdicts import Number
from distrai.wire.window_documents import AcceptedUpdate, AggregateManifest
from validators.checks import MinerVerdict
from validators.held_window import HeldWindow
from validators.validator_state import OwnAggregate

log = logging.getLogger("distrai.validator")

Tamper = Callable[[list[AcceptedUpdate], list[Contribution]], tuple[list[AcceptedUpdate], list[Contribution]]]
"""What a leader does to its accepted list and contributions before the outer step (honest: nothing;
`validators.leader_adversaries`)."""


def chosen_updates(
    runtime: Runtime, held: HeldWindow, verdicts: list[MinerVerdict]
) -> list[tuple[MinerVerdict, float]]:
    """The verdicts whose updates the run's rule takes, each with its weight, ties broken by the
    window's seed."""
    by_hotkey = {v.hotkey: v for v in verdicts}
    seed = reveal_seed(held.basis.inputs.block_hash, runtime.run_id, held.window)
    chosen = accepted_by_rule(
        {v.hotkey: Scored(v.passed, v.score, v.numbers.get(Number.DROP_UNSEEN, 0.0)) for v in verdicts},
        runtime.config.scoring.aggregate_top_n,
        seed,
    )
    return [(by_hotkey[hk], weight) for hk, weight in chosen]


def aggregate_manifest(
    runtime: Runtime,
    w: int,
    model: GlobalModel,
    report: bytes,
    chosen: list[tuple[MinerVerdict, float]],
    tamper: Tamper,
) -> AggregateManifest:
    """The aggregate of window w: the `chosen` updates applied to `model` by the outer step, named
    with the report they follow from."""
    entries, weighted = [], []
    for v, weight in chosen:
        assert v.manifest_bytes is not None and v.manifest is not None and v.update is not None, (
            "an accepted update passed its checks"
        )
        entries.append(
            AcceptedUpdate(
                hotkey=v.hotkey,
                manifest_sha256=sha256_hex(v.manifest_bytes),
                update_sha256=v.manifest.update.sha256,
                weight=weight,
            )
        )
        weighted.append(Contribution(v.hotkey, v.update, weight))
    listed, contributions = tamper(entries, weighted)
    result = outer_step(model.params, contributions, model.outer, outer_config(runtime.config.outer))
    return AggregateManifest(
        run_id=runtime.run_id,
        window=w,
        base_hash=model.hash,
        report_sha256=sha256_hex(report),
        accepted=listed,
        result_hash=params_hash(result.params),
        outer_hash=outer_state_hash(result.state),
    )


def leader_agreement(
    me: str, w: int, mine: OwnAggregate | None, followed: tuple[str, AggregateManifest] | None
) -> float | None:
    """1.0 when the aggregate followed for window w (its validator, the aggregate) accepted the same
    updates with the same result as `mine`, this validator's own, 0.0 when not; None when there is
    nothing to compare. Said in the log when the leader is another validator."""
    if mine is None or mine.window != w or followed is None:
        return None
    leader, theirs = followed
    same = (
        theirs.result_hash == mine.result_hash and sorted(a.hotkey for a in theirs.accepted) == mine.accepted
    )
    if leader != me:
        if same:
            log.info("window %d: the leader's aggregate matches this validator's", w)
        else:
            log.warning(
                "window %d: the leader %s accepted other updates or reached another model", w, leader[:10]
            )
    return 1.0 if same else 0.0
