"""bench/incentives.py's report: the tables as markdown for docs/incentives.md and as rich tables for
the terminal, from the same cells, each target MET or MISSED from its own numbers. The text after the
report's NOTES_MARKER line is kept when the benchmark rewrites it."""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass

from _incentive_lives import COPIER_TARGET, H100_SEGMENTS, HARDWARE, Life, Sweep, Worst
from _incentive_pay import (
    DOCKED_TARGET,
    TOLERANCE,
    GroupPay,
    MinerPay,
    group_pay,
    met,
    miner_pay,
    spread,
)
from _incentive_windows import Miner, WindowRecord
from _report import NOTES_MARKER, Machine, kept_notes
from _validator_cost import RESOURCES, ValidatorCost, cost_markdown
from rich.console import Console
from rich.table import Table as RichTable

from distrai.protocol.run import RunConfig
from validators.deterrence import Rule


@dataclass(frozen=True)
class Plan:
    unit_steps: int
    """a 1× miner's steps per window"""
    segment_steps: int
    pretrain_windows: int
    pay_windows: int
    aggregation_windows: int
    lives_windows: int
    """the most windows of each cheat's simulated lives (row d)"""
    lives: int
    """the most caught hotkeys of each cheat's simulation: it ends at whichever comes first"""
    heldout_fraction: float | None = None
    """None: the config's"""
    cosine_miners: int = 256
    """the updates whose pairwise duplicate check is timed (scaled to 256 by the pairs)"""
    quick: bool = False


@dataclass(frozen=True)
class Results:
    command: str
    date: str
    machine: Machine
    seconds: float
    plan: Plan
    config: RunConfig
    parameters: int
    heldout_initial: float
    heldout_base: float
    """after the pre-training windows"""
    speeds: list[Miner]
    splits: dict[str, list[Miner]]
    """operator → its hotkeys, the 4× miner's compute"""
    cheaters: list[Miner]
    pay_records: list[WindowRecord]
    aggregation: dict[str, list[WindowRecord]]
    """rule → its windows"""
    rule: Rule
    """the GPU config's, as row d reads it"""
    lives: list[Life]
    worst: Worst
    sweep: list[Sweep]
    """the worst claim and the copier after its probation under other maturities"""
    cost: ValidatorCost


@dataclass(frozen=True)
class Table:
    title: str
    headers: list[str]
    rows: list[list[str]]

    def markdown(self) -> str:
        lines = ["| " + " | ".join(self.headers) + " |", "|" + "---|" * len(self.headers)]
        return "\n".join(lines + ["| " + " | ".join(row) + " |" for row in self.rows])

    def rich(self) -> RichTable:
        table = RichTable(title=self.title)
        for i, header in enumerate(self.headers):
            table.add_column(header, justify="left" if i == 0 else "right")
        for row in self.rows:
            table.add_row(*row)
        return table


# -- the numbers --------------------------------------------------------------------------------------


def honest_miners(r: Results) -> list[Miner]:
    return r.speeds + [m for members in r.splits.values() for m in members if m not in r.speeds]


def pays(r: Results) -> dict[str, MinerPay]:
    scoring = r.config.scoring
    return miner_pay(
        r.pay_records, honest_miners(r) + r.cheaters, scoring.ema_alpha, scoring.maturity_windows
    )


def relative_pay_per_token(r: Results) -> dict[str, float]:
    """Each honest miner's pay per token over the 1× miner's."""
    p = pays(r)
    one = p[r.speeds[1].label].pay_per_token
    return {m.label: p[m.label].pay_per_token / one if one > 0 else math.nan for m in honest_miners(r)}


def speed_spread(r: Results) -> float:
    p = pays(r)
    return spread([p[m.label].pay_per_token for m in r.speeds])


def groups(r: Results) -> list[GroupPay]:
    return group_pay(pays(r), {label: [m.label for m in members] for label, members in r.splits.items()})


def split_ratios(r: Results) -> list[float]:
    g = groups(r)
    return [group.pay / g[0].pay if g[0].pay > 0 else math.inf for group in g]


def docked(r: Results) -> tuple[int, int]:
    """(honest miner-windows paid less than their claim, by the `useful` gate or the gain floor,
    honest miner-windows)."""
    cells = [r.pay_records[i].miners[m.hotkey] for m in honest_miners(r) for i in range(len(r.pay_records))]
    return sum(cell.pay_per_token < 1 for cell in cells), len(cells)


