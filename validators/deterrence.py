"""What a claim beyond one's work earns under the run's rule, in expectation: the arithmetic of
docs/protocol.md, "Why a claim beyond the work does not pay", checked against a simulation of the
rule itself by `tests/test_deterrence.py`.

A miner trains `trained` segments a window and claims `claimed` (a copier trains none). The window's
challenge replays `runs` uniformly drawn segments of its claim (`windows.challenge_runs`: one with
the floor probability q, or always on probation, plus q · (claimed − reference) / reference more
in expectation); it is caught when a replayed segment is one it did not train. Its score, the
claimed tokens, enters its moving average `maturity` windows later (`validators.pay`); a catch
forfeits what has not matured and zeroes the average, and the cheater registers a fresh hotkey at
once, which starts from nothing on probation. Its long-run pay per window, over what the same
hardware earns honestly (`trained` a window, never caught), is `pay_ratio`.

For `challenge_segments` = 1, as on the GPU config: a run of s consecutive segments catches more.
`simulate` runs the rule itself (the project's draw and pay) for the same miner. Pure functions;
pay is in segments' worth of tokens a window.
"""

from __future__ import annotations

import hashlib
import math
from dataclasses import dataclass

from distrai.protocol.windows import ChallengeInputs, challenge_runs, miner_segments
from validators.pay import Pending, add_window, mature

SURVIVAL_FLOOR = 1e-12
"""A life is followed until the chance of still being uncaught falls below this."""


@dataclass(frozen=True)
class Rule:
    """The parts of a run config the arithmetic reads."""

    floor: float
    """q: the probability that the floor challenges a miner in a window"""
    reference: int | None
    """`verification.reference_segments` (None: no runs beyond the floor's)"""
    probation_windows: int
    maturity: int
    """`scoring.maturity_windows`"""
    alpha: float
    """`scoring.ema_alpha`"""


def runs_distribution(rule: Rule, claimed: int, on_probation: bool) -> list[tuple[int, float]]:
    """(runs, probability) of the segment runs one window replays of a claim of `claimed` segments."""
    floor = 1.0 if on_probation else rule.floor
    extra = 0.0
    if rule.reference is not None and claimed > rule.reference:
        extra = rule.floor * (claimed - rule.reference) / rule.reference
    whole, part = math.floor(extra), extra - math.floor(extra)
    out: dict[int, float] = {}
    for base, p_base in ((1, floor), (0, 1.0 - floor)):
        for more, p_more in ((whole + 1, part), (whole, 1.0 - part)):
            if p_base * p_more > 0:
                out[base + more] = out.get(base + more, 0.0) + p_base * p_more
    return sorted(out.items())


def catch_probability(rule: Rule, trained: int, claimed: int, on_probation: bool = False) -> float:
    """The chance that one window's challenge replays a segment of the claim that was not trained:
    the runs start on distinct segments drawn uniformly, so d of them all miss the claimed − trained
    faked segments with probability C(trained, d) / C(claimed, d)."""
    if not 0 <= trained <= claimed or claimed < 1:
        raise ValueError(f"a claim of {claimed} segments cannot hold {trained} trained ones")
    missed = 0.0
    for runs, probability in runs_distribution(rule, claimed, on_probation):
        all_miss = 1.0
        for i in range(min(runs, claimed)):
            all_miss *= max(trained - i, 0) / (claimed - i)
        missed += probability * all_miss
    return 1.0 - missed


def pay_per_window(
    rule: Rule,
    trained: int,
    claimed: int,
    lag: int = 1,
    honest_windows: int = 0,
    honest_trained: int | None = None,
) -> float:
    """The long-run pay a window, in segments' worth of tokens, of a miner that trains `trained`
    segments a window and claims `claimed`, and registers a fresh hotkey the window after a catch.
    In the first `honest_windows` windows of each hotkey it works honestly instead (trains and claims
    `honest_trained`, `trained` by default), to pass its probation, say. `lag` is how many windows
    after the caught window a validator forfeits: 0 for the validator that replayed it, 1 for the
    others, which adopt its finding a window later."""
    if claimed == trained:
        return float(trained)
    honest = trained if honest_trained is None else honest_trained
    probation = catch_probability(rule, trained, claimed, on_probation=True)
    later = catch_probability(rule, trained, claimed)
    if later == 0.0:
        raise ValueError("a claim beyond the work that is never challenged is never caught")
    scores: list[float] = []
    alive, average, pay, life = 1.0, 0.0, 0.0, 0.0
    window = 0
    while alive > SURVIVAL_FLOOR:
        window += 1
        cheating = window > honest_windows
        scores.append(float(claimed if cheating else honest))
        if window > rule.maturity:
            average = rule.alpha * scores[window - rule.maturity - 1] + (1.0 - rule.alpha) * average
        caught = (probation if window <= rule.probation_windows else later) if cheating else 0.0
        pay += (alive if lag >= 1 else alive * (1.0 - caught)) * average
        life += alive
        alive *= 1.0 - caught
    return pay / life


