"""`distrai data prepare`: the subnet owner's command that turns text into the run's token shards."""

from __future__ import annotations

import argparse
import time
from pathlib import Path
from typing import TYPE_CHECKING
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

from rich.console import Console
from rich.markup import escape
from rich.progress import Progress as Bar
from rich.progress import SpinnerColumn, TextColumn, TimeElapsedColumn
from rich.table import Table

RUN_ID_NOTE = (
    "adding these lines to the run config changes its run id: publish the finished file with "
    "`distrai run publish --run.config FILE` (the nodes refuse a run id the owner has not published)"
)

if TYPE_CHECKING:
    from transformers import PreTrainedTokenizerBase

    from distrai.data.texts import TextSource


def add_data_commands(groups: argparse._SubParsersAction) -> None:
    data = groups.add_parser("data", help="prepared token data").add_subparsers(dest="command", required=True)
    prep = data.add_parser(
        "prepare",
        help="tokenize text into token shards in a store and print the manifest hash a run config names",
        description="Read documents (local files, a hub dataset or the built-in corpus), tokenize them, "
        "cut them into shards of --shard-tokens tokens with a held-out split of whole documents, upload "
        "each shard to the store as a content-addressed blob, and print the hash of the manifest naming "
        "them: the run config's data.manifest (docs/data.md).",
    )
    source = prep.add_mutually_exclusive_group(required=True)
    source.add_argument(
        "--files", nargs="+", metavar="PATH", help="local .txt/.md/.py, .jsonl/.json or .parquet files"
    )
    source.add_argument("--hub", metavar="ID", help="a Hugging Face dataset id, streamed")
    source.add_argument("--builtin", type=int, metavar="DOCUMENTS", help="the built-in offline corpus")
    prep.add_argument("--hub.config", dest="hub_config", default=None, help="the hub dataset's config")
    prep.add_argument(
        "--hub.revision", dest="hub_revision", default=None, help="commit or tag (default main)"
    )
    prep.add_argument("--split", default="train", help="the hub dataset's split (default train)")
    prep.add_argument("--builtin.seed", dest="builtin_seed", type=int, default=0)
    prep.add_argument("--text-field", dest="text_field", default="text", help="the rows' text field")
    prep.add_argument(
        "--sample-by",
        dest="sample_by",
        default="paragraph",
        help="a text file's documents: paragraph (blank-line separated), document (the whole file) or line",
    )
    prep.add_argument(
        "--tokenizer",
        required=True,
        metavar="byte|PATH|ID",
        help="'byte' (the offline byte tokenizer), a local tokenizer folder, or a hub id",
    )
    prep.add_argument("--tokenizer.revision", dest="tokenizer_revision", default=None)
    prep.add_argument(
        "--shard-tokens", dest="shard_tokens", type=int, default=None, help="tokens per shard (default 2^20)"
    )
    prep.add_argument(
        "--heldout-fraction",
        dest="heldout_fraction",
        type=float,
        default=None,
        help="share of documents held out (default 0.001)",
    )
    prep.add_argument(
        "--heldout-max-tokens",
        dest="heldout_max_tokens",
        type=int,
        default=None,
        help="most held-out tokens, whatever the dataset's size (default 2^22)",
    )
    prep.add_argument(
        "--max-tokens", dest="max_tokens", type=int, default=None, help="stop after this many tokens"
    )
    prep.add_argument(
        "--store.url", dest="store_url", required=True, help="file:///path or s3://bucket/prefix"
    )
    prep.add_argument("--store.endpoint", dest="store_endpoint", default=None)
    prep.add_argument(
        "--run.template",
        dest="run_template",
        type=Path,
        metavar="PATH",
        help="a run config whose [data] table the prepared data's lines replace, written to --run.out",
    )
    prep.add_argument(
        "--run.out", dest="run_out", type=Path, metavar="PATH", help="where to write that run config"
    )


def load_prepare_tokenizer(name: str, revision: str | None) -> PreTrainedTokenizerBase:
    """'byte', a local tokenizer folder or a hub id (imported here: `distrai` starts fast)."""
    from transformers import AutoTokenizer

    from distrai.data.byte_tokenizer import byte_tokenizer

    if name == "byte":
        return byte_tokenizer()
    return AutoTokenizer.from_pretrained(name, revision=revision)


