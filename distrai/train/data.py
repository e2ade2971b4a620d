"""Training data in memory: the built-in corpus, tokenized into fixed-length sequences at start-up,
with a held-out split that is never trained on; and the shared definitions of the token stream.

The built-in corpus (`distrai/data/corpus.py`) serves tests and the local network; a real run trains from
prepared token shards (`distrai.data`), which share the definitions here: each document is
tokenized without special tokens and followed by the tokenizer's EOS, and the held-out split is
whole documents, evenly spaced over the source (document i is held out when ⌊(i+1)·f⌋ > ⌊i·f⌋ for
`heldout_fraction` f), so no held-out text is ever inside a training sequence. In memory, training
and held-out documents form two token streams, each cut into `seq_len`-token sequences (the ragged
end dropped). `assignment.py` indexes the training sequences only.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Protocol

import torch
from transformers import PreTrainedTokenizerBase

from distrai.data.corpus import offline_documents
from distrai.data.stream import is_heldout_document, tokenize_documents
from distrai.data.tokenizers import tokenizer_sha256
from distrai.train.hashing import hash_sections


class TrainingData(Protocol):
    """What training, replay and scoring read: `n_train` training sequences of `seq_len` tokens in
    units of `unit` (the assignment's unit: one shard of prepared data, one sequence in memory), and
    the held-out sequences."""

    @property
    def seq_len(self) -> int: ...

    @property
    def unit(self) -> int: ...

    @property
    def n_train(self) -> int: ...

    @property
    def waited_s(self) -> float:
        """Seconds spent waiting for data out of reach so far (none for data held in memory)."""
        ...

    @property
    def heldout(self) -> torch.Tensor: ...

    def batch(self, indices: Sequence[int]) -> torch.Tensor: ...

    def give_up_at(self, deadline: float | None) -> None:
        """Make a read of data out of reach wait until `deadline` (on `time.monotonic`) in place of
        its patience, then give up (`distrai.data.cache.ShardDeadline`): a training miner's stop
        time. None: its patience again."""
        ...


@dataclass(frozen=True)
class DataSpec:
    """The built-in corpus and how it is cut (field names follow the run config's `data`)."""

    seq_len: int = 128
    heldout_fraction: float = 0.01
    builtin_documents: int = 1000
    builtin_seed: int = 0

    def __post_init__(self) -> None:
        if self.seq_len < 2:
            raise ValueError(f"seq_len must be at least 2 (one input and one target), got {self.seq_len}")
        if not 0 < self.heldout_fraction <= 0.5:
            raise ValueError(f"heldout_fraction must be in (0, 0.5], got {self.heldout_fraction}")


@dataclass(frozen=True)
class TokenData:
    """Fixed-length token sequences, int64: `train` [N, T] and `heldout` [M, T], and the indices
    of the source documents that were held out."""

    train: torch.Tensor
    heldout: torch.Tensor
    heldout_documents: tuple[int, ...]
    unit = 1
    waited_s = 0.0

    def give_up_at(self, deadline: float | None) -> None:
        """Data in memory is never out of reach."""

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


_BUILT: dict[tuple[DataSpec, str], TokenData] = {}
"""The built-in corpora this process has made, by spec and tokenizer (`build_token_data`)."""
_BUILT_MOST = 4
"""how many `_BUILT` keeps (the oldest goes first): a process builds runtimes of one or two runs"""


def build_token_data(spec: DataSpec, tokenizer: PreTrainedTokenizerBase) -> TokenData:
    """Generate, tokenize and split the built-in corpus of `spec`. Each runtime gets its own copy of
    the tensors; a process that builds several runtimes of one run (a bench's or a test's in-process
    nodes, the local network's viewer) makes the corpus once (0.15 CPU-s for 1,000 documents)."""
    key = (spec, tokenizer_sha256(tokenizer))
    if key not in _BUILT:
        texts = (text.strip() for text in offline_documents(spec.builtin_documents, spec.builtin_seed))
        documents = tokenize_documents((text for text in texts if text), tokenizer)
        while len(_BUILT) >= _BUILT_MOST:
            del _BUILT[next(iter(_BUILT))]
        _BUILT[key] = split_documents(documents, spec.seq_len, spec.heldout_fraction)
    built = _BUILT[key]
    return TokenData(built.train.clone(), built.heldout.clone(), built.heldout_documents)