def lowest_honest_gain(r: Results) -> float:
    """The lowest, over the honest miner-windows, of a miner's gain per unit of work (gain /
    tokens ** exponent) over its window's median among the passing updates: the floor docks below
    `gain_floor` (nan when no window has a positive median)."""
    exponent = r.config.scoring.gain_exponent
    honest = {m.hotkey for m in honest_miners(r)}
    lowest = math.nan
    for record in r.pay_records:
        per_work = {
            hk: cell.numbers["drop_unseen"] / cell.tokens**exponent
            for hk, cell in record.miners.items()
            if cell.reason is None and "drop_unseen" in cell.numbers
        }
        median = statistics.median(per_work.values()) if per_work else 0.0
        if median > 0:
            ratios = [value / median for hk, value in per_work.items() if hk in honest]
            lowest = min([lowest, *ratios]) if not math.isnan(lowest) else min(ratios)
    return lowest


def shrunk(r: Results) -> Miner | None:
    """The cheat that publishes its own honest update scaled down (None: the run has none)."""
    return next((m for m in r.cheaters if m.scale != 1.0), None)


def gain_exponent(r: Results) -> float:
    """How the honest speeds' gain on the reserve grew with their tokens: the slope of log gain
    against log tokens from the ¼× to the 4× miner, the median over the windows (nan when a gain is
    not positive in every window)."""
    slow, fast = r.speeds[0], r.speeds[2]
    slopes = []
    for record in r.pay_records:
        a, b = record.miners[slow.hotkey], record.miners[fast.hotkey]
        ga, gb = a.numbers.get("drop_unseen", math.nan), b.numbers.get("drop_unseen", math.nan)
        if not (ga > 0 and gb > 0):
            return math.nan
        slopes.append(math.log(gb / ga) / math.log(b.tokens / a.tokens))
    return statistics.median(slopes)


def passed_share(r: Results, miner: Miner) -> float:
    """The share of the windows whose checks the miner's update passed."""
    return statistics.fmean(record.miners[miner.hotkey].score > 0 for record in r.pay_records)


def final_losses(r: Results) -> dict[str, float]:
    return {rule: records[-1].heldout for rule, records in r.aggregation.items()}


def bench_miner(r: Results, label: str | None) -> Miner | None:
    return next((m for m in r.cheaters if m.label == label), None)


# -- the tables ---------------------------------------------------------------------------------------


def targets_table(r: Results) -> Table:
    rel = relative_pay_per_token(r)
    a = speed_spread(r)
    ratios = split_ratios(r)
    g = groups(r)
    failed, cells = docked(r)
    losses = final_losses(r)
    rows = [
        [
            "a. pay per token by speed",
            ", ".join(f"{m.label} {rel[m.label]:.2f}" for m in r.speeds)
            + f" (1× = 1.00); max / min − 1 = {a:.1%}",
            f"within ±{TOLERANCE:.0%} of one another",
            met(a <= TOLERANCE),
        ],
        [
            "b. splitting the 4× compute",
            ", ".join(f"{group.label} {ratio:.2f}" for group, ratio in zip(g, ratios, strict=True))
            + " of one hotkey's pay",
            f"within ±{TOLERANCE:.0%} of one hotkey",
            met(all(abs(ratio - 1) <= TOLERANCE for ratio in ratios)),
        ],
        [
            f"c. honest work the gates dock (`useful`, the gain floor), {r.config.scoring.usefulness_sequences} "
            "sequences",
            f"{failed} of {cells} honest miner-windows ({failed / cells:.1%}); the lowest honest gain per "
            f"unit of work {lowest_honest_gain(r):.2f} of its window's median (the floor: "
            f"{r.config.scoring.gain_floor})",
            f"≤ {DOCKED_TARGET:.0%}",
            met(failed / cells <= DOCKED_TARGET),
        ],
        [
            "c. the gain's growth with tokens, honest ¼× to 4× (the floor's size correction)",
            f"exponent {gain_exponent(r):.2f} (the run config's `gain_exponent`: {r.config.scoring.gain_exponent})",
            "none: informs the config",
            "—",
        ],
    ]
    scaled = shrunk(r)
    if scaled is not None:
        ratio = pays(r)[scaled.label].pay_per_token / pays(r)[r.speeds[1].label].pay_per_token
        rows.append(
            [
                f"c. {scaled.label}: its pay per token, over the 1× miner's",
                f"{ratio:.2g}",
                f"≤ {scaled.scale:g} (its size's worth)",
                met(ratio <= scaled.scale),
            ]
        )
    for row in r.lives:
        target = (
            f"≤ {row.cheat.target:.0%} of an H100's" if row.cheat.copier else "< 1 of the same hardware's"
        )
        rows.append(
            [
                f"d. {row.cheat.label}",
                f"{row.arithmetic:.3f} of honest pay (simulated: {row.simulated:.3f} over {row.catches:,} "
                f"lives)",
                target,
                met(row.met),
            ]
        )
    rows.append(
        [
            "d. any claim beyond the work, the worst",
            f"{r.worst.ratio:.3f}: trains {r.worst.trained}, claims {r.worst.claimed} segments"
            + (f", honest for its first {r.worst.honest_windows} windows" if r.worst.honest_windows else ""),
            "< 1 of the same hardware's",
            met(r.worst.ratio < 1),
        ]
    )
    rows.append(
        [
            "e. the aggregate's rule, an inflater and a copier present",
            f"held-out loss after the last window: weights by measured gain {losses['gain']:.4f}, by claimed "
            f"tokens {losses['claims']:.4f}",
            "none: chooses the rule",
            "—",
        ]
    )
    for resource in RESOURCES:
        share = r.cost.share(resource)
        rows.append(
            [
                f"f. a validator's {resource.name} per window, 256 miners, GPU config",
                f"{share:.1%}",
                f"≤ {resource.target:.0%}",
                met(r.cost.verdicts[resource.name]),
            ]
        )
    return Table("Targets", ["row", "measured", "target", "verdict"], rows)