def text_source(args: argparse.Namespace) -> TextSource:
    from distrai.data.texts import TextSource

    if args.files:
        return TextSource(
            "files", paths=tuple(args.files), text_field=args.text_field, sample_by=args.sample_by
        )
    if args.hub:
        return TextSource(
            "hub",
            hub_id=args.hub,
            hub_config=args.hub_config,
            hub_revision=args.hub_revision,
            split=args.split,
            text_field=args.text_field,
        )
    return TextSource("builtin", builtin_documents=args.builtin, builtin_seed=args.builtin_seed)


def prepared_data(store_url: str, digest: str) -> dict[str, str]:
    """The `[data]` keys that name the prepared data: the store's URL, its endpoint (taken out of the
    URL's query, where the store keeps it) a key of its own."""
    parts = urlsplit(store_url)
    query = parse_qsl(parts.query)
    endpoint = [value for name, value in query if name == "endpoint"]
    rest = urlencode([(name, value) for name, value in query if name != "endpoint"], safe=":/")
    data = {"source": "prepared", "manifest": digest, "store": urlunsplit(parts._replace(query=rest))}
    return data | ({"endpoint": endpoint[0]} if endpoint else {})


def run_config_lines(store_url: str, digest: str) -> str:
    """The run config lines that name the prepared data (`prepared_data`)."""
    data = prepared_data(store_url, digest)
    return "\n".join(
        ['tokenizer = "data"', "", "[data]", *(f'{key} = "{value}"' for key, value in data.items())]
    )


def cmd_data_prepare(args: argparse.Namespace, console: Console) -> tuple[str, str]:
    from distrai.data.prepare import PrepareOptions, Progress, prepare
    from distrai.data.texts import read_texts
    from distrai.store import open_store

    source = text_source(args)
    given = {
        "shard_tokens": args.shard_tokens,
        "heldout_fraction": args.heldout_fraction,
        "heldout_max_tokens": args.heldout_max_tokens,
        "max_tokens": args.max_tokens,
    }
    options = PrepareOptions(**{name: value for name, value in given.items() if value is not None})
    tokenizer = load_prepare_tokenizer(args.tokenizer, args.tokenizer_revision)
    name = (
        args.tokenizer if args.tokenizer_revision is None else f"{args.tokenizer}@{args.tokenizer_revision}"
    )
    store = open_store(args.store_url, endpoint=args.store_endpoint)
    started = time.monotonic()
    with Bar(SpinnerColumn(), TextColumn("{task.description}"), TimeElapsedColumn(), console=console) as bar:
        task = bar.add_task("reading")

        def show(seen: Progress) -> None:
            rate = seen.tokens / max(time.monotonic() - started, 1e-9)
            bar.update(
                task,
                description=f"{seen.documents:,} documents, {seen.tokens:,} tokens, {seen.shards:,} shards "
                f"({rate:,.0f} tokens/s)",
            )

        manifest = prepare(read_texts(source), tokenizer, name, source.describe(), store, options, show)
    digest = manifest.sha256()
    table = Table(title=f"prepared data → {store.url}", show_header=False)
    table.add_column(style="bold")
    table.add_column(justify="right")
    for label, value in (
        ("source", source.describe()),
        (
            "tokenizer",
            f"{manifest.tokenizer.name} ({manifest.tokenizer.vocab_size:,} tokens, {manifest.dtype})",
        ),
        ("documents", f"{manifest.documents:,} ({manifest.heldout_documents:,} held out)"),
        ("training tokens", f"{manifest.train_tokens:,} in {len(manifest.train):,} shards"),
        ("held-out tokens", f"{manifest.heldout_tokens:,} in {len(manifest.heldout):,} shards"),
        ("bytes", f"{(manifest.train_tokens + manifest.heldout_tokens) * manifest.token_bytes:,}"),
        ("seconds", f"{time.monotonic() - started:.1f}"),
        ("manifest", digest),
    ):
        table.add_row(label, value)
    console.print(table)
    if args.run_out is None:  # else the caller writes the run config (`distrai.run_cmd`)
        console.print("in the run config:\n" + escape(run_config_lines(store.url, digest)), highlight=False)
        console.print(RUN_ID_NOTE, highlight=False)
    return store.url, digest
