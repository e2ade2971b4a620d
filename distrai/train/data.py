"""Training data: text from `datasets`, tokenized into fixed-length sequences, with a held-out
split that is never trained on.

Sources: `builtin` (the offline corpus of `corpus.py`), local text / jsonl / parquet `files`,
or a `hub` dataset (id, config, split, text field, at a revision; streamed). Every source is
read through a streaming `datasets` iterator in file / row order, so the same spec gives the
same documents everywhere. Each document is stripped of surrounding whitespace (empty ones are
dropped), tokenized without special tokens and followed by the tokenizer's EOS.

Held-out split: whole documents, evenly spaced over the source (document i is held out when
⌊(i+1)·f⌋ > ⌊i·f⌋ for `heldout_fraction` f), so no held-out text is ever inside a training
sequence. Training and held-out documents form two token streams, each cut into `seq_len`-token
sequences (the ragged end dropped). `max_tokens` bounds the tokens read from the source, both
streams together. `assignment.py` indexes the training sequences only.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import datasets
import torch
from transformers import PreTrainedTokenizerBase

from distrai.train.corpus import offline_documents
from distrai.train.hashing import hash_sections

SOURCES = ("builtin", "files", "hub")
FILE_FORMATS = {
    ".txt": "text",
    ".text": "text",
    ".md": "text",
    ".jsonl": "json",
    ".json": "json",
    ".parquet": "parquet",
}
TOKENIZE_CHUNK = 256


@dataclass(frozen=True)
class DataSpec:
    """Where the text comes from and how it is cut (field names follow the run config's `data`)."""

    source: str = "builtin"
    paths: tuple[str, ...] = ()
    hub_id: str | None = None
    hub_config: str | None = None
    hub_revision: str | None = None
    split: str = "train"
    text_field: str = "text"
    seq_len: int = 128
    max_tokens: int | None = None
    heldout_fraction: float = 0.01
    builtin_documents: int = 1000
    builtin_seed: int = 0

    def __post_init__(self) -> None:
        if self.source not in SOURCES:
            raise ValueError(f"unknown data source {self.source!r}; choose one of {SOURCES}")
        if self.source == "files" and not self.paths:
            raise ValueError("data source 'files' needs at least one path")
        if self.source == "hub" and not self.hub_id:
            raise ValueError("data source 'hub' needs hub_id")
        if self.source == "hub" and self.max_tokens is None:
            raise ValueError("data source 'hub' needs max_tokens: a streamed dataset has no end to wait for")
        if self.seq_len < 2:
            raise ValueError(f"seq_len must be at least 2 (one input and one target), got {self.seq_len}")
        if not 0 < self.heldout_fraction <= 0.5:
            raise ValueError(f"heldout_fraction must be in (0, 0.5], got {self.heldout_fraction}")
        if self.max_tokens is not None and self.max_tokens < self.seq_len:
            raise ValueError(f"max_tokens={self.max_tokens} is shorter than one sequence ({self.seq_len})")


@dataclass(frozen=True)
class TokenData:
    """Fixed-length token sequences, int64: `train` [N, T] and `heldout` [M, T], and the indices
    of the source documents that were held out."""

    train: torch.Tensor
    heldout: torch.Tensor
    heldout_documents: tuple[int, ...]

    @property
    def n_train(self) -> int:
        return self.train.shape[0]

    @property
    def seq_len(self) -> int:
        return self.train.shape[1]

    def batch(self, indices: Sequence[int]) -> torch.Tensor:
        """The training sequences at `indices` (as returned by `assignment.batch_indices`)."""
        bad = [i for i in indices if not 0 <= i < self.n_train]
        if bad:
            raise IndexError(f"training sequence indices {bad[:5]} outside [0, {self.n_train})")
        return self.train[torch.tensor(list(indices), dtype=torch.long)]

    def digest(self) -> str:
        """Canonical hash of the token data, to check that two machines hold the same data."""
        documents = torch.tensor(self.heldout_documents, dtype=torch.int64)
        return hash_sections(
            "token_data",
            {"tokens": {"train": self.train, "heldout": self.heldout}, "split": {"documents": documents}},
        )


def file_format(paths: Sequence[str]) -> str:
    """The one `datasets` builder ("text", "json", "parquet") that reads all `paths`."""
    formats = set()
    for path in paths:
        suffix = Path(path).suffix.lower()
        if suffix not in FILE_FORMATS:
            raise ValueError(f"cannot tell the format of {path!r}; use one of {sorted(FILE_FORMATS)}")
        if not Path(path).is_file():
            raise FileNotFoundError(f"data file not found: {path}")
        formats.add(FILE_FORMATS[suffix])
    if len(formats) != 1:
        raise ValueError(f"data files mix formats {sorted(formats)}; give files of one format")
    return formats.pop()


def load_texts(spec: DataSpec) -> Iterator[str]:
    """The documents of `spec`, in order, as strings."""
    if spec.source == "builtin":
        rows: Iterable = datasets.Dataset.from_dict(
            {spec.text_field: offline_documents(spec.builtin_documents, spec.builtin_seed)}
        )
    elif spec.source == "files":
        builder = file_format(spec.paths)
        options = {"sample_by": "paragraph"} if builder == "text" else {}
        rows = datasets.load_dataset(
            builder, data_files=list(spec.paths), split="train", streaming=True, **options
        )
    else:
        rows = datasets.load_dataset(
            spec.hub_id, spec.hub_config, split=spec.split, revision=spec.hub_revision, streaming=True
        )
    for row in rows:
        if spec.text_field not in row:
            raise ValueError(f"data rows have no field {spec.text_field!r}; fields are {sorted(row)}")
        text = row[spec.text_field]
        if not isinstance(text, str):
            raise ValueError(f"field {spec.text_field!r} holds {type(text).__name__}, not text")
        text = text.strip()
        if text:
            yield text


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


def to_sequences(stream: list[int], seq_len: int) -> torch.Tensor:
    """Cut a flat token list into int64 rows [len // seq_len, seq_len], dropping the ragged end."""
    rows = len(stream) // seq_len
    return torch.tensor(stream[: rows * seq_len], dtype=torch.long).reshape(rows, seq_len)


def split_documents(documents: Iterable[list[int]], seq_len: int, heldout_fraction: float) -> TokenData:
    """Route tokenized documents to the training or held-out stream and cut both into rows."""
    train: list[int] = []
    heldout: list[int] = []
    heldout_documents: list[int] = []
    for index, tokens in enumerate(documents):
        if is_heldout_document(index, heldout_fraction):
            heldout.extend(tokens)
            heldout_documents.append(index)
        else:
            train.extend(tokens)
    data = TokenData(
        train=to_sequences(train, seq_len),
        heldout=to_sequences(heldout, seq_len),
        heldout_documents=tuple(heldout_documents),
    )
    if data.n_train == 0 or data.heldout.shape[0] == 0:
        raise ValueError(
            f"the data gives {data.n_train} training and {data.heldout.shape[0]} held-out sequences of "
            f"{seq_len} tokens; both must be at least one (add data, shorten seq_len or change heldout_fraction)"
        )
    return data


def build_token_data(spec: DataSpec, tokenizer: PreTrainedTokenizerBase) -> TokenData:
    """Read, tokenize and split the data of `spec`."""
    documents = tokenize_documents(load_texts(spec), tokenizer, spec.max_tokens)
    return split_documents(documents, spec.seq_len, spec.heldout_fraction)
