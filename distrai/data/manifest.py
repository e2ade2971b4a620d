"""The manifest of a prepared dataset: which token shards it holds, made by which tokenizer.

A prepared dataset is a list of shards, each a flat file of little-endian token ids (`uint16`, or
`uint32` for vocabularies above 65,536), stored content-addressed (`blobs/<sha256>`), plus the
tokenizer that made them (its `tokenizer.json`, also a blob) and this manifest, written as
canonical JSON and stored as a blob too. The run config names the manifest by its SHA-256, so the
hash of one small file pins every token of the run: a node that fetches the manifest and the shards
from any mirror checks each against its hash before use.

Every training shard holds exactly `shard_tokens` tokens but the last, which may hold fewer; so a
sequence of T tokens is at a fixed (shard, offset), and a shard of `shard_tokens // T` sequences is
the unit a miner is assigned (`distrai.train.assignment`). The held-out split is whole documents,
kept in shards of their own that no assignment ever reaches.
"""

from __future__ import annotations

import hashlib
import json
from typing import Final, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

FORMAT: Final = "distrai-tokens-1"
HEX64 = r"^[0-9a-f]{64}$"
TokenDtype = Literal["uint16", "uint32"]
DTYPE_LIMITS: dict[TokenDtype, int] = {"uint16": 1 << 16, "uint32": 1 << 32}
DTYPE_BYTES = {"uint16": 2, "uint32": 4}
MAX_MANIFEST_BYTES = 64 << 20
"""The largest manifest a node reads: 64 MiB lists about 700,000 shards (10¹² tokens in shards of
2²⁰)."""


class DataManifestError(ValueError):
    """A data manifest that cannot be read, or does not describe a usable dataset."""


class _Frozen(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)


class ShardEntry(_Frozen):
    sha256: str = Field(pattern=HEX64)
    tokens: int = Field(ge=1)


class TokenizerEntry(_Frozen):
    """The tokenizer that made the shards: its `tokenizer.json` blob and its special tokens."""

    sha256: str = Field(pattern=HEX64, description="sha256 of the tokenizer.json blob")
    name: str = Field(min_length=1, max_length=256, description="where it came from (a folder or hub id)")
    vocab_size: int = Field(ge=2)
    eos_token: str = Field(min_length=1)
    bos_token: str | None = None
    pad_token: str | None = None
    unk_token: str | None = None


class DataManifest(_Frozen):
    format: Literal["distrai-tokens-1"] = FORMAT
    source: str = Field(min_length=1, max_length=1024, description="what text was prepared, for people")
    dtype: TokenDtype
    shard_tokens: int = Field(ge=2)
    tokenizer: TokenizerEntry
    documents: int = Field(ge=2, description="documents read, held-out ones included")
    heldout_documents: int = Field(ge=1)
    train: tuple[ShardEntry, ...] = Field(min_length=1)
    heldout: tuple[ShardEntry, ...] = Field(min_length=1)

    @model_validator(mode="after")
    def _consistent(self) -> DataManifest:
        if self.tokenizer.vocab_size > DTYPE_LIMITS[self.dtype]:
            raise ValueError(f"a vocabulary of {self.tokenizer.vocab_size} does not fit {self.dtype}")
        for split in ("train", "heldout"):
            shards = getattr(self, split)
            for i, shard in enumerate(shards):
                last = i == len(shards) - 1
                if shard.tokens > self.shard_tokens or (not last and shard.tokens != self.shard_tokens):
                    raise ValueError(
                        f"{split} shard {i} holds {shard.tokens} tokens: every shard but the last holds "
                        f"shard_tokens ({self.shard_tokens}), the last at most that"
                    )
        return self

    @property
    def token_bytes(self) -> int:
        return DTYPE_BYTES[self.dtype]

    @property
    def train_tokens(self) -> int:
        return sum(s.tokens for s in self.train)

    @property
    def heldout_tokens(self) -> int:
        return sum(s.tokens for s in self.heldout)

    def to_bytes(self) -> bytes:
        """Canonical JSON: sorted keys, no spaces; the same manifest is the same bytes everywhere."""
        document = self.model_dump(mode="json")
        return json.dumps(document, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode()

    def sha256(self) -> str:
        return hashlib.sha256(self.to_bytes()).hexdigest()


def parse_manifest(data: bytes, expected_sha256: str) -> DataManifest:
    """The manifest in `data`, which must hash to `expected_sha256` (the run config's `data.manifest`);
    `DataManifestError` naming what is wrong otherwise."""
    actual = hashlib.sha256(data).hexdigest()
    if actual != expected_sha256:
        raise DataManifestError(f"data manifest hashes to {actual}, not the run's {expected_sha256}")
    try:
        return DataManifest.model_validate_json(data)
    except ValidationError as exc:
        problems = "; ".join(
            f"{'.'.join(str(p) for p in e['loc']) or 'manifest'}: {e['msg']}" for e in exc.errors()[:5]
        )
        raise DataManifestError(f"data manifest {expected_sha256} is invalid: {problems}") from None