def speed_table(r: Results) -> Table:
    p, rel = pays(r), relative_pay_per_token(r)
    total_pay = sum(x.pay for x in p.values())
    rows = []
    for m in honest_miners(r):
        x = p[m.label]
        rows.append(
            [
                m.label,
                str(m.steps),
                str(m.ranks),
                f"{x.tokens:,}",
                f"{x.unpaid_windows} of {len(x.qualities)}",
                f"{x.pay / total_pay:.1%}",
                f"{rel[m.label]:.2f}",
            ]
        )
    return Table(
        "a. Pay per token of every honest miner of the windows",
        [
            "miner",
            "steps / window",
            "ranks",
            "tokens (matured windows)",
            "windows failed",
            "share of pay",
            "pay per token (1× = 1.00)",
        ],
        rows,
    )


def split_table(r: Results) -> Table:
    g, ratios = groups(r), split_ratios(r)
    total_pay = sum(x.pay for x in pays(r).values())
    return Table(
        "b. The 4× miner's compute under 1, 2 and 4 hotkeys",
        [
            "operator",
            "hotkeys",
            "steps per hotkey / window",
            "tokens",
            "share of pay",
            "pay / one hotkey's",
            "verdict",
        ],
        [
            [
                group.label,
                str(group.hotkeys),
                str(r.splits[group.label][0].steps),
                f"{group.tokens:,}",
                f"{group.pay / total_pay:.1%}",
                f"{ratio:.2f}",
                "baseline" if i == 0 else met(abs(ratio - 1) <= TOLERANCE),
            ]
            for i, (group, ratio) in enumerate(zip(g, ratios, strict=True))
        ],
    )


def gate_table(r: Results) -> Table:
    p = pays(r)
    windows = [record.window for record in r.pay_records]
    rows = []
    for m in honest_miners(r) + r.cheaters:
        x = p[m.label]
        cells = [
            f"{paid_words(q)} ({d:.1%}, z {z:.1f})"
            for q, d, z in zip(x.qualities, x.drops, x.marks_z, strict=True)
        ]
        rows.append([m.label, f"{m.steps} / {m.claims}", *cells, str(x.unpaid_windows)])
    return Table(
        "c. The gates window by window: pass (paid its claim), paid a fraction of its claim (the gain floor: "
        "its gain on the reserve vouches for no more), or FAIL (`useful`); in brackets its update's loss drop "
        "on its last segment's sequences, and z, the mark of its own data in standard errors (shown, not paid for)",
        ["miner", "trains / claims (steps)", *(f"window {w}" for w in windows), "failed"],
        rows,
    )


def paid_words(pay_per_token: float) -> str:
    """A window's verdict on one miner: its score over its claim, in words."""
    if pay_per_token >= 1:
        return "pass"
    return f"paid {pay_per_token:.2g}" if pay_per_token > 0 else "FAIL"


