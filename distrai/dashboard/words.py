"""What a validator's checks mean, in words a miner understands (docs/protocol.md has the detail)."""

from __future__ import annotations

from distrai.wire.verdicts import PASS, Check, Number

CHECKS: dict[str, str] = {
    Check.MANIFEST: "your signed manifest is the one your chain commitment anchored before the commit deadline, "
    "signed by your hotkey, for this run and window",
    Check.CONSISTENCY: "your manifest's fields agree with the run: steps, segments, codec and sizes",
    Check.UPDATE: "your update file was in your store at the reveal deadline, has the hash and size your manifest "
    "names, was made by your hotkey for this window, and decodes",
    Check.COPY: "no other hotkey published the identical update earlier",
    Check.DUPLICATE: "your update is not nearly the same as another hotkey's; when it is, the one share goes to "
    "the miner whose data it was trained on, shown by a replay or a clear mark, and to nobody when neither shows it",
    Check.STATES: "the training state you revealed is the one you committed",
    Check.REPLAY: "the validator, re-running your challenged training steps on your assigned data, reaches the "
    "state and the losses you committed",
    Check.TRAJECTORY: "your published update is the encoding of the training you committed, and your codec "
    "residual continues the last window's",
    Check.USEFUL: "your update, applied alone to the global model, lowers the loss on your assigned data",
    Check.BANNED: "you are not barred: a verified fraud bars a hotkey for a number of windows",
    Check.STORE: "your store could be read at the reveal deadline",
}
"""What passing each check means."""


def check_meaning(check: str) -> str:
    """What passing `check` means, or a plain statement that this dashboard does not know it."""
    return CHECKS.get(check, f"a check this dashboard does not describe ({check})")


def explain(checks: dict[str, str]) -> str:
    """One sentence on a verdict: which check failed first and what passing it means, or that all passed."""
    for check, verdict in checks.items():
        if verdict != PASS:
            return f"The “{check}” check failed. It passes when {check_meaning(check)}."
    if not checks:
        return "No checks were recorded."
    return "Every check passed."


def score_words(numbers: dict[str, float]) -> str:
    """How a score came about, from the report's numbers (docs/protocol.md, "Scores"): the tokens the
    manifest commits to, paid once the update lowers the loss of the sequences of the miner's last
    segment, up to those its gain on unseen data vouches for, and the mark it left on them (shown,
    not paid for)."""
    tokens, drop = numbers.get(Number.TOKENS), numbers.get(Number.DROP_TRAINED)
    if tokens is None:
        return "No usefulness was measured."
    vouched = numbers.get(Number.VOUCHED, tokens)
    parts = [
        f"you trained {tokens:,.0f} tokens, each paid in full"
        if vouched >= tokens
        else f"you claimed {tokens:,.0f} tokens, but your update's gain on unseen data vouches for only "
        f"{vouched:,.4g} of them, and those are paid"
    ]
    if drop is not None:
        parts.append(f"your update lowered the loss of sequences of your last segment by {drop:.2%}")
    mark, z = numbers.get(Number.MARK), numbers.get(Number.MARK_Z)
    if None not in (mark, z):
        parts.append(f"{mark:.2%} more than of unseen ones ({z:.1f} standard errors)")
    text = "; ".join(parts)
    return text[0].upper() + text[1:] + "."


REFUSALS: tuple[tuple[str, str, tuple[str, ...]], ...] = (
    (
        "censor",
        "it leaves out updates that the other validators' signed reports pass as useful",
        ("it leaves out the update",),
    ),
    (
        "liar",
        "its aggregate contradicts its own word: its report, the miners' manifests, the result it names, "
        "or the held-out loss",
        (
            "its signed report's scores give",
            "the miner's signed manifest does not name",
            "is not the one that miner anchored",
            "does not reach its result hash",
            "does not reach the outer momentum",
            "raises the loss on the window's held-out sample",
            "loss on the window's held-out sample is",
        ),
    ),
    (
        "outvoted",
        "it takes an update that validators holding at least as much stake failed in their signed reports",
        ("which the signed reports of validators holding",),
    ),
)
"""How a follower's refusal of an aggregate reads, by the words of its reason
(`distrai.protocol.quorum`, `distrai.protocol.follow`, `distrai.protocol.remeasure`): (the badge's
word, what it means, phrases of the reason)."""


def refusal_kind(reason: str) -> tuple[str, str]:
    """The word for a refused aggregate and what it means, from the follower's reason."""
    for word, meaning, phrases in REFUSALS:
        if any(phrase in reason for phrase in phrases):
            return word, meaning
    return "refused", "followers refuse it"


def refuted_work(refutations: list[tuple[str, str, str]]) -> tuple[str, str] | None:
    """ "refuted" and what it means, for a validator whose shared work other validators re-did and
    could not reproduce: `refutations` are (what: "measurement" or "replay receipt", by whom (a
    label), the re-check's reason), as the other validators' reports name them. None: none refuted."""
    if not refutations:
        return None
    kinds = sorted({what for what, _, _ in refutations})
    by = sorted({who for _, who, _ in refutations})
    what, who, why = refutations[-1]
    return (
        "refuted",
        f"its {' and '.join(k + 's' for k in kinds)} were re-done by {', '.join(by)} and came out otherwise "
        f"({len(refutations)} in the windows shown; the latest, a {what} by {who}: {why}); they distrust it "
        "and pay it no worker share for the run's ban_windows",
    )
