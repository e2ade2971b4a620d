"""bench/incentives.py's report: the tables as markdown for docs/incentives.md and as rich tables for
the terminal, from the same cells, each target MET or MISSED. The text after the report's
NOTES_MARKER line is kept when the benchmark rewrites it."""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass

from _incentive_pay import TOLERANCE, GroupPay, MinerPay, group_pay, met, miner_pay, spread
from _incentive_windows import Miner, WindowRecord
from _report import NOTES_MARKER, Machine, kept_notes
from _validator_cost import CPU_KIND, GPU_KIND, LINK_KIND, ValidatorCost
from rich.console import Console
from rich.table import Table as RichTable

from distrai.protocol.run import RunConfig
from validators.scoring import MARK_Z_FULL, MARK_Z_NONE

COST_TARGET = 0.05
BASELINE = ("equal", True)
"""the aggregation variant the others are compared with: equal weights, clipped to the median norm"""


@dataclass(frozen=True)
class Plan:
    unit_steps: int
    """a 1× miner's steps per window"""
    segment_steps: int
    pretrain_windows: int
    pay_windows: int
    aggregation_windows: int
    usefulness_sequences: int | None = None
    """None: the config's"""
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
    pay_records: list[WindowRecord]
    aggregation: dict[tuple[str, bool], list[WindowRecord]]
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


def pay_miners(r: Results) -> list[Miner]:
    return r.speeds + [m for members in r.splits.values() for m in members if m not in r.speeds]


def pays(r: Results) -> dict[str, MinerPay]:
    return miner_pay(r.pay_records, pay_miners(r), r.config.scoring.ema_alpha)


def relative_pay_per_token(r: Results) -> dict[str, float]:
    """Each miner's pay per token over the 1× miner's."""
    p = pays(r)
    one = p[r.speeds[1].label].pay_per_token
    return {label: (pay.pay_per_token / one if one > 0 else math.nan) for label, pay in p.items()}


def speed_spread(r: Results) -> float:
    p = pays(r)
    return spread([p[m.label].pay_per_token for m in r.speeds])


def groups(r: Results) -> list[GroupPay]:
    return group_pay(pays(r), {label: [m.label for m in members] for label, members in r.splits.items()})


def split_ratios(r: Results) -> list[float]:
    g = groups(r)
    return [group.pay / g[0].pay if g[0].pay > 0 else math.inf for group in g]


def judged_windows(records: list[WindowRecord]) -> list[bool]:
    return [any(m.numbers.get("mark_judged") == 1.0 for m in record.miners.values()) for record in records]


def total_share(r: Results) -> float:
    return sum(part.share for part in r.cost.parts)


def final_losses(r: Results) -> dict[tuple[str, bool], float]:
    return {variant: records[-1].heldout for variant, records in r.aggregation.items()}


def variant_name(variant: tuple[str, bool]) -> str:
    weighting, clip = variant
    return f"{weighting} weights, {'clipped to the median norm' if clip else 'no clip'}"


# -- the tables ---------------------------------------------------------------------------------------


def targets_table(r: Results) -> Table:
    p, rel = pays(r), relative_pay_per_token(r)
    a = speed_spread(r)
    ratios = split_ratios(r)
    g = groups(r)
    one = p[r.speeds[1].label]
    pooled = [q for m in pay_miners(r) if m.steps == r.plan.unit_steps for q in p[m.label].qualities]
    losses = final_losses(r)
    best = min(losses, key=losses.get)
    gpu = sum(part.share for part in r.cost.parts if part.kind == GPU_KIND)
    cpu = sum(part.share for part in r.cost.parts if part.kind == CPU_KIND)
    link = sum(part.share for part in r.cost.parts if part.kind == LINK_KIND)
    total = total_share(r)
    return Table(
        "Targets",
        ["row", "measured", "target", "verdict"],
        [
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
                "c. an honest miner's score noise",
                f"1× miner: pay per token {one.mean_quality:.2f} ± {one.quality_spread:.2f} over "
                f"{len(one.qualities)} windows, unpaid in {one.unpaid_windows}; all {len(pooled) // len(r.pay_records)} "
                f"1× hotkeys: {statistics.fmean(pooled):.2f} ± {statistics.stdev(pooled):.2f}, unpaid in "
                f"{sum(q == 0 for q in pooled)} of {len(pooled)} miner-windows",
                "none: a measurement",
                "—",
            ],
            [
                "d. a validator's work per window, 256 miners, GPU config",
                f"{total:.1%}: GPU compute {gpu:.1%} (alone: {met(gpu <= COST_TARGET)}), CPU time {cpu:.1%}, "
                f"link time {link:.1%}",
                f"≤ {COST_TARGET:.0%} of one miner's compute",
                met(total <= COST_TARGET),
            ],
            [
                "e. aggregation weights",
                f"lowest held-out loss after the last window: {variant_name(best)}, {losses[best]:.4f} "
                f"(equal weights, clipped: {losses[BASELINE]:.4f}; the run's rule, score weights, clipped: "
                f"{losses[('score', True)]:.4f})",
                "none: chooses the weights",
                "—",
            ],
        ],
    )


