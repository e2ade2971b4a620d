"""A node's memory does not grow with the dataset: peak RSS of a node over prepared data of two sizes.

Prepares the built-in corpus with the byte tokenizer at two sizes (about 2·10⁶ and 10⁸ tokens) with
the project's `distrai data prepare` code, into file stores in a temporary folder, then starts a
fresh process per size that does what a node does with data in one window: build the runtime from a
run config naming the manifest, train a miner's whole window of its assigned batches (the shipped
CPU config's H and batch), read a validator's usefulness sample and reserve sample of every miner,
and evaluate the global model on the held-out split. Each process reports its peak resident memory
(`VmHWM`), the shards it fetched, and the bytes it holds on disk. Writes the table to
docs/data.md (or `--output`) between the markers of its "Memory" section, keeping the rest of the
file (a file without the markers gets the section at its end).

    python bench/data_memory.py                          # about 10 minutes on 2 cores; writes docs/data.md
    python bench/data_memory.py --quick                  # small sizes, every code path; prints only
    python bench/data_memory.py --quick --output FILE    # ... and writes the section into FILE
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import subprocess
import sys
import tempfile
import time
import tomllib
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from rich.console import Console
from rich.table import Table

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from distrai.data.access import DataAccess  # noqa: E402
from distrai.data.byte_tokenizer import byte_tokenizer  # noqa: E402
from distrai.data.prepare import PrepareOptions, prepare  # noqa: E402
from distrai.data.texts import TextSource, read_texts  # noqa: E402
from distrai.protocol.run import parse_run_config, shipped_config_path  # noqa: E402
from distrai.protocol.runtime import build_runtime  # noqa: E402
from distrai.store import open_store  # noqa: E402
from distrai.train.assignment import batch_indices, trained_sample, unassigned_indices  # noqa: E402
from distrai.train.evaluate import evaluate  # noqa: E402
from distrai.train.inner import inner_loop  # noqa: E402

DOC = ROOT / "docs" / "data.md"
BEGIN, END = "<!-- data_memory: begin -->", "<!-- data_memory: end -->"
MINERS = [f"miner-{i:03d}" for i in range(16)]
SHARD_TOKENS = 1 << 16
"""Small shards, so the smaller dataset still gives each of the 16 miners and the reserve a shard."""
QUICK_INNER_STEPS = 30
"""A --quick node's H: two segments of the CPU config's, the fewest its challenges allow."""
DOCUMENTS_PER_MILLION_TOKENS = 3200
"""The built-in corpus holds about 318 bytes (= byte tokens, EOS included) per document."""


@dataclass(frozen=True)
class Size:
    label: str
    documents: int


def node(store_url: str, manifest: str, cache: Path, inner_steps: int | None = None) -> dict:
    """One node's window of data work, in this process; what it measured. `inner_steps`: the miner's
    H, if not the shipped CPU config's."""
    document = tomllib.loads(shipped_config_path("cpu-localnet").read_text())
    document["data"] = {**document["data"], "manifest": manifest}
    if inner_steps is not None:
        document["train"] = {**document["train"], "inner_steps": inner_steps}
    config = parse_run_config(document)
    started = time.monotonic()
    runtime = build_runtime(config, data_access=DataAccess(open_store(store_url), cache))
    built_rss = peak_rss()
    data, cfg = runtime.data, config.train
    window, hotkey = 7, MINERS[3]

    def batch(t: int):
        return data.batch(
            batch_indices(runtime.run_id, window, hotkey, t, cfg.batch_size, data.n_train, MINERS, data.unit)
        )

    inner_loop(runtime.model, batch, runtime.loss_fn, runtime.inner, keep_states=False)
    seed, count = bytes(32), config.scoring.usefulness_sequences
    for miner in MINERS:
        data.batch(
            trained_sample(
                runtime.run_id,
                window,
                seed,
                miner,
                count,
                range(cfg.inner_steps),
                cfg.batch_size,
                data.n_train,
                MINERS,
                data.unit,
            )
        )
    data.batch(unassigned_indices(runtime.run_id, window, count, data.n_train, MINERS, seed.hex(), data.unit))
    heldout = evaluate(runtime.model, data.heldout, loss_fn=runtime.loss_fn)
    return {
        "seconds": time.monotonic() - started,
        "rss_built": built_rss,
        "rss_peak": peak_rss(),
        "shards_total": len(data.manifest.train),
        "shards_fetched": len(list(cache.glob("*.bin"))),
        "bytes_fetched": data.cache.fetched_bytes,
        "bytes_on_disk": sum(p.stat().st_size for p in cache.iterdir()),
        "heldout_loss": heldout,
        "heldout_sequences": int(data.heldout.shape[0]),
        "inner_steps": cfg.inner_steps,
    }


