"""The token stream both kinds of data share: each document tokenized without special tokens and
followed by the tokenizer's EOS, and the held-out split of whole, evenly spaced documents."""

from __future__ import annotations

import math
from collections.abc import Iterable, Iterator

from transformers import PreTrainedTokenizerBase

TOKENIZE_CHUNK = 256


def is_heldout_document(index: int, fraction: float) -> bool:
    """Whether document `index` belongs to the held-out split (evenly spaced, share `fraction`)."""
    return math.floor((index + 1) * fraction) > math.floor(index * fraction)


def tokenize_documents(
    texts: Iterable[str], tokenizer: PreTrainedTokenizerBase, max_tokens: int | None = None
) -> Iterator[list[int]]:
    """Each document's token ids followed by EOS, in order, stopping after `max_tokens` in all
    (the last document cut to fit)."""
    eos = [] if tokenizer.eos_token_id is None else [tokenizer.eos_token_id]
    remaining = max_tokens
    for chunk in _chunks(texts, TOKENIZE_CHUNK):
        for ids in tokenizer(chunk, add_special_tokens=False)["input_ids"]:
            tokens = ids + eos
            if remaining is not None:
                tokens = tokens[:remaining]
                remaining -= len(tokens)
            yield tokens
            if remaining == 0:
                return


def _chunks(items: Iterable[str], size: int) -> Iterator[list[str]]:
    chunk: list[str] = []
    for item in items:
        chunk.append(item)
        if len(chunk) == size:
            yield chunk
            chunk = []
    if chunk:
        yield chunk