def speed_table(r: Results) -> Table:
    p, rel = pays(r), relative_pay_per_token(r)
    total_pay = sum(x.pay for x in p.values())
    total_tokens = sum(x.tokens for x in p.values())
    rows = []
    for m in pay_miners(r):
        x = p[m.label]
        rows.append(
            [
                m.label,
                str(m.steps),
                str(m.ranks),
                f"{x.tokens:,}",
                f"{x.mean_quality:.2f}",
                f"{x.unpaid_windows} of {len(x.qualities)}",
                f"{x.pay / total_pay:.1%}",
                f"{x.tokens / total_tokens:.1%}",
                f"{rel[m.label]:.2f}",
            ]
        )
    return Table(
        "a. Pay per token of every miner of the windows",
        [
            "miner",
            "steps / window",
            "ranks",
            "tokens",
            "mean quality",
            "windows unpaid",
            "share of pay",
            "share of tokens",
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


def noise_table(r: Results) -> Table:
    p = pays(r)
    windows = [record.window for record in r.pay_records]
    rows = []
    for m in pay_miners(r):
        x = p[m.label]
        cells = [f"{q:.2f} (z {z:.1f})" for q, z in zip(x.qualities, x.marks_z, strict=True)]
        rows.append(
            [m.label, *cells, f"{x.mean_quality:.2f}", f"{x.quality_spread:.2f}", str(x.unpaid_windows)]
        )
    judged = judged_windows(r.pay_records)
    rows.append(["marks judged", *("yes" if j else "no" for j in judged), "", "", ""])
    return Table(
        "c. Pay per token window by window (the quality factor; z: the mark in standard errors)",
        ["miner", *(f"window {w}" for w in windows), "mean", "sd", "unpaid"],
        rows,
    )


def cost_table(r: Results) -> Table:
    rows = [
        [part.name, part.kind, part.amount, f"{part.seconds:,.1f}", f"{part.share:.2%}"]
        for part in r.cost.parts
    ]
    for kind in (GPU_KIND, CPU_KIND, LINK_KIND):
        chosen = [part for part in r.cost.parts if part.kind == kind]
        rows.append(
            [
                f"all {kind}",
                kind,
                "",
                f"{sum(p.seconds for p in chosen):,.1f}",
                f"{sum(p.share for p in chosen):.2%}",
            ]
        )
    total = total_share(r)
    rows.append(["total", "", f"target ≤ {COST_TARGET:.0%}: {met(total <= COST_TARGET)}", "", f"{total:.2%}"])
    return Table(
        "d. A validator's work per window at 256 miners (GPU config)",
        ["part", "kind", "what, and its arithmetic", "seconds of the window", "share"],
        rows,
    )


def aggregation_table(r: Results) -> Table:
    losses = final_losses(r)
    windows = [record.window for record in next(iter(r.aggregation.values()))]
    fastest = max(r.speeds[:3], key=lambda m: m.steps)
    rows = []
    for variant, records in r.aggregation.items():
        weighting, clip = variant
        weights = [record.miners[fastest.hotkey].weight for record in records]
        factors = [record.clip_factors.get(fastest.hotkey, 1.0) for record in records]
        rows.append(
            [
                weighting,
                "yes" if clip else "no",
                f"{statistics.fmean(weights):.2f} × {statistics.fmean(factors):.2f}",
                *(f"{record.heldout:.4f}" for record in records),
                f"{losses[variant] - losses[BASELINE]:+.4f}",
            ]
        )
    return Table(
        "e. Held-out loss after each window, by the aggregation's weights",
        [
            "weights",
            "median-norm clip",
            f"{fastest.label} update: weight × clip factor (mean)",
            *(f"after window {w}" for w in windows),
            "last − equal, clipped",
        ],
        rows,
    )


def tables(r: Results) -> list[Table]:
    return [
        targets_table(r),
        speed_table(r),
        split_table(r),
        noise_table(r),
        cost_table(r),
        aggregation_table(r),
    ]


# -- the report ----------------------------------------------------------------------------------------


def setup_lines(r: Results) -> list[str]:
    c, p, m = r.config, r.plan, r.machine
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
        f"segments of {c.train.segment_steps} steps; codec `{c.codec.name}` {dict(c.codec.options)} with each "
        f"miner's error feedback; outer Nesterov SGD lr {c.outer.lr}, momentum {c.outer.momentum}; scoring: "
        f"{c.scoring.usefulness_sequences} sequences of each miner's last segment and of the reserve measured "
        f"per update, quality 0 up to a mark {MARK_Z_NONE:g} standard errors above 0 and 1 from {MARK_Z_FULL:g}; "
        f"moving average rate {c.scoring.ema_alpha}",
        f"- base: the initial model (held-out loss {r.heldout_initial:.4f}) pre-trained {p.pretrain_windows} "
        f"windows by three 1× miners (equal weights, the outer step) to {r.heldout_base:.4f}: from the initial "
        "model no update's mark of its own data can be measured, and a window whose marks cannot be measured "
        "pays every passing update by its tokens alone (quality 1), which would say nothing",
        f"- a 1× miner trains {p.unit_steps} steps a window; every miner trains on its own assigned data from "
        "the window's global model (windows are sequential: each trains from the model the last outer step "
        "produced). The 2-rank miner's step is split over 2 data-parallel ranks, replayed in one process as "
        "a validator replays it (`distrai/train/step.py`; `tests/test_train_parallel.py` shows gloo ranks "
        "end there bit for bit); two ranks of a 1× GPU each train 2× the steps",
        f"- rows a–c: windows {first}–{last} of {len(pay_miners(r))} miners together "
        "(the four speeds and the 4× compute split over 2 and 4 hotkeys; the 4× miner is the 1-hotkey row), "
        f"the outer step weighted by score (`accepted_by_rule`, the run's rule) and clipped to the median norm; "
        "pay: each window the moving averages take the scores and the weights follow them "
        "(`validators/scoring.py`), a miner's pay is its weights summed over the windows",
        f"- row e: the ¼×, 1× and 4× miners alone, from the same base, {p.aggregation_windows} windows per "
        "variant at equal tokens; held-out loss: `evaluate` over the whole held-out split",
    ]


def cost_lines(r: Results) -> list[str]:
    a, g, c = r.cost.accounting, r.cost.config, r.cost.update
    updates = a.miners * a.update_bytes
    return [
        f"The GPU config (`distrai/configs/gpu-subnet.toml`, {a.params:,} parameters) at {a.miners} miners and "
        f"{a.validators} validators: `challenge_miners` {g.verification.challenge_miners}, `replicas` "
        f"{g.verification.replicas}, `score_replicas` {g.scoring.score_replicas}, `score_rechecks` "
        f"{g.scoring.score_rechecks}, `usefulness_sequences` {g.scoring.usefulness_sequences} of "
        f"{g.data.seq_len:,} tokens. One miner's compute: h = {a.steps_per_window:,} steps a window, the "
        f"measured H100 pace (docs/gpu.md: 101,863 tokens/s, {r.cost.step_seconds:.3f} s a step of "
        f"{g.train.batch_size * g.data.seq_len:,} tokens, {a.steps_per_window * r.cost.step_seconds:,.0f} s). "
        "GPU parts are a share of that compute, on the validator's GPU of the same class; CPU parts are "
        f"seconds of one core of this machine, a share of the {g.windows.blocks_per_window * 12:,.0f}-s "
        "window; link parts are seconds at "
        f"{r.cost.link_bits / 1e6:.0f} Mbit/s, a share of the window. The total adds the shares: the validator "
        "doing one part after the other.",
        "",
        f"The update: {c.file_bytes / 1e6:.2f} MB as a file ({c.payload_bytes / 1e6:.2f} MB of payload"
        f"{'' if c.scale == 1 else ', scaled'}) measured here; `linkcheck.update_bytes` counts "
        f"{a.update_bytes / 1e6:.2f} MB (docs/links.md: 7.5 MB); {a.miners} updates are "
        f"{updates / 1e9:.2f} GB. A replayed reveal beyond its update is {a.reveal_bytes / 1e9:.2f} GB "
        f"({a.reveal_per_param:.2f} B/param, `linkcheck.reveal_bytes`).",
    ]


def markdown(r: Results, path) -> str:
    t = tables(r)
    lines = [
        "# Incentives: pay per verified work, and what checking it costs",
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
        "Quality: a window score over its tokens: 0 for a mark of the miner's last segment up to "
        f"{MARK_Z_NONE:g} standard errors above 0, 1 from {MARK_Z_FULL:g}, in proportion between "
        "(`validators/scoring.py`). Pay per token: a miner's pay over its tokens, over the 1× miner's.",
        "",
        "## b. Splitting",
        "",
        t[2].markdown(),
        "",
        "## c. Score noise",
        "",
        t[3].markdown(),
        "",
        "## d. A validator's cost per window",
        "",
        *cost_lines(r),
        "",
        t[4].markdown(),
        "",
        "## e. Aggregation weights",
        "",
        t[5].markdown(),
        "",
        "Equal: 1/n each; tokens: by the tokens each manifest commits to; score: tokens × quality, the run's "
        "rule (`accepted_by_rule`). Every variant trains the same miners for the same steps from the same base.",
        "",
        NOTES_MARKER,
        kept_notes(path),
    ]
    return "\n".join(lines)


def print_report(r: Results, console: Console) -> None:
    for table in tables(r):
        console.print(table.rich())
