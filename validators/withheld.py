"""Withheld reveals: what a challenged miner committed to and its store would not serve.

A miner learns it is challenged one block after the commit deadline. If an unanswered read cost
it nothing, every cheat caught by a challenge would answer the challenge's reads with store errors
(a 503, say) or refuse to list its store. So a read the store does not answer is tried again until
the validator's read patience runs out (`windows.read_patience`), and once more after a first pass of
reads that ended past it (`Validator.check_window`), and what is still unread then is settled here:

- a challenged miner: **withheld**, treated as fraud: the window scores 0, the hotkey is barred and
  paid nothing, its scores not yet matured are held (`validators.pay`), and a validator whose share
  held the miner publishes a finding that the others re-check by reading the same objects
  themselves (they adopt it when they cannot read them either, or when what they read fails its
  replay). One window later the validator reads them again itself
  (`validators.validator_state.Suspension`): if they are there and pass, the bar is lifted and the
  held scores mature again, so an honest miner whose store was down loses that window's pay,
  nothing more; if they are still unread, or fail, the bar stands and the held scores and the
  average are forfeited. A validator that restarted since cannot read the hold again (it lost the
  window it checked the miner against) and lifts it: a restart is no evidence against the miner,
  and the other validators' re-checks of its finding still decide (`Validator.reread_withheld`).
- a miner nobody challenged: absent, like a miner that published nothing: the window scores 0.
- a validator that could not reach most of the stores it listed (`own_outage`): its own link is
  down, not the miners', and nothing is counted against anyone.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Collection, Sequence

from distrai.protocol.runtime import Runtime
from distrai.protocol.sync import StoreCache
from distrai.store import StoreError
from distrai.train.inner import window_start_state
from distrai.train.train_state import state_hash
from distrai.wire.verdicts import PASS, Check
from validators.checks import MinerVerdict, check_miner
from validators.held_window import HeldWindow
from validators.inventory import Reader
from validators.pay import forfeit
from validators.replay_check import verify_challenge
from validators.validator_state import ValidatorState

log = logging.getLogger("distrai.validator")


def own_outage(unheard: int, announced: int) -> bool:
    """Whether the validator, not the miners, was cut off: it could not hear from more than half of
    the miners whose commitments count for the window (every miner, when they all share one store)."""
    return announced > 0 and 2 * unheard > announced


def settle(verdict: MinerVerdict, *, challenged: bool, outage: bool, patience_block: int) -> None:
    """Decide a verdict whose reads the miner's store still did not answer at `patience_block`."""
    if not verdict.unread:
        return
    check, why = next((Check(c), v) for c, v in verdict.verdicts.items() if v != PASS)
    verdict.unread = False
    if outage:
        verdict.fail(
            check,
            f"{why}; not counted against the miner: this validator could not reach most miners' stores",
            fraud=False,
        )
    elif challenged:
        verdict.fail(
            check,
            f"withheld: {why}; still unanswered at block {patience_block}, when the validator stopped "
            "trying, from a challenged miner",
        )
        verdict.withheld = True
    else:
        verdict.fail(check, f"{why}; still unanswered at block {patience_block}", fraud=False)


def reread(runtime: Runtime, held: HeldWindow, hotkey: str, store: Reader) -> MinerVerdict:
    """A second look, one window later, at what a challenged miner withheld in `held.window`: its
    manifest and update read from its store as it is now (each object must hash to what the miner
    committed before the commit deadline, so when it arrived does not matter) and its challenged
    segments replayed against the window's base. Passing means the reveal is there and sound."""
    runtime.load_params(held.basis.base.params)
    basis = dataclasses.replace(
        held.basis,
        runtime=runtime,
        start_hash=state_hash(window_start_state(runtime.model)),
        is_registered=lambda _hotkey: (
            True
        ),  # signed while registered: the manifest's anchor on chain vouches for it
    )
    verdict = check_miner(basis, hotkey, held.verdicts[hotkey].uid, store, challenged=True)
    if verdict.passed:
        assert verdict.manifest is not None, "a passed verdict holds its manifest"
        segments = basis.segments(hotkey, verdict.manifest.n_segments)
        verify_challenge(basis, verdict, store, segments, basis.sample(hotkey))
    return verdict


def after_reread(
    state: ValidatorState, hotkeys: Sequence[str], due: Collection[str], sound: Collection[str]
) -> ValidatorState:
    """`state` (aligned with the metagraph's `hotkeys`) once the suspensions of `due` are settled:
    those whose withheld objects were `sound` on the re-read get their bar before this one back and
    their held scores mature again (the withheld window scored 0); the others keep the bar, forfeit
    every score not yet matured and have their average zeroed. Every settled suspension is dropped."""
    averages, banned, pending = list(state.averages), dict(state.banned_until), dict(state.pending)
    for hotkey in sorted(set(due)):
        if hotkey in sound:
            before = state.suspended[hotkey].banned_until
            if before < 0:
                banned.pop(hotkey, None)
            else:
                banned[hotkey] = before
            continue
        pending, _ = forfeit(pending, hotkey)
        if hotkey in hotkeys:
            averages[hotkeys.index(hotkey)] = 0.0
    return state.model_copy(
        update={
            "averages": averages,
            "banned_until": banned,
            "pending": pending,
            "suspended": {hk: s for hk, s in state.suspended.items() if hk not in due},
        }
    )


def reread_due(
    runtime: Runtime,
    stores: StoreCache,
    state: ValidatorState,
    held: HeldWindow | None,
    hotkeys: Sequence[str],
    w: int,
) -> ValidatorState:
    """`state` with the holds of window w and before settled, for the metagraph's `hotkeys`: a miner
    whose withheld reveal is there now and sound has its bar lifted and its held scores mature again,
    less the window it lost; one whose reveal is still unread, or fails, stays barred and forfeits
    them (`after_reread`). A hold this validator can no longer read again, as it restarted since and
    lost the window it was checked against (`held`), is lifted the same way: a validator's restart is
    no evidence against a miner, and the other validators still re-check its finding and adopt it if
    the reveal is not there (`validators.findings`)."""
    due = sorted(hk for hk, s in state.suspended.items() if s.window <= w)
    sound = []
    for hotkey in due:
        window = state.suspended[hotkey].window
        if held is None or held.window != window or hotkey not in held.verdicts:
            sound.append(hotkey)
            log.warning(
                "window %d: %s's hold cannot be read again here, as this validator restarted since: "
                "bar lifted, only the window is lost; the other validators re-check its finding",
                window,
                hotkey[:10],
            )
            continue
        passes, reason = withheld_is_sound(runtime, stores, held, hotkey)
        if passes:
            sound.append(hotkey)
            log.info(
                "window %d: %s's withheld reveal is there now and passes: bar lifted, only the window is lost",
                window,
                hotkey[:10],
            )
        else:
            log.warning(
                "window %d: %s stays barred for withholding its reveal: %s", window, hotkey[:10], reason
            )
    return after_reread(state, hotkeys, due, sound)


def withheld_is_sound(
    runtime: Runtime, stores: StoreCache, held: HeldWindow, hotkey: str
) -> tuple[bool, str]:
    """Whether what `hotkey` withheld in the `held` window is in its store now and passes, and why not."""
    try:
        store = stores.get(held.basis.announcements[hotkey].store_url)
    except (StoreError, ValueError) as exc:
        return False, f"its store cannot be opened: {exc}"
    again = reread(runtime, held, hotkey, store)
    return again.passed, again.reason or ""