def peak_rss() -> int:
    """Peak resident memory of this process since it started its program, in bytes: `VmHWM` (the
    `ru_maxrss` of a child carries its parent's peak across exec, which would count the prepared
    text of the process that started the node)."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) * 1024
    raise RuntimeError("no VmHWM in /proc/self/status: this benchmark measures memory on Linux")


def prepare_size(size: Size, folder: Path, shard_tokens: int, heldout_fraction: float) -> dict:
    store_url = f"file://{folder / 'store'}"
    source = TextSource("builtin", builtin_documents=size.documents)
    started = time.monotonic()
    manifest = prepare(
        read_texts(source),
        byte_tokenizer(),
        "byte",
        source.describe(),
        open_store(store_url),
        PrepareOptions(shard_tokens=shard_tokens, heldout_fraction=heldout_fraction),
    )
    seconds = time.monotonic() - started
    tokens = manifest.train_tokens + manifest.heldout_tokens
    return {
        "label": size.label,
        "store_url": store_url,
        "manifest": manifest.sha256(),
        "tokens": tokens,
        "prepare_seconds": seconds,
    }


def run_node(prepared: dict, folder: Path, inner_steps: int | None) -> dict:
    """A fresh process per node, so its peak memory is its own."""
    out = subprocess.run(
        [
            sys.executable,
            __file__,
            "--node",
            prepared["store_url"],
            prepared["manifest"],
            str(folder / "cache"),
            *(["--inner-steps", str(inner_steps)] if inner_steps is not None else []),
        ],
        capture_output=True,
        text=True,
        env={**os.environ, "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1"},
    )
    if out.returncode != 0:
        raise SystemExit(f"the node process failed:\n{out.stderr[-3000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def mib(n: float) -> str:
    return f"{n / (1 << 20):,.1f}"


def report(rows: list[dict], command: str, started: float, shard_tokens: int, heldout_fraction: float) -> str:
    inner_steps = rows[0]["node"]["inner_steps"]
    lines = [
        BEGIN,
        f"Measured by `{command}` on {datetime.now(UTC):%Y-%m-%d %H:%M} UTC, {time.monotonic() - started:.0f} s "
        f"in all (2 shared cores, torch CPU). Each node is a fresh process: the shipped CPU run config (tiny "
        f"model, seq_len 64, batch 8, H {inner_steps}) over the prepared data, one miner's window of {len(MINERS)} miners, "
        "every miner's usefulness sample and reserve sample as a validator reads them, and the held-out "
        "evaluation. Peak RSS is the process's `VmHWM`.",
        "",
        f"| dataset | tokens | shards ({shard_tokens:,} tokens) | prepare (s) | prepare tokens/s | node RSS after build (MiB) "
        "| node peak RSS (MiB) | shards fetched | MiB fetched | MiB on disk |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        n = r["node"]
        lines.append(
            f"| {r['label']} | {r['tokens']:,} | {n['shards_total']:,} | {r['prepare_seconds']:.0f} | "
            f"{r['tokens'] / r['prepare_seconds']:,.0f} | {mib(n['rss_built'])} | {mib(n['rss_peak'])} | "
            f"{n['shards_fetched']} | {mib(n['bytes_fetched'])} | {mib(n['bytes_on_disk'])} |"
        )
    small, large = rows[0]["node"], rows[-1]["node"]
    ratio = rows[-1]["tokens"] / rows[0]["tokens"]
    lines += [
        "",
        f"The dataset grew {ratio:,.0f}×; the node's peak RSS went from {mib(small['rss_peak'])} to "
        f"{mib(large['rss_peak'])} MiB ({large['rss_peak'] / small['rss_peak']:.2f}×). Held out: "
        f"{small['heldout_sequences']:,} and {large['heldout_sequences']:,} sequences ({heldout_fraction:.1%} of "
        "the documents, at most 2²² tokens whatever the size).",
        END,
    ]
    return "\n".join(lines)


def write_section(path: Path, text: str) -> None:
    """Replace the section between the markers in `path`, keeping the rest; append it where the
    file has no markers (or does not exist)."""
    doc = path.read_text() if path.exists() else ""
    if BEGIN in doc and END in doc:
        start, end = doc.index(BEGIN), doc.index(END) + len(END)
        path.write_text(doc[:start] + text + doc[end:])
    else:
        path.write_text(doc + ("\n" if doc and not doc.endswith("\n") else "") + text + "\n")


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--quick", action="store_true", help="small sizes, for the smoke test")
    parser.add_argument(
        "--output",
        type=Path,
        default=None,
        help=f"the file whose section to rewrite (default: {DOC.relative_to(ROOT)}; a --quick run prints only)",
    )
    parser.add_argument("--node", nargs=3, metavar=("STORE", "MANIFEST", "CACHE"), help=argparse.SUPPRESS)
    parser.add_argument("--inner-steps", type=int, default=None, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.node:
        print(json.dumps(node(args.node[0], args.node[1], Path(args.node[2]), args.inner_steps)))
        return 0
    started = time.monotonic()
    shard_tokens = 4096 if args.quick else SHARD_TOKENS
    heldout_fraction = 0.02 if args.quick else 0.001
    sizes = (
        [Size("small", 300), Size("large", 3000)]
        if args.quick
        else [
            Size("2·10⁶ tokens", 2 * DOCUMENTS_PER_MILLION_TOKENS),
            Size("10⁸ tokens", 100 * DOCUMENTS_PER_MILLION_TOKENS),
        ]
    )
    console = Console()
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for size in sizes:
            folder = Path(tmp) / str(size.documents)
            console.print(f"preparing {size.label} ({size.documents:,} documents)…")
            prepared = prepare_size(size, folder, shard_tokens, heldout_fraction)
            console.print(f"  {prepared['tokens']:,} tokens in {prepared['prepare_seconds']:.0f} s; node…")
            prepared["node"] = run_node(prepared, folder, QUICK_INNER_STEPS if args.quick else None)
            rows.append(prepared)
    command = shlex.join(["python", "bench/data_memory.py", *argv])
    text = report(rows, command, started, shard_tokens, heldout_fraction)
    table = Table("dataset", "tokens", "node peak RSS (MiB)", "shards fetched / total")
    for r in rows:
        table.add_row(
            r["label"],
            f"{r['tokens']:,}",
            mib(r["node"]["rss_peak"]),
            f"{r['node']['shards_fetched']} / {r['node']['shards_total']}",
        )
    console.print(table)
    output = args.output or (None if args.quick else DOC)
    if output is None:
        print(text)
    else:
        write_section(output, text)
        console.print(f"wrote {output}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
