"""Data: the offline corpus, local files through `datasets`, the token stream, and the
document-level held-out split."""

from __future__ import annotations

import random

import pytest
import torch
from support.tiny_models import write_corpus_files

from distrai.train.corpus import SplitMix64, offline_documents
from distrai.train.data import DataSpec, build_token_data, is_heldout_document
from distrai.train.tokenizer import byte_tokenizer

TOKENIZER = byte_tokenizer()
EOS = TOKENIZER.eos_token_id


def expected_streams(documents: list[str], fraction: float) -> tuple[list[int], list[int]]:
    """Training and held-out streams written out from the definition: UTF-8 bytes then EOS."""
    train: list[int] = []
    heldout: list[int] = []
    for index, document in enumerate(documents):
        target = heldout if is_heldout_document(index, fraction) else train
        target.extend([*document.encode("utf-8"), EOS])
    return train, heldout


def rows(stream: list[int], seq_len: int) -> torch.Tensor:
    n = len(stream) // seq_len
    return torch.tensor(stream[: n * seq_len]).reshape(n, seq_len)


def test_offline_corpus_is_deterministic_and_ignores_global_rng():
    random.seed(1)
    torch.manual_seed(1)
    first = offline_documents(50, seed=3)
    random.seed(2)
    torch.manual_seed(2)
    assert offline_documents(50, seed=3) == first
    assert offline_documents(50, seed=4) != first
    assert offline_documents(60, seed=3)[:50] == first


def test_offline_corpus_size_and_shape():
    documents = offline_documents(1000)
    total = sum(len(d.encode()) for d in documents)
    assert 200_000 <= total <= 600_000
    assert all(d[0].isupper() and d.endswith(".") for d in documents)


def test_splitmix64_reference_values():
    # The reference outputs for seed 1234567 (Rosetta Code, "Pseudo-random numbers/Splitmix64").
    rng = SplitMix64(1234567)
    assert [rng.next() for _ in range(3)] == [6457827717110365317, 3203168211198807973, 9817491932198370423]


def test_heldout_documents_are_evenly_spaced_share():
    held = [i for i in range(1000) if is_heldout_document(i, 0.05)]
    assert len(held) == 50
    assert {b - a for a, b in zip(held, held[1:], strict=False)} == {20}


@pytest.mark.parametrize("fmt", ["text", "json", "parquet"])
def test_local_files_give_the_defined_streams(tmp_path, fmt):
    documents = offline_documents(40, seed=9) + ["Non-ASCII too: naïve café, 日本語."]
    path = write_corpus_files(tmp_path, documents)[fmt]
    data = build_token_data(
        DataSpec(source="files", paths=(str(path),), seq_len=16, heldout_fraction=0.1), TOKENIZER
    )
    train, heldout = expected_streams(documents, 0.1)
    assert torch.equal(data.train, rows(train, 16))
    assert torch.equal(data.heldout, rows(heldout, 16))
    assert data.heldout_documents == tuple(i for i in range(len(documents)) if is_heldout_document(i, 0.1))


def test_builtin_source_matches_its_documents():
    spec = DataSpec(seq_len=32, builtin_documents=60, builtin_seed=2, heldout_fraction=0.1)
    data = build_token_data(spec, TOKENIZER)
    train, heldout = expected_streams(offline_documents(60, seed=2), 0.1)
    assert torch.equal(data.train, rows(train, 32))
    assert torch.equal(data.heldout, rows(heldout, 32))
    assert data.digest() == build_token_data(spec, TOKENIZER).digest()
    other_seed = DataSpec(seq_len=32, builtin_documents=60, heldout_fraction=0.1)
    assert data.digest() != build_token_data(other_seed, TOKENIZER).digest()


def test_max_tokens_bounds_both_streams_together():
    data = build_token_data(
        DataSpec(seq_len=10, builtin_documents=100, heldout_fraction=0.2, max_tokens=5000), TOKENIZER
    )
    train, heldout = expected_streams(offline_documents(100), 0.2)
    # Exactly 5000 tokens are read, split over two streams that each drop a ragged end.
    assert 498 <= data.n_train + data.heldout.shape[0] <= 500
    assert torch.equal(data.train, rows(train, 10)[: data.n_train])
    assert torch.equal(data.heldout, rows(heldout, 10)[: data.heldout.shape[0]])


def test_batch_selects_training_rows():
    data = build_token_data(DataSpec(seq_len=16, builtin_documents=30, heldout_fraction=0.1), TOKENIZER)
    assert torch.equal(data.batch([3, 0, 3]), data.train[[3, 0, 3]])
    with pytest.raises(IndexError, match="outside"):
        data.batch([data.n_train])


def test_mixed_missing_and_unknown_files_are_refused(tmp_path):
    files = write_corpus_files(tmp_path, ["one document."])
    with pytest.raises(ValueError, match="mix formats"):
        build_token_data(DataSpec(source="files", paths=(str(files["text"]), str(files["json"]))), TOKENIZER)
    with pytest.raises(FileNotFoundError, match="nope.txt"):
        build_token_data(DataSpec(source="files", paths=(str(tmp_path / "nope.txt"),)), TOKENIZER)
    odd = tmp_path / "data.csv"
    odd.write_text("a,b\n")
    with pytest.raises(ValueError, match="cannot tell the format"):
        build_token_data(DataSpec(source="files", paths=(str(odd),)), TOKENIZER)


def test_missing_text_field_is_named(tmp_path):
    files = write_corpus_files(tmp_path, ["one document."])
    with pytest.raises(ValueError, match="no field 'body'"):
        build_token_data(DataSpec(source="files", paths=(str(files["json"]),), text_field="body"), TOKENIZER)


def test_too_little_data_is_refused():
    with pytest.raises(ValueError, match="held-out sequences"):
        build_token_data(DataSpec(seq_len=64, builtin_documents=5, heldout_fraction=0.1), TOKENIZER)


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"source": "web"}, "unknown data source"),
        ({"source": "files"}, "needs at least one path"),
        ({"source": "hub"}, "needs hub_id"),
        ({"source": "hub", "hub_id": "org/set"}, "needs max_tokens"),
        ({"seq_len": 1}, "seq_len must be at least 2"),
        ({"heldout_fraction": 0.0}, "heldout_fraction"),
        ({"seq_len": 64, "max_tokens": 10}, "shorter than one sequence"),
    ],
)
def test_bad_data_specs_are_refused(fields, message):
    with pytest.raises(ValueError, match=message):
        DataSpec(**fields)
