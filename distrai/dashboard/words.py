"""What a validator's checks mean, in words a miner understands (docs/protocol.md has the detail)."""

from __future__ import annotations

CHECKS: dict[str, str] = {
    "manifest": "your signed manifest is the one your chain commitment anchored before the commit deadline, "
    "signed by your hotkey, for this run and window",
    "consistency": "your manifest's fields agree with the run: steps, segments, codec and sizes",
    "update": "your update file was in your store at the reveal deadline, has the hash and size your manifest "
    "names, was made by your hotkey for this window, and decodes",
    "copy": "no other hotkey published the identical update earlier",
    "duplicate": "your update is not nearly the same as another hotkey's; when it is, the one share goes to "
    "the miner whose data it was trained on",
    "states": "the training state you revealed is the one you committed",
    "replay": "the validator, re-running your challenged training steps on your assigned data, reaches the "
    "state and the losses you committed",
    "trajectory": "your published update is the encoding of the training you committed, and your codec "
    "residual continues the last window's",
    "useful": "your update, applied alone to the global model, lowers the loss on your assigned data",
    "banned": "you are not barred: a verified fraud bars a hotkey for a number of windows",
    "store": "your store could be read at the reveal deadline",
}
"""What passing each check means."""


def check_meaning(check: str) -> str:
    """What passing `check` means, or a plain statement that this dashboard does not know it."""
    return CHECKS.get(check, f"a check this dashboard does not describe ({check})")


def explain(checks: dict[str, str]) -> str:
    """One sentence on a verdict: which check failed first and what passing it means, or that all passed."""
    for check, verdict in checks.items():
        if verdict != "pass":
            return f"The “{check}” check failed. It passes when {check_meaning(check)}."
    if not checks:
        return "No checks were recorded."
    return "Every check passed."


def score_words(numbers: dict[str, float]) -> str:
    """How a score came about, from the report's numbers (docs/protocol.md, "Scores"): the loss drop
    on the miner's data against the window's typical honest drop, and against its drop on data it was
    not given."""
    own, ref, other = (numbers.get(k) for k in ("drop_assigned", "reference_drop", "drop_unassigned"))
    if own is None or ref is None:
        return "No usefulness was measured."
    parts = [
        f"your update lowered the loss on your data by {own:.2%}; the window's typical honest update "
        f"did {ref:.2%}, so this factor is {min(1.0, own / ref) if ref > 0 and own > 0 else 0.0:.2f}"
    ]
    if other is not None:
        factor = own / other if other > own and other > 0 else 1.0
        parts.append(
            f"on data you were not given it lowered the loss by {other:.2%}, so the second factor is "
            f"{max(0.0, factor):.2f} (training on your own data helps it at least as much)"
        )
    text = "; ".join(parts)
    return text[0].upper() + text[1:] + "."