def pay_ratio(rule: Rule, trained: int, claimed: int, lag: int = 1, honest_windows: int = 0) -> float:
    """`pay_per_window` over what the same hardware earns honestly: `trained` a window."""
    if trained < 1:
        raise ValueError("a copier trains nothing: compare its pay_per_window with an honest miner's")
    return pay_per_window(rule, trained, claimed, lag, honest_windows) / trained


@dataclass(frozen=True)
class Simulated:
    """A miner's pay and catches over a simulated run of windows."""

    pay_per_window: float
    """in segments' worth of tokens, as `pay_per_window` gives it"""
    catches: int
    windows: int


def simulate(
    rule: Rule,
    population: int,
    trained: int,
    claimed: int,
    windows: int,
    *,
    lag: int = 0,
    honest_windows: int = 0,
    honest_trained: int | None = None,
    lives: int | None = None,
    label: str = "distrai.deterrence",
) -> Simulated:
    """The same miner's pay under the rule itself rather than the arithmetic: each window's challenge
    drawn by `distrai.protocol.windows` from a made-up block hash among `population` miners (the
    others claim the reference), the miner caught when a replayed segment is one it did not train
    (the first claimed − trained of its claim: the draw is uniform), its pay folded by
    `validators.pay` and read after each window as a validator's weight reads it, and a fresh
    hotkey, on probation, the window after each catch; over `windows` windows, or until `lives`
    hotkeys have been caught if that comes first. `lag` as in `pay_per_window`."""
    floor_count = round(rule.floor * population)
    if floor_count < 1 or not math.isclose(floor_count, rule.floor * population):
        raise ValueError(f"a floor of {rule.floor} is no whole number of {population} miners")
    honest = trained if honest_trained is None else honest_trained
    others = tuple(f"5honest{i:04d}" for i in range(population - 1))
    reference = rule.reference or claimed
    hotkey, life, average = f"5claimer{0:06d}", 0, 0.0
    pending: Pending = {}
    paid, catches, ran = 0.0, 0, 0
    while ran < windows and (lives is None or catches < lives):
        w, ran, life = ran, ran + 1, life + 1
        cheating = life > honest_windows
        claim, faked = (claimed, set(range(claimed - trained))) if cheating else (honest, set())
        inputs = ChallengeInputs(
            block_hash="0x" + hashlib.sha256(f"{label}/{w}".encode()).hexdigest(),
            run_id=label,
            window=w,
            miner_hotkeys=(hotkey, *others),
            miners_challenged=floor_count,
            segments_per_miner=1,
            claims=((hotkey, claim), *((o, reference) for o in others)),
            reference_segments=rule.reference,
            probation=(hotkey,) if life <= rule.probation_windows else (),
        )
        caught = bool(faked) and challenge_runs(inputs, hotkey) > 0
        caught = caught and bool(faked & set(miner_segments(inputs, hotkey, claim)))
        pending = add_window(pending, w, {hotkey: float(claim)})
        if caught and lag == 0:
            catches += 1
            hotkey, life, average, pending = f"5claimer{w + 1:06d}", 0, 0.0, {}
            continue
        averages, pending = mature({hotkey: average}, pending, w - rule.maturity, rule.alpha)
        average = averages[hotkey]
        paid += average
        if caught:
            catches += 1
            hotkey, life, average, pending = f"5claimer{w + 1:06d}", 0, 0.0, {}
    return Simulated(paid / ran, catches, ran)