def lives_table(r: Results) -> Table:
    rows = []
    for row in r.lives:
        c = row.cheat
        bench = bench_miner(r, c.bench_label)
        rows.append(
            [
                c.label,
                f"{c.trained} / {c.claimed}"
                + (f", honest for {c.honest_windows} first" if c.honest_windows else ""),
                f"{c.hardware}",
                f"{row.catch_probation:.3f} / {row.catch:.4f}",
                "—" if bench is None else f"{passed_share(r, bench):.0%}",
                f"{row.arithmetic:.4f}",
                f"{row.simulated:.4f} ({row.catches:,} lives, {row.windows:,} windows)",
                (f"≤ {c.target:.2f} of an H100's" if c.copier else "< 1"),
                met(row.met),
            ]
        )
    return Table(
        "d. Claims beyond the work over their lives, at the GPU config, re-registering at once when caught",
        [
            "cheat",
            "trains / claims (segments a window)",
            "its hardware honestly (segments)",
            "caught a window (probation / after)",
            "passed the checks in the bench's windows",
            "pay ÷ honest pay, arithmetic",
            "simulated",
            "target",
            "verdict",
        ],
        rows,
    )


def sweep_table(r: Results) -> Table:
    rows = [
        [
            f"{row.maturity}" + (" (the GPU config's)" if row.maturity == r.rule.maturity else ""),
            f"{row.worst.ratio:.3f}",
            f"{row.worst.trained} / {row.worst.claimed}"
            + (f", honest for {row.worst.honest_windows} first" if row.worst.honest_windows else ""),
            f"{row.copier:.4f}",
            met(row.worst.ratio < 1 and row.copier <= COPIER_TARGET),
        ]
        for row in r.sweep
    ]
    return Table(
        "d. How long pay must wait: the worst claim beyond the work, and a copier after an honest probation, "
        "by `maturity_windows`",
        [
            "maturity (windows)",
            "worst pay ÷ honest",
            "at trains / claims (segments)",
            "copier after probation ÷ an H100's",
            "every claim loses, copier ≤ 5%",
        ],
        rows,
    )


def aggregation_table(r: Results) -> Table:
    losses = final_losses(r)
    windows = [record.window for record in r.aggregation["gain"]]
    cheats = [m for m in r.cheaters if m.hotkey in r.aggregation["gain"][0].miners]
    honest = [m for m in r.speeds if m.hotkey in r.aggregation["gain"][0].miners]
    rows = []
    for rule, records in r.aggregation.items():
        weights = [
            f"{m.label} {statistics.fmean(record.miners[m.hotkey].weight for record in records):.2f}"
            for m in honest + cheats
        ]
        rows.append(
            [
                "by measured gain (the run's)" if rule == "gain" else "by claimed tokens (before)",
                ", ".join(weights),
                *(f"{record.heldout:.4f}" for record in records),
                f"{losses[rule] - losses['claims']:+.4f}",
            ]
        )
    return Table(
        "e. Held-out loss after each window, by the aggregate's rule",
        ["rule", "mean weight", *(f"after window {w}" for w in windows), "last − by claims"],
        rows,
    )


def tables(r: Results) -> list[Table]:
    return [
        targets_table(r),
        speed_table(r),
        split_table(r),
        gate_table(r),
        lives_table(r),
        sweep_table(r),
        aggregation_table(r),
    ]


# -- the report ----------------------------------------------------------------------------------------


