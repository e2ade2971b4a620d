"""A prepared dataset's tokenizer travels with it: its `tokenizer.json` is a blob the manifest names,
so every node rebuilds exactly the tokenizer that made the shards, with no hub and no folder of its
own. Only fast (Rust `tokenizers`) tokenizers can be serialized this way; every common BPE has one."""

from __future__ import annotations

import hashlib

from tokenizers import Tokenizer
from transformers import PreTrainedTokenizerBase, PreTrainedTokenizerFast

from distrai.data.manifest import DataManifestError, TokenizerEntry


def tokenizer_json(tokenizer: PreTrainedTokenizerBase) -> bytes:
    """The tokenizer's `tokenizer.json`; `ValueError` for a tokenizer without a fast backend."""
    backend = getattr(tokenizer, "backend_tokenizer", None)
    if backend is None:
        raise ValueError(
            f"tokenizer {type(tokenizer).__name__} has no fast backend, so it cannot be shipped with the "
            "data; load it with use_fast=True or convert it"
        )
    return backend.to_str().encode()


def tokenizer_sha256(tokenizer: PreTrainedTokenizerBase) -> str:
    return hashlib.sha256(tokenizer_json(tokenizer)).hexdigest()


def describe_tokenizer(tokenizer: PreTrainedTokenizerBase, name: str) -> tuple[TokenizerEntry, bytes]:
    """The manifest's entry for `tokenizer` and the blob it names. The tokenizer must end documents
    with an EOS token, which prepared data puts between documents."""
    if tokenizer.eos_token is None:
        raise ValueError(f"tokenizer {name!r} has no EOS token to put between documents")
    blob = tokenizer_json(tokenizer)
    entry = TokenizerEntry(
        sha256=hashlib.sha256(blob).hexdigest(),
        name=name[:256],
        vocab_size=len(tokenizer),
        eos_token=tokenizer.eos_token,
        bos_token=tokenizer.bos_token,
        pad_token=tokenizer.pad_token,
        unk_token=tokenizer.unk_token,
    )
    return entry, blob


def rebuild_tokenizer(entry: TokenizerEntry, blob: bytes) -> PreTrainedTokenizerFast:
    """The tokenizer of `entry` from its `tokenizer.json` blob, checked against the entry."""
    try:
        backend = Tokenizer.from_str(blob.decode())
    except Exception as exc:  # bad UTF-8, or the Rust parser's plain Exception
        raise DataManifestError(
            f"tokenizer blob {entry.sha256} ({entry.name}) does not load: {exc}"
        ) from None
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=backend,
        eos_token=entry.eos_token,
        bos_token=entry.bos_token,
        pad_token=entry.pad_token,
        unk_token=entry.unk_token,
    )
    if len(tokenizer) != entry.vocab_size:
        raise DataManifestError(
            f"tokenizer {entry.name} rebuilt with {len(tokenizer)} tokens, the manifest says {entry.vocab_size}"
        )
    return tokenizer
