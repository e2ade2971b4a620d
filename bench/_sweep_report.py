"""The shipped combination and the sweep around it (`convergence.py --sweep`): a table of the rows
`_config.sweep_choices` adds, beside the shipped row, and the decision they support: the setting with
the lowest held-out loss, and where the shipped one ranks."""

from __future__ import annotations

from _config import BenchConfig, CodecChoice
from rich.console import Console
from rich.table import Table

HEADERS = (
    "setting",
    "outer lr",
    "momentum",
    "error-feedback decay",
    "windows",
    "held-out loss",
    "ratio to DDP",
    "ratio to shipped",
)


def _rows(config: BenchConfig, rows: list[dict]) -> list[tuple[CodecChoice, dict]]:
    """The shipped row, then the sweep's, as they ran (none without a sweep)."""
    by_label = {c.label: c for c in config.codecs}
    chosen = [(by_label[r["method"]], r) for r in rows if r["method"] in by_label]
    sweep = [(c, r) for c, r in chosen if c.sweep]
    shipped = [(c, r) for c, r in chosen if not c.sweep and c.pipelined]
    return shipped + sweep if sweep and shipped else []


def sweep_cells(config: BenchConfig, rows: list[dict]) -> list[list[str]]:
    """The sweep table's cells, the shipped row first."""
    chosen = _rows(config, rows)
    if not chosen:
        return []
    ddp, shipped = rows[0]["heldout_loss"], chosen[0][1]["heldout_loss"]
    return [
        [
            "as shipped" if not choice.sweep else choice.label,
            f"{choice.outer.lr:g}",
            f"{choice.outer.momentum:g}",
            f"{choice.options.get('decay', '–')}",
            "pipelined" if choice.pipelined else "sequential",
            f"{row['heldout_loss']:.4f}",
            f"{row['heldout_loss'] / ddp:.4f}",
            f"{row['heldout_loss'] / shipped:.4f}",
        ]
        for choice, row in chosen
    ]


def decision(config: BenchConfig, rows: list[dict]) -> str:
    """Which setting trained best, and where the shipped one ranks (empty without a sweep)."""
    chosen = _rows(config, rows)
    if not chosen:
        return ""
    shipped_loss = chosen[0][1]["heldout_loss"]

    def best_of(pairs: list[tuple[CodecChoice, dict]]) -> str:
        choice, row = min(pairs, key=lambda pair: pair[1]["heldout_loss"])
        name = "the shipped combination" if not choice.sweep else choice.label
        return f"{name} ({row['heldout_loss']:.4f}, {row['heldout_loss'] / shipped_loss:.4f}× the shipped combination's)"

    ranked = sorted(chosen, key=lambda pair: pair[1]["heldout_loss"])
    rank = 1 + [choice.sweep for choice, _ in ranked].index(False)
    same_windows = [(c, r) for c, r in chosen if c.pipelined == chosen[0][0].pipelined]
    windows = "pipelined" if chosen[0][0].pipelined else "sequential"
    return (
        f"Lowest held-out loss: {best_of(chosen)}; with the shipped {windows} windows, what the outer step and the "
        f"codec can change: {best_of(same_windows)}. The shipped combination ranks {rank} of {len(chosen)}."
    )


def sweep_lines(config: BenchConfig, rows: list[dict]) -> list[str]:
    """The report's subsection on the sweep (nothing without one)."""
    cells = sweep_cells(config, rows)
    if not cells:
        return []
    table = ["| " + " | ".join(HEADERS) + " |", "|" + "---|" * len(HEADERS)]
    table += ["| " + " | ".join(row) + " |" for row in cells]
    return [
        "### The shipped combination and the sweep around it",
        "",
        *table,
        "",
        'Every row is the shipped combination ("DiLoCo as shipped" above) with one setting changed: the outer '
        "learning rate and Nesterov momentum under the one-round delay, every pair; the error feedback's decay "
        "at the shipped outer step; and the shipped step without the delay (sequential rounds). The same "
        "initial model, batches, inner recipe and H as every row of the table above.",
        "",
        f"- {decision(config, rows)}",
        "",
    ]


def print_sweep(config: BenchConfig, rows: list[dict], console: Console) -> None:
    cells = sweep_cells(config, rows)
    if not cells:
        return
    table = Table(title="The shipped combination and the sweep around it")
    for header in HEADERS:
        table.add_column(header, justify="left" if header in ("setting", "windows") else "right")
    for row in cells:
        table.add_row(*row)
    console.print(table)
    console.print(f"• {decision(config, rows)}")
