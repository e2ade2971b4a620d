"""`distrai data prepare`: text → tokens → fixed-size shards in a store, and the manifest naming them.

Documents are read in order (`texts.py`), tokenized in chunks without special tokens and each
followed by EOS, and routed whole to the training or the held-out stream: document i is held out
when ⌊(i+1)·f⌋ > ⌊i·f⌋ for `heldout_fraction` f (evenly spaced), until the held-out stream holds
`heldout_max_tokens`; so no held-out text is ever inside a training shard, and the held-out split
stays the same size however large the dataset grows. Each stream is cut into shards of exactly
`shard_tokens` tokens (its last one shorter), each uploaded as a blob as soon as it is full: memory
holds one shard per stream, whatever the dataset's size. The same text, tokenizer and options give
the same shards and the same manifest hash on any machine.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass

import numpy as np
from transformers import PreTrainedTokenizerBase

from distrai.data.manifest import DTYPE_LIMITS, DataManifest, ShardEntry, TokenDtype
from distrai.data.stream import is_heldout_document, tokenize_documents
from distrai.data.tokenizers import describe_tokenizer
from distrai.store import Store

DEFAULT_SHARD_TOKENS = 1 << 20
"""2²⁰ tokens, 2 MiB of uint16: small enough that a miner's share of a window is many shards and a
validator's sample of one miner is one shard, large enough that 10¹⁰ tokens are 9,537 shards."""
DEFAULT_HELDOUT_MAX_TOKENS = 1 << 22


@dataclass(frozen=True)
class PrepareOptions:
    shard_tokens: int = DEFAULT_SHARD_TOKENS
    heldout_fraction: float = 0.001
    heldout_max_tokens: int = DEFAULT_HELDOUT_MAX_TOKENS
    max_tokens: int | None = None
    """tokens read from the source, both splits together; None: all of it"""

    def __post_init__(self) -> None:
        if self.shard_tokens < 2:
            raise ValueError(f"shard_tokens must be at least 2, got {self.shard_tokens}")
        if not 0 < self.heldout_fraction <= 0.5:
            raise ValueError(f"heldout_fraction must be in (0, 0.5], got {self.heldout_fraction}")
        if self.heldout_max_tokens < 1:
            raise ValueError(f"heldout_max_tokens must be at least 1, got {self.heldout_max_tokens}")
        if self.max_tokens is not None and self.max_tokens < 2:
            raise ValueError(f"max_tokens must be at least 2, got {self.max_tokens}")


@dataclass
class Progress:
    documents: int = 0
    tokens: int = 0
    shards: int = 0


def token_dtype(vocab_size: int) -> TokenDtype:
    """uint16 for vocabularies up to 65,536 tokens, else uint32."""
    for name, limit in DTYPE_LIMITS.items():
        if vocab_size <= limit:
            return name
    raise ValueError(f"a vocabulary of {vocab_size} tokens does not fit uint32")


class ShardBuffer:
    """One token stream, cut into shards of `shard_tokens`: `add` yields each shard as it fills,
    `finish` the shorter last one."""

    def __init__(self, shard_tokens: int, dtype: str):
        self._buffer = np.zeros(shard_tokens, dtype=np.dtype(dtype).newbyteorder("<"))
        self._filled = 0

    def add(self, tokens: list[int]) -> Iterator[bytes]:
        start = 0
        while start < len(tokens):
            take = min(len(tokens) - start, len(self._buffer) - self._filled)
            self._buffer[self._filled : self._filled + take] = tokens[start : start + take]
            self._filled += take
            start += take
            if self._filled == len(self._buffer):
                self._filled = 0
                yield self._buffer.tobytes()

    def finish(self) -> bytes | None:
        return self._buffer[: self._filled].tobytes() if self._filled else None


def prepare(
    texts: Iterable[str],
    tokenizer: PreTrainedTokenizerBase,
    tokenizer_name: str,
    source: str,
    store: Store,
    options: PrepareOptions,
    progress: Callable[[Progress], None] | None = None,
) -> DataManifest:
    """Tokenize `texts` into shards in `store`, then store the manifest (a blob, like the shards and
    the tokenizer) and return it; its `sha256()` is what a run config names."""
    entry, tokenizer_blob = describe_tokenizer(tokenizer, tokenizer_name)
    dtype = token_dtype(entry.vocab_size)
    buffers = {
        "train": ShardBuffer(options.shard_tokens, dtype),
        "heldout": ShardBuffer(options.shard_tokens, dtype),
    }
    shards: dict[str, list[ShardEntry]] = {"train": [], "heldout": []}
    seen = Progress()
    heldout_tokens = heldout_documents = 0

    def upload(split: str, data: bytes) -> None:
        shards[split].append(
            ShardEntry(sha256=store.put_blob(data), tokens=len(data) // np.dtype(dtype).itemsize)
        )
        seen.shards += 1

    for index, tokens in enumerate(tokenize_documents(texts, tokenizer, options.max_tokens)):
        split = "train"
        if (
            is_heldout_document(index, options.heldout_fraction)
            and heldout_tokens < options.heldout_max_tokens
        ):
            split = "heldout"
            tokens = tokens[: options.heldout_max_tokens - heldout_tokens]
            heldout_tokens += len(tokens)
            heldout_documents += 1
        if max(tokens, default=0) >= entry.vocab_size:
            raise ValueError(
                f"document {index} has token id {max(tokens)}, outside the vocabulary of {entry.vocab_size}"
            )
        for shard in buffers[split].add(tokens):
            upload(split, shard)
        seen.documents, seen.tokens = index + 1, seen.tokens + len(tokens)
        if progress is not None and index % 256 == 255:
            progress(seen)
    for split, buffer in buffers.items():
        last = buffer.finish()
        if last is not None:
            upload(split, last)
    if not shards["train"] or not shards["heldout"]:
        raise ValueError(
            f"{seen.documents} documents gave {len(shards['train'])} training and {len(shards['heldout'])} "
            "held-out shards; both need at least one (add text or raise heldout_fraction)"
        )
    store.put_blob(tokenizer_blob)
    manifest = DataManifest(
        source=source,
        dtype=dtype,
        shard_tokens=options.shard_tokens,
        tokenizer=entry,
        documents=seen.documents,
        heldout_documents=heldout_documents,
        train=tuple(shards["train"]),
        heldout=tuple(shards["heldout"]),
    )
    store.put_blob(manifest.to_bytes())
    if progress is not None:
        progress(seen)
    return manifest