def setup_lines(r: Results) -> list[str]:
    c, p, m, rule = r.config, r.plan, r.machine, r.rule
    first, last = r.pay_records[0].window, r.pay_records[-1].window
    quick = (
        ["- **quick run**: every code path on a few steps; its numbers mean nothing (`--quick`)"]
        if p.quick
        else []
    )
    return [
        *quick,
        f"- date: {r.date}; total wall time: {r.seconds:.0f} s",
        f"- machine: {m.cpu}, {m.cores} cores (shared); one thread; torch {m.torch}; Python {m.python}",
        f"- run: `bench/incentives.toml`: preset `{c.model.preset}` ({r.parameters:,} parameters), the built-in "
        f"corpus under the byte tokenizer, sequences of {c.data.seq_len} tokens, batch {c.train.batch_size}, "
        f"segments of {c.train.segment_steps} steps, H = {c.train.inner_steps}; codec `{c.codec.name}` "
        f"{dict(c.codec.options)} with each miner's error feedback; outer Nesterov SGD lr {c.outer.lr}, momentum "
        f"{c.outer.momentum}, clipped to the median norm; scoring: {c.scoring.usefulness_sequences} sequences of each "
        f"miner's last segment and of the reserve measured per update (the GPU config's count), a passing update "
        f"paid its claimed tokens up to those its gain vouches for (gain floor {c.scoring.gain_floor}, exponent "
        f"{c.scoring.gain_exponent}); pay matures {c.scoring.maturity_windows} window(s) late into a moving average of "
        f"rate {c.scoring.ema_alpha}",
        f"- base: the initial model (held-out loss {r.heldout_initial:.4f}) pre-trained {p.pretrain_windows} "
        f"window(s) by three 1× miners to {r.heldout_base:.4f}",
        f"- a 1× miner trains {p.unit_steps} steps a window; every miner trains on its own assigned data from "
        "the window's global model (windows are sequential). The 2-rank miner's step is split over 2 "
        "data-parallel ranks, replayed in one process as a validator replays it (`distrai/train/step.py`); "
        "two ranks of a 1× GPU each train 2× the steps. An inflater trains the last steps of its claim (so "
        "the sequences the validator measures are ones it trained); the copier publishes the mean of the "
        "updates the last window's aggregate took, through the codec with a residual of its own; the scaled "
        "cheat trains as the 1× miner does and publishes its own update scaled down",
        f"- rows a–c: windows {first}–{last} of {len(honest_miners(r)) + len(r.cheaters)} miners together "
        f"(the four speeds, the 4× compute split over 2 and 4 hotkeys, the {len(r.cheaters)} cheats), the outer step by "
        "the run's rule (`accepted_by_rule`); nothing is challenged in these windows, so their scores are "
        "what an unchallenged window pays; pay: each window's scores mature into the moving averages and "
        "the weights follow them (`validators/pay.py`), a miner's pay is its weights summed over the windows",
        f"- row d: the GPU config (`distrai/configs/gpu-subnet.toml`): q = {rule.floor:.4f} "
        f"(`challenge_miners` of 256), reference {rule.reference} segments, probation {rule.probation_windows} "
        f"windows, pay maturing {rule.maturity} windows late, moving average rate {rule.alpha}; work in segments of "
        f"40 steps (an H100: {H100_SEGMENTS} a window, H = 400); arithmetic: `validators/deterrence.py` "
        "(the larger of the catching validator's view and the others', which adopt its finding a window "
        "later), assuming every window of a cheat passes the cheap checks; simulated: `deterrence.simulate`, "
        f"the project's draw and pay over {p.lives_windows:,} windows or {p.lives:,} caught hotkeys, whichever "
        "ends first (the others' view); the worst claim "
        f"searched over hardware of {', '.join(map(str, HARDWARE))} segments and claims up to 400",
        f"- row e: the ¼×, 1× and 4× miners with the inflater claiming H and the copier, from the same base, "
        f"{p.aggregation_windows} windows per rule at equal tokens; held-out loss: `evaluate` over the whole "
        "held-out split",
    ]


def markdown(r: Results, path) -> str:
    t = tables(r)
    lines = [
        "# Incentives: pay per checked work, what a claim beyond it earns, and what checking costs",
        "",
        "Written by `bench/incentives.py`. The command that produced these numbers:",
        "",
        f"```\n{r.command}\n```",
        "",
        *setup_lines(r),
        "",
        "## Targets",
        "",
        t[0].markdown(),
        "",
        "## a. Pay per token by speed",
        "",
        t[1].markdown(),
        "",
        "Pay per token: a miner's pay (its weights summed over the windows) over the tokens it claimed in "
        "the windows whose scores matured, over the 1× miner's.",
        "",
        "## b. Splitting",
        "",
        t[2].markdown(),
        "",
        "## c. The gate",
        "",
        t[3].markdown(),
        "",
        "## d. Claims beyond the work",
        "",
        t[4].markdown(),
        "",
        "## d, by maturity: how long pay must wait",
        "",
        t[5].markdown(),
        "",
        "## e. The aggregate's rule",
        "",
        t[6].markdown(),
        "",
        "By measured gain: the top n passing updates by their loss drop on the window's reserve (which no "
        "miner was assigned, drawn after the commit deadline), weighted by it (`distrai/protocol/aggregation.py`); "
        "by claimed tokens: the top n by score, weighted by score, as before.",
        "",
        "## f. A validator's cost per window",
        "",
        *cost_markdown(r.cost),
        "",
        NOTES_MARKER,
        kept_notes(path),
    ]
    return "\n".join(lines)


def print_report(r: Results, console: Console) -> None:
    for table in tables(r):
        console.print(table.rich())
