"""Replay receipts: a replay that was skipped can be told from one that was done, and is not paid.

With `replicas` = 1 each challenged miner has one replayer, whose word is the only deterrent against
faked segments for the miners it was dealt; a validator that passes them without replaying saves a
segment's compute a miner and nobody could tell. So for every segment it replays, a validator
publishes a receipt (`ReplayReceipts`, at `layout.receipts_key`, signed, beside its findings): the
sketch of the end its replay reached, under a key drawn from the window's seed, its own hotkey, the
miner and the segment (`replay_check.receipt_seed`). Nobody knew the key while the miner trained,
it differs from the key of the miner's committed sketches and from every other validator's, so the
receipt is a number only a state at the segment's end gives: the validator's replay, or the miner
itself (an accomplice that trained honestly; then nothing is lost but the validator's pay).

While checking the next window, every validator:
1. reads the other validators' receipts of the window it checked last and replays
   `replay_rechecks` of them again (in expectation: a fraction is drawn), drawn from all of them by that window's seed and its own hotkey
   (`receipt_draw`), from the start of its run of challenged segments (the state the miner
   revealed): its sketch of its own replayed end under the author's key must lie within
   `RECEIPT_SLACK` × the run's replay tolerance of the receipt, relative to the segment's movement
   under that key (bit for bit where the tolerance is 0, on CPU). One that does not is refuted: the
   report names it (`receipt_rechecks`), and the author's measurements are not taken, nor is it paid
   as a worker, here for `ban_windows` windows, as for a refuted measurement
   (`ValidatorState.refuted_until`);
2. pays as workers (`shared_scoring`) only validators whose replay share of that window is covered
   (`uncovered`): for every miner of it whose cheap checks passed here, a receipt for each challenged
   segment or a finding. A validator that skips its replays and publishes nothing loses that
   window's worker pay; its own outage costs it the same, and nothing else.

What a skipped replay costs (the GPU config: V = 16 validators, 16 challenged miners a window,
`replicas` = 1, one segment of 40 steps each, `replay_rechecks` = 0.5, `ban_windows` = 144). Each
validator replays one segment a window, and one of the 15 others' receipts again with probability
1/2; a given receipt is drawn by a given re-checker with probability 1/30, so a faked receipt escapes
all 15 with (29/30)^15 = 0.601 (a validator that fakes every window is caught within 5 windows with
0.921, within 10 with 0.994), and it is caught by 15 × 1/30 = 0.5 re-checkers in expectation. Each
catch costs the faker that re-checker's part of its worker pay for 144 windows; under Yuma Consensus
that part is about the re-checker's share of the stake, 1/16 at equal stakes, 144/16 = 9 windows of
worker pay. A window's worker pay at `validator_share` = 0.01 is 1/16 of 1% of the miners' emission,
0.16 of one miner's pay at 256 equal miners; a faked receipt costs 0.5 × 9 × 0.16 = 0.72
miner-windows in expectation, against the 40 steps saved, 2.2% of an H100 miner's window (1,840
steps): a loss 33 times the saving. Publishing nothing saves the same 2.2% and loses the window's
0.16. The rate is a half, not one, for the link: a re-checked receipt downloads the miner's revealed
start, 2.83 GB at the GPU config (docs/incentives.md), 57 s of a 200-Mbit/s validator's window at
one half. The whole of a worker's work (16 measurements and 15 re-measurements, one replay and half a
re-replay: 0.85% + 2.2% + 1.1% of an H100 miner's window) is 0.042 of a miner-window: skipping all
of it outright loses 0.16 − 0.042 = 0.118 a window.

What is not covered: the re-checks themselves are not re-checked. A validator that writes
"confirmed" without replaying saves 2.2% of a window and weakens the deterrent by 1/15; an honest
majority of re-checkers is assumed, as for the measurements' re-checks.
"""

from __future__ import annotations

import hashlib
import logging
import math
from collections.abc import Collection, Mapping
from dataclasses import dataclass, field
from typing import Final

import torch

from distrai.chain.base import Metagraph
from distrai.protocol.layout import receipts_key
from distrai.protocol.runtime import Runtime
from distrai.protocol.sync import StoreCache
from distrai.protocol.windows import reveal_seed
from distrai.wire import sign_document
from distrai.wire.signed import Signer
from distrai.wire.verdicts import PASS, Check
from distrai.wire.window_documents import REASON_CHARS, Receipt, ReceiptRecheck, Recheck, ReplayReceipts
from validators.held_window import HeldWindow
from validators.published import OthersWindow, read_published
from validators.refused import Refused
from validators.replay_check import receipt_sketch, replayed_ends

log = logging.getLogger("distrai.validator")

