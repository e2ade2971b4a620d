"""What the cheats of a claim earn over their lives at the GPU config, re-registering at once when
caught: the arithmetic of `validators.deterrence` and a simulation of the rule itself
(`deterrence.simulate`: the project's challenge draw and pay), side by side.

The config's numbers: q = `challenge_miners` / 256 (the most miners a subnet holds, so the least q),
`reference_segments`, `probation_windows`, `maturity_windows`, `ema_alpha`. A miner's work is counted
in segments of the GPU config's 40 steps: an H100 trains 46 a window (docs/gpu.md), and H is 400.
The simulation draws among 16 miners of which the floor challenges one, the same q: the draw of one
miner depends on the population only through q (`tests/test_deterrence.py` checks the arithmetic
against the simulation on a small rule)."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from distrai.protocol.run import RunConfig
from validators.deterrence import Rule, catch_probability, pay_per_window, simulate

SUBNET_MINERS = 256
H100_SEGMENTS = 46
"""an H100's window on the GPU config: 46 segments of 40 steps at the measured pace (docs/gpu.md)"""
SIMULATED_MINERS = 16
COPIER_TARGET = 0.05
"""a copier earns at most 5% of an honest 1× (H100) miner's pay"""
HARDWARE = (1, 2, 3, 5, 8, 12, 23, 34, 45, 46, 92, 184, 368)
"""segments a window, from a GPU a fiftieth of an H100's pace to 8 H100s: the grid of `worst_claim`"""


def gpu_rule(config: RunConfig) -> Rule:
    challenged = config.verification.challenge_miners
    floor = challenged / SUBNET_MINERS if isinstance(challenged, int) else challenged
    return Rule(
        floor=floor,
        reference=config.verification.reference_segments,
        probation_windows=config.verification.probation_windows,
        maturity=config.scoring.maturity_windows,
        alpha=config.scoring.ema_alpha,
    )


@dataclass(frozen=True)
class Cheat:
    label: str
    trained: int
    """segments it trains a window while cheating"""
    claimed: int
    hardware: int
    """segments its hardware trains honestly: what its pay is compared with"""
    honest_windows: int = 0
    """windows of each hotkey it works honestly first (through its probation)"""
    bench_label: str | None = None
    """the miner of the bench's windows that plays it, if any"""

    @property
    def copier(self) -> bool:
        return self.trained == 0

    @property
    def target(self) -> float:
        """pay over the same hardware's honest pay below 1; a copier's at most 5% of an H100's"""
        return COPIER_TARGET if self.copier else 1.0


def cheats(rule: Rule) -> list[Cheat]:
    h = H100_SEGMENTS
    return [
        Cheat("inflater, 2×", h, 2 * h, h, bench_label="inflater, 2×"),
        Cheat("inflater, H", h, 400, h, bench_label="inflater, H"),
        Cheat("last segment only, claims H", 1, 400, h, bench_label="last segment only"),
        Cheat("copier (a blend of the last aggregate)", 0, h, h, bench_label="copier"),
        Cheat("copier after an honest probation", 0, h, h, honest_windows=rule.probation_windows),
        Cheat("a GPU of 1/46 of an H100 claiming an H100's", 1, h, 1, honest_windows=rule.probation_windows),
    ]


@dataclass(frozen=True)
class Life:
    cheat: Cheat
    catch_probation: float
    catch: float
    arithmetic: float
    """long-run pay over the same hardware's honest pay: the larger of the catching validator's view
    and the adopting validators' (a window later)"""
    simulated: float
    catches: int
    windows: int

    @property
    def met(self) -> bool:
        """Below the same hardware's honest pay; a copier's at most 5% of an H100's."""
        if self.cheat.copier:
            return self.arithmetic <= self.cheat.target
        return self.arithmetic < self.cheat.target


def life(rule: Rule, cheat: Cheat, windows: int, lives: int) -> Life:
    """The cheat's pay by the arithmetic and by a simulation of `windows` windows or `lives` caught
    hotkeys, whichever ends first (a slow cheat's pay rests on its rare long lives: it needs many
    windows; a fast one's draws are dear, a claim of 400 segments drawing among 400)."""
    honest = cheat.hardware if cheat.honest_windows else None

    def ratio(lag: int) -> float:
        pay = pay_per_window(rule, cheat.trained, cheat.claimed, lag, cheat.honest_windows, honest)
        return pay / cheat.hardware

    run = simulate(
        rule,
        SIMULATED_MINERS,
        cheat.trained,
        cheat.claimed,
        windows,
        lag=1,
        honest_windows=cheat.honest_windows,
        honest_trained=honest,
        lives=lives,
        label=f"distrai.bench.incentives/{cheat.label}",
    )
    return Life(
        cheat=cheat,
        catch_probation=catch_probability(rule, cheat.trained, cheat.claimed, on_probation=True),
        catch=catch_probability(rule, cheat.trained, cheat.claimed),
        arithmetic=max(ratio(0), ratio(1)),
        simulated=run.pay_per_window / cheat.hardware,
        catches=run.catches,
        windows=run.windows,
    )


@dataclass(frozen=True)
class Worst:
    ratio: float
    trained: int
    claimed: int
    honest_windows: int


def worst_claim(rule: Rule) -> Worst:
    """The most any claim beyond the work earns over the same hardware's honest pay, over `HARDWARE`
    and claims from one segment more to H, cheating from a hotkey's first window or after its probation."""
    worst = Worst(0.0, 0, 0, 0)
    for trained in HARDWARE:
        claims = {trained + 1, trained + 2, 2 * trained, 4 * trained, 46, 47, 60, 92, 200, 400}
        for claimed in sorted(c for c in claims if trained < c <= 400):
            for honest in sorted({0, rule.probation_windows}):
                ratio = max(pay_per_window(rule, trained, claimed, lag, honest) / trained for lag in (0, 1))
                if ratio > worst.ratio:
                    worst = Worst(ratio, trained, claimed, honest)
    return worst


SWEPT_MATURITIES = (0, 16, 32, 48, 52, 56, 60)


@dataclass(frozen=True)
class Sweep:
    maturity: int
    worst: Worst
    copier: float
    """a copier after an honest probation: its pay over an H100's"""


def maturity_sweep(rule: Rule, maturities: tuple[int, ...] = SWEPT_MATURITIES) -> list[Sweep]:
    """The worst claim and the copier after an honest probation under each maturity, the rest of the
    rule as it is: how long pay must wait before every claim beyond the work loses."""
    sweeps = []
    for maturity in maturities:
        at = dataclasses.replace(rule, maturity=maturity)
        copier = max(
            pay_per_window(at, 0, H100_SEGMENTS, lag, at.probation_windows, H100_SEGMENTS) for lag in (0, 1)
        )
        sweeps.append(Sweep(maturity, worst_claim(at), copier / H100_SEGMENTS))
    return sweeps
