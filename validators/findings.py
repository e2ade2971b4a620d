"""Findings: one validator's catch, re-checked and adopted by the others.

The validators share each window's replays (`distrai.protocol.windows.replay_shares`), so a cheater is
replayed by `replicas` validators, not all of them. The rest would go on weighting it, and Yuma's
consensus clips a weight that a minority of the stake sets, its zero included. So a validator that
catches a miner in a replay check (`states`, `replay`, `trajectory`) publishes a signed finding at
`finding_key`, naming the manifest, the segments and the keys of the miner's store it rests on.

While checking the next window, every validator reads the findings of the window before from
every validator with a permit, in the store its announcement names (`published.publishing_validators`), and
re-checks each against its own view of that
window (`HeldWindow`): its own base, its own listing of the miner's store at the reveal deadline,
the manifest the miner committed on chain. It replays the same segments itself, so it trusts the
finding's author for nothing.
- adopted: the re-check fails the miner too; the miner is barred here and its average zeroed;
- refuted: the re-check passes; the finding is ignored and the report names its author;
- not re-checked: the re-check could not run (the miner's store out of reach, the window not
  checked here, a finding outside its author's share).

Only a finding on a miner of its author's share is re-checked, so no validator can make the others
replay at will: at most `replicas` re-checks per challenged miner and window.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable
from typing import Final, Literal, cast

from distrai.chain.base import Metagraph
from distrai.codec import CodecError
from distrai.protocol.layout import finding_key, findings_prefix, manifest_key, state_key, trajectory_key
from distrai.protocol.runtime import Runtime
from distrai.protocol.sync import StoreCache
from distrai.protocol.update import decode_update
from distrai.protocol.windows import run_starts
from distrai.store import StoreError
from distrai.wire import WireError, open_document, sha256_hex, sign_document
from distrai.wire.signed import Signer
from distrai.wire.verdicts import PASS, REPLAY_CHECKS, Check
from distrai.wire.window_documents import REASON_CHARS, Finding, Recheck, ReplayCheckName, parse_body
from validators.checks import MinerVerdict
from validators.held_window import HeldWindow
from validators.published import OthersWindow
from validators.replay_check import verify_challenge
from validators.window import WindowBasis
from validators.withheld import reread

log = logging.getLogger("distrai.validator")

ADOPTED: Final = "adopted"
REFUTED: Final = "refuted"
NOT_RECHECKED: Final = "not re-checked"
RecheckOutcome = Literal["adopted", "refuted", "not re-checked"]


def replay_failure(verdict: MinerVerdict) -> Check | None:
    """The replay check a verdict failed as fraud, or None."""
    if not verdict.fraud:
        return None
    return next((c for c in REPLAY_CHECKS if verdict.verdicts.get(c, PASS) != PASS), None)


def finding_body(basis: WindowBasis, validator: str, verdict: MinerVerdict, segments: list[int]) -> dict:
    """The body of the finding on a verdict that failed a replay check as fraud, in the window of
    `basis` (the miner's store as its commitment announced it)."""
    check = replay_failure(verdict)
    if check is None or verdict.manifest_bytes is None:
        raise ValueError(f"{verdict.hotkey} failed no replay check as fraud: nothing to find")
    runtime, window, miner = basis.runtime, basis.number, verdict.hotkey
    k, run_id = runtime.inner.segment_steps, runtime.run_id
    evidence = [
        manifest_key(run_id, window, miner),
        *(state_key(run_id, window, miner, s * k) for s in run_starts(segments)),
        trajectory_key(run_id, window, miner),
    ]
    return Finding(
        run_id=run_id,
        window=window,
        validator=validator,
        miner=miner,
        check=cast(ReplayCheckName, check),  # one of REPLAY_CHECKS, the Literal's strings
        reason=verdict.verdicts[check][:REASON_CHARS],
        manifest_sha256=sha256_hex(verdict.manifest_bytes),
        store_url=basis.announcements[miner].store_url,
        segments=segments,
        evidence=evidence,
        withheld=verdict.withheld,
    ).body()


def publish_findings(
    runtime: Runtime, held: HeldWindow, keypair: Signer, put: Callable[[str, bytes], bool]
) -> int:
    """Sign and publish a finding for every miner of the validator's share that failed a replay
    check as fraud; returns how many were published."""
    me = keypair.ss58_address
    published = 0
    for miner in held.basis.shares.get(me, []):
        verdict = held.verdicts.get(miner)
        if verdict is None or replay_failure(verdict) is None:
            continue
        assert verdict.manifest is not None, "only a miner whose manifest passed is replayed"
        segments = held.basis.segments(miner, verdict.manifest.n_segments)
        body = finding_body(held.basis, me, verdict, segments)
        if put(finding_key(runtime.run_id, held.window, me, miner), sign_document(keypair, body)):
            published += 1
    return published


def read_findings(others: OthersWindow) -> list[Finding]:
    """The findings of the window that the other validators published in their stores; an unreadable
    or forged one is logged and skipped."""
    run_id, window, max_bytes = others.run_id, others.window, others.max_bytes
    found = []
    for validator, url in sorted(others.urls.items()):
        try:
            store = others.stores.get(url)
            keys = store.list(findings_prefix(run_id, window, validator))
        except (StoreError, ValueError) as exc:
            log.warning("window %d: the findings of %s could not be listed: %s", window, validator[:10], exc)
            continue
        for key in keys:
            try:
                doc = open_document(
                    store.get(key, max_bytes),
                    max_bytes=max_bytes,
                    is_registered=others.is_registered,
                    run_id=run_id,
                    window=window,
                    signer=validator,
                )
                finding = parse_body(Finding, doc.body)
            except (StoreError, WireError) as exc:
                log.warning("window %d: finding %s is refused: %s", window, key, exc)
                continue
            if finding.validator != validator or key != finding_key(run_id, window, validator, finding.miner):
                log.warning(
                    "window %d: finding %s names another validator or miner than its key", window, key
                )
                continue
            found.append(finding)
    return found


def recheck(runtime: Runtime, held: HeldWindow, finding: Finding, stores: StoreCache) -> Recheck:
    """Judge another validator's finding by replaying what it names, from this validator's own view
    (a finding of withheld objects: by reading them from the miner's store as it is now)."""
    miner = finding.miner

    def judged(outcome: RecheckOutcome, why: str) -> Recheck:
        return Recheck(
            validator=finding.validator,
            miner=miner,
            window=finding.window,
            outcome=outcome,
            reason=why[:REASON_CHARS],
        )

    if finding.window != held.window:
        return judged(NOT_RECHECKED, f"window {finding.window} was not the one checked here last")
    if miner not in held.basis.shares.get(finding.validator, []):
        return judged(NOT_RECHECKED, "the miner is not in its author's share of the replays")
    verdict = held.verdicts.get(miner)
    if verdict is None or verdict.manifest_bytes is None:
        return judged(NOT_RECHECKED, "the miner's committed manifest was not read here")
    if sha256_hex(verdict.manifest_bytes) != finding.manifest_sha256:
        return judged(REFUTED, "it names another manifest than the one the miner committed on chain")
    if finding.withheld:
        return recheck_withheld(runtime, held, miner, stores, judged)
    if verdict.fraud:
        return judged(ADOPTED, f"failed here too: {verdict.reason}")
    if verdict.verdicts.get(Check.UPDATE) != PASS:
        return judged(NOT_RECHECKED, f"the miner's update was not checked here: {verdict.reason}")
    if all(verdict.verdicts.get(c) == PASS for c in REPLAY_CHECKS):
        return judged(REFUTED, "this validator replayed the miner too, and every replay check passed")
    assert verdict.manifest is not None, "a passed update check read the manifest"
    limits = runtime.config.limits
    try:
        blob = held.readers[miner].get_blob(verdict.manifest.update.sha256, limits.max_update_bytes)
        update = decode_update(
            blob, runtime.codec, runtime.shapes(), limits.max_update_bytes, miner, held.window
        )
    except (StoreError, WireError, CodecError) as exc:
        return judged(NOT_RECHECKED, f"the miner's update could not be read again: {exc}")
    replayed = dataclasses.replace(verdict, verdicts={}, numbers={}, fraud=False)
    replayed.update = update
    segments = held.basis.segments(miner, verdict.manifest.n_segments)
    verify_challenge(held.basis, replayed, held.readers[miner], segments, held.basis.sample(miner))
    if replayed.fraud:
        return judged(ADOPTED, f"re-checked: {replayed.reason}")
    if replayed.passed:
        return judged(REFUTED, "re-checked: every replay check passed")
    return judged(NOT_RECHECKED, f"the re-check could not run: {replayed.reason}")


def recheck_published(
    runtime: Runtime, stores: StoreCache, mg: Metagraph, w: int, me: str, held: HeldWindow | None
) -> list[Recheck]:
    """Re-check the findings the other validators published about window w, each said in the log;
    none when this validator (`me`) did not check window w (`held` is another window's, or None)."""
    if w < 0:
        return []
    findings = read_findings(OthersWindow.of(runtime, stores, mg, w, me))
    if findings and (held is None or held.window != w):
        log.warning(
            "window %d: %d findings of other validators not re-checked: this validator did not check that window",
            w,
            len(findings),
        )
        return []
    rechecks = []
    for finding in findings:
        assert held is not None, "the findings of the window held here (checked above)"
        result = recheck(runtime, held, finding, stores)
        rechecks.append(result)
        log.warning(
            "window %d: %s's finding on %s %s: %s",
            w,
            finding.validator[:10],
            finding.miner[:10],
            result.outcome,
            result.reason,
        )
    return rechecks


def barred_by_findings(
    banned_until: dict[str, int], rechecks: list[Recheck], w: int, ban_windows: int
) -> dict[str, int]:
    """Hotkey → the first window it may score again, with the miners of the findings of window w
    adopted here barred for `ban_windows` windows after it."""
    banned = dict(banned_until)
    for r in rechecks:
        if r.outcome == ADOPTED:
            banned[r.miner] = max(banned.get(r.miner, 0), w + 1 + ban_windows)
    return banned


def recheck_withheld(
    runtime: Runtime,
    held: HeldWindow,
    miner: str,
    stores: StoreCache,
    judged: Callable[[RecheckOutcome, str], Recheck],
) -> Recheck:
    """A finding that a challenged miner withheld its reveal: read it now and judge what is there."""
    try:
        store = stores.get(held.basis.announcements[miner].store_url)
    except (StoreError, ValueError) as exc:
        return judged(NOT_RECHECKED, f"the miner's store cannot be opened here: {exc}")
    again = reread(runtime, held, miner, store)
    if again.passed:
        return judged(
            REFUTED, "read here one window later: the withheld reveal is there and passes every check"
        )
    if again.unread:
        return judged(ADOPTED, f"withheld here too, one window later: {again.reason}")
    if again.fraud:
        return judged(ADOPTED, f"read here one window later: {again.reason}")
    return judged(NOT_RECHECKED, f"the re-read could not judge it: {again.reason}")