CONFIRMED: Final = "confirmed"
REFUTED: Final = "refuted"
NOT_RECHECKED: Final = "not re-checked"
RECEIPT_SLACK = 3.0
"""How far from a receipt a replay of another class may land, in replay tolerances: each of the two
replays may lie a tolerance from the miner's end (twice), and a 64-number sketch measures the
segment's movement to within about a fifth (E‖S·x‖² = ‖x‖², relative spread √(2/64)). A receipt that
no replay backs lies a whole movement away or more: the start's sketch 1, the miner's committed
sketch 10.4 and 25.4 in a local network's run (docs/verification.md)."""


@dataclass(frozen=True)
class ReplayAudit:
    """The other validators' replays of one window, as this validator judged them one window later."""

    window: int | None
    """the window audited; None: not judged here (it did not check the window before)"""
    rechecks: list[ReceiptRecheck] = field(default_factory=list)
    uncovered: frozenset[str] = frozenset()
    """validators with a share of the window's replays that left a miner of it without a receipt or
    a finding: not paid as workers for the window"""

    @property
    def refuted(self) -> set[str]:
        return {r.validator for r in self.rechecks if r.outcome == REFUTED}


NOT_JUDGED: Final = ReplayAudit(None)


def own_receipts(held: HeldWindow, me: str) -> list[Receipt]:
    """This validator's receipts for the replays of its share of the window it checked last."""
    receipts = []
    for miner in sorted(held.basis.shares.get(me, [])):
        verdict = held.verdicts.get(miner)
        for segment, numbers in sorted((verdict.receipts if verdict else {}).items()):
            receipts.append(Receipt(miner=miner, segment=segment, sketch=numbers))
    return receipts


def signed_receipts(keypair: Signer, run_id: str, window: int, receipts: list[Receipt]) -> bytes:
    body = ReplayReceipts(run_id=run_id, window=window, validator=keypair.ss58_address, receipts=receipts)
    return sign_document(keypair, body.body())


def read_receipts(others: OthersWindow) -> dict[str, ReplayReceipts]:
    """The receipts each other validator published for the window; a missing, unreadable or forged
    one is left out (its share is then not covered)."""
    return read_published(
        others, lambda validator: receipts_key(others.run_id, others.window, validator), ReplayReceipts
    )


def recheck_count(seed: bytes, me: str, rate: float) -> int:
    """How many receipts this validator replays again for the window of `seed`: the whole part of
    `rate` always, one more with the probability of its fraction, drawn by the seed and its hotkey."""
    whole = math.floor(rate)
    draw = int.from_bytes(
        hashlib.sha256(b"|".join([b"distrai.recheck_count", seed, me.encode()])).digest()[:8], "big"
    )
    return whole + int(draw < (rate - whole) * (1 << 64))


def receipt_draw(
    seed: bytes, me: str, published: Mapping[str, ReplayReceipts], rate: float
) -> list[tuple[str, Receipt]]:
    """The receipts of the other validators this validator replays again (`recheck_count` of them):
    drawn from all of them by the window's seed and its own hotkey, so nobody knows before the
    window's seed which of its receipts will be checked, nor by whom."""
    count = recheck_count(seed, me, rate)
    pairs = [(v, r) for v, doc in sorted(published.items()) if v != me for r in doc.receipts]

    def rank(pair: tuple[str, Receipt]) -> bytes:
        validator, receipt = pair
        parts = [seed, me.encode(), validator.encode(), receipt.miner.encode(), str(receipt.segment).encode()]
        return hashlib.sha256(b"|".join(parts)).digest()

    return sorted(pairs, key=rank)[:count]


def receipt_distance(mine: torch.Tensor, theirs: torch.Tensor, start: torch.Tensor) -> float:
    """‖mine − theirs‖ / ‖mine − start‖: how far a receipt lies from this validator's replay of the
    same segment, relative to the segment's movement (0.0 for the same numbers)."""
    gap = float((mine - theirs).norm())
    if gap == 0.0:
        return 0.0
    movement = float((mine - start).norm())
    return float("inf") if movement == 0.0 else gap / movement


def recheck_receipt(held: HeldWindow, author: str, receipt: Receipt, tolerance: float) -> ReceiptRecheck:
    """Replay here the segment another validator's receipt is for, and judge the receipt."""
    basis, miner, segment = held.basis, receipt.miner, receipt.segment

    def judged(outcome, why: str) -> ReceiptRecheck:
        return ReceiptRecheck(
            validator=author,
            miner=miner,
            window=held.window,
            segment=segment,
            outcome=outcome,
            reason=why[:REASON_CHARS],
        )

    if miner not in basis.shares.get(author, []):
        return judged(NOT_RECHECKED, "the miner is not in its author's share of the replays")
    verdict = held.verdicts.get(miner)
    if verdict is None or verdict.manifest is None or miner not in held.readers:
        return judged(NOT_RECHECKED, "the miner's committed manifest was not read here")
    challenged = basis.segments(miner, verdict.manifest.n_segments)
    if segment not in challenged:
        return judged(NOT_RECHECKED, "not a segment the window's challenge drew")
    first = segment
    while first - 1 in challenged:
        first -= 1
    try:  # from the start of its run of challenged segments: only that start was revealed
        ends = replayed_ends(basis, verdict, held.readers[miner], list(range(first, segment + 1)))
    except Refused as exc:
        return judged(NOT_RECHECKED, f"the replay could not run here: {exc.why}")
    start, end = ends[segment]
    mine = torch.tensor(receipt_sketch(basis, author, miner, segment, end.params), dtype=torch.float64)
    moved_from = torch.tensor(
        receipt_sketch(basis, author, miner, segment, start.params), dtype=torch.float64
    )
    theirs = torch.tensor(receipt.sketch, dtype=torch.float64)
    if theirs.shape != mine.shape:
        return judged(REFUTED, f"it has {theirs.numel()} numbers, the run's sketch {mine.numel()}")
    distance = receipt_distance(mine, theirs, moved_from)
    if distance <= tolerance:
        return judged(CONFIRMED, f"replayed here to {distance:.3g} of it (tolerance {tolerance:.3g})")
    return judged(
        REFUTED,
        f"replayed here to {distance:.3g} of it, tolerance {tolerance:.3g}: no replay of the segment reached it",
    )


def audit(
    held: HeldWindow,
    me: str,
    published: Mapping[str, ReplayReceipts],
    rate: float,
    replay_tolerance: float,
    found: Collection[tuple[str, str]],
) -> ReplayAudit:
    """The other validators' replays of the held window, judged: `rate` of their `published`
    receipts (those of validators distrusted here left out) replayed again, within `RECEIPT_SLACK` ×
    the run's `replay_tolerance`, and the shares left without a receipt or a finding (`found`: the
    (validator, miner) pairs of the findings read)."""
    seed = reveal_seed(held.basis.inputs.block_hash, held.basis.runtime.run_id, held.window)
    tolerance = RECEIPT_SLACK * replay_tolerance
    judged = [
        recheck_receipt(held, author, receipt, tolerance)
        for author, receipt in receipt_draw(seed, me, published, rate)
    ]
    for r in judged:
        (log.info if r.outcome == CONFIRMED else log.warning)(
            "window %d: %s's receipt for segment %d of %s %s: %s",
            held.window,
            r.validator[:10],
            r.segment,
            r.miner[:10],
            r.outcome,
            r.reason,
        )
    return ReplayAudit(held.window, judged, uncovered(held, me, published, found))


def owed_replays(held: HeldWindow, validator: str) -> dict[str, list[int]]:
    """Miner → the segments `validator` owed a receipt for in the window held: its share's miners
    whose cheap checks passed here and whose store answered."""
    owed = {}
    for miner in held.basis.shares.get(validator, []):
        verdict = held.verdicts.get(miner)
        if verdict is None or verdict.manifest is None or verdict.unread or verdict.withheld:
            continue
        if verdict.verdicts.get(Check.UPDATE) != PASS:
            continue
        owed[miner] = held.basis.segments(miner, verdict.manifest.n_segments)
    return owed


def uncovered(
    held: HeldWindow,
    me: str,
    published: Mapping[str, ReplayReceipts],
    found: Collection[tuple[str, str]],
) -> frozenset[str]:
    """The other validators with a share of the held window's replays that left a miner of it owed a
    replay (`owed_replays`) with neither a receipt for each challenged segment nor a finding
    (`found`: the (validator, miner) pairs of the findings read)."""
    missing = set()
    for validator in held.basis.shares:
        if validator == me:
            continue
        doc = published.get(validator)
        receipted = {(r.miner, r.segment) for r in doc.receipts} if doc else set()
        for miner, segments in owed_replays(held, validator).items():
            if (validator, miner) in found:
                continue
            if not all((miner, s) in receipted for s in segments):
                missing.add(validator)
                break
    return frozenset(missing)


def audit_published(
    runtime: Runtime,
    stores: StoreCache,
    mg: Metagraph,
    w: int,
    me: str,
    held: HeldWindow | None,
    distrusted: set[str],
    rechecks: list[Recheck],
) -> ReplayAudit:
    """Judge the other validators' replays of window w as `me`, which checked it (`held`): replay
    again a drawn few of the receipts of those not `distrusted`, and find whose share lacks a receipt
    or a finding (`rechecks`: the findings of window w, as re-checked here). Not judged when `me`
    did not check window w."""
    if held is None or held.window != w:
        return NOT_JUDGED
    published = read_receipts(OthersWindow.of(runtime, stores, mg, w, me))
    verification = runtime.config.verification
    return audit(
        held,
        me,
        {v: doc for v, doc in published.items() if v not in distrusted},
        verification.replay_rechecks,
        verification.replay_tolerance,
        {(r.validator, r.miner) for r in rechecks},
    )
