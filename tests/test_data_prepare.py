"""`distrai data prepare`: text from files (three formats) or the built-in corpus, a real tokenizer,
fixed-size shards in a store, the held-out split, and a manifest whose hash pins it all."""

from __future__ import annotations

import json
import tomllib

import numpy as np
import pytest
from support.tiny_models import write_corpus_files
from tokenizers import Tokenizer, models, pre_tokenizers
from transformers import PreTrainedTokenizerFast

from distrai.cli import main as distrai_main
from distrai.data.byte_tokenizer import byte_tokenizer
from distrai.data.corpus import offline_documents
from distrai.data.manifest import DataManifest, parse_manifest
from distrai.data.prepare import PrepareOptions, prepare
from distrai.data.stream import is_heldout_document
from distrai.data.texts import TextSource, read_texts
from distrai.store import open_store
from distrai.store.base import blob_key

pytest_plugins = ["tests.support.s3server"]

TOKENIZER = byte_tokenizer()
EOS = TOKENIZER.eos_token_id


def streams(
    documents: list[str], fraction: float, heldout_cap: int | None = None
) -> tuple[list[int], list[int]]:
    """The training and held-out token streams, written out from the definition."""
    train: list[int] = []
    heldout: list[int] = []
    for index, document in enumerate(documents):
        tokens = [*document.encode("utf-8"), EOS]
        if is_heldout_document(index, fraction) and (heldout_cap is None or len(heldout) < heldout_cap):
            heldout.extend(tokens[: None if heldout_cap is None else heldout_cap - len(heldout)])
        else:
            train.extend(tokens)
    return train, heldout


def shard_tokens(store, manifest: DataManifest, split: str) -> list[int]:
    out: list[int] = []
    for shard in getattr(manifest, split):
        data = store.get_blob(shard.sha256, 1 << 30)
        out.extend(np.frombuffer(data, dtype="<u2").tolist())
    return out


def run_prepare(store, texts, options: PrepareOptions, tokenizer=TOKENIZER) -> DataManifest:
    return prepare(texts, tokenizer, "byte", "test text", store, options)


@pytest.mark.parametrize("fmt", ["text", "json", "parquet"])
def test_files_become_the_defined_shards(tmp_path, fmt):
    documents = offline_documents(40, seed=9) + ["Non-ASCII too: naïve café, 日本語."]
    path = write_corpus_files(tmp_path / "text", documents)[fmt]
    store = open_store(f"file://{tmp_path / 'store'}")
    manifest = run_prepare(
        store,
        read_texts(TextSource("files", paths=(str(path),))),
        PrepareOptions(shard_tokens=1000, heldout_fraction=0.1),
    )
    train, heldout = streams(documents, 0.1)
    assert shard_tokens(store, manifest, "train") == train
    assert shard_tokens(store, manifest, "heldout") == heldout
    assert [s.tokens for s in manifest.train[:-1]] == [1000] * (len(manifest.train) - 1)
    assert manifest.documents == len(documents) and manifest.dtype == "uint16"
    assert manifest.heldout_documents == sum(is_heldout_document(i, 0.1) for i in range(len(documents)))


def test_the_manifest_pins_everything_and_is_the_same_bytes_every_time(tmp_path):
    store = open_store(f"file://{tmp_path / 'store'}")
    options = PrepareOptions(shard_tokens=512, heldout_fraction=0.1)
    first = run_prepare(store, offline_documents(50), options)
    again = run_prepare(open_store(f"file://{tmp_path / 'other'}"), offline_documents(50), options)
    assert first.sha256() == again.sha256()
    stored = store.get_blob(first.sha256(), 1 << 20)
    assert parse_manifest(stored, first.sha256()) == first
    assert json.loads(stored)["tokenizer"]["vocab_size"] == len(TOKENIZER)
    assert store.exists(blob_key(first.tokenizer.sha256))
    changed = run_prepare(store, offline_documents(50, seed=1), options)
    assert changed.sha256() != first.sha256()
    assert run_prepare(
        store, offline_documents(50), PrepareOptions(shard_tokens=256, heldout_fraction=0.1)
    ).sha256() != (first.sha256())


def test_the_heldout_split_stops_growing_at_its_cap(tmp_path):
    store = open_store(f"file://{tmp_path / 'store'}")
    documents = offline_documents(200)
    manifest = run_prepare(
        store, documents, PrepareOptions(shard_tokens=4096, heldout_fraction=0.2, heldout_max_tokens=3000)
    )
    train, heldout = streams(documents, 0.2, heldout_cap=3000)
    assert manifest.heldout_tokens == 3000
    assert shard_tokens(store, manifest, "heldout") == heldout
    assert shard_tokens(store, manifest, "train") == train


def test_max_tokens_bounds_what_is_read(tmp_path):
    store = open_store(f"file://{tmp_path / 'store'}")
    manifest = run_prepare(
        store,
        offline_documents(100),
        PrepareOptions(shard_tokens=1024, heldout_fraction=0.2, max_tokens=5000),
    )
    assert manifest.train_tokens + manifest.heldout_tokens == 5000


def test_a_vocabulary_above_uint16_gets_uint32_shards(tmp_path):
    vocab = {f"w{i}": i for i in range(70_000)} | {"[UNK]": 70_000, "</s>": 70_001}
    backend = Tokenizer(models.WordLevel(vocab=vocab, unk_token="[UNK]"))
    backend.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    big = PreTrainedTokenizerFast(tokenizer_object=backend, unk_token="[UNK]", eos_token="</s>")
    store = open_store(f"file://{tmp_path / 'store'}")
    texts = [" ".join(f"w{(i * 7919 + j) % 70_000}" for j in range(30)) for i in range(20)]
    manifest = prepare(
        texts, big, "wordlevel", "words", store, PrepareOptions(shard_tokens=64, heldout_fraction=0.1)
    )
    assert manifest.dtype == "uint32"
    first = np.frombuffer(store.get_blob(manifest.train[0].sha256, 1 << 20), dtype="<u4")
    stream = [t for text in texts[:3] for t in [*big(text, add_special_tokens=False)["input_ids"], 70_001]]
    assert first.tolist() == stream[:64]
    assert max(stream) > 1 << 16


def test_too_little_text_is_refused_and_a_tokenizer_needs_eos(tmp_path):
    store = open_store(f"file://{tmp_path / 'store'}")
    with pytest.raises(ValueError, match="held-out shards; both need at least one"):
        run_prepare(store, ["only one document."], PrepareOptions(shard_tokens=64, heldout_fraction=0.01))
    backend = Tokenizer(models.WordLevel(vocab={"a": 0, "[UNK]": 1}, unk_token="[UNK]"))
    no_eos = PreTrainedTokenizerFast(tokenizer_object=backend, unk_token="[UNK]")
    with pytest.raises(ValueError, match="no EOS token"):
        prepare(["a a"], no_eos, "no-eos", "t", store, PrepareOptions(shard_tokens=64))


def test_bad_files_are_refused_with_their_names(tmp_path):
    files = write_corpus_files(tmp_path, ["one document."])
    cases = [
        (TextSource("files", paths=(str(files["text"]), str(files["json"]))), ValueError, "mix formats"),
        (TextSource("files", paths=(str(tmp_path / "nope.txt"),)), FileNotFoundError, "nope.txt"),
        (TextSource("files", paths=(str(files["json"]),), text_field="body"), ValueError, "no field 'body'"),
    ]
    odd = tmp_path / "data.csv"
    odd.write_text("a,b\n")
    cases.append((TextSource("files", paths=(str(odd),)), ValueError, "cannot tell the format"))
    for source, error, message in cases:
        with pytest.raises(error, match=message):
            list(read_texts(source))
    with pytest.raises(ValueError, match="unknown sample_by"):
        TextSource("files", paths=("a.txt",), sample_by="chapter")


def test_a_text_file_can_be_one_document(tmp_path):
    path = tmp_path / "module.py"
    path.write_text("def f():\n    return 1\n\n\ndef g():\n    return 2\n")
    assert list(read_texts(TextSource("files", paths=(str(path),), sample_by="document"))) == [
        path.read_text().strip()
    ]
    assert len(list(read_texts(TextSource("files", paths=(str(path),))))) == 2


def test_whole_text_files_are_read_without_datasets_as_datasets_reads_them(tmp_path):
    import datasets

    texts = ["  first line\r\nsecond line\r\n\r\n", "héllo — wörld\n\n\nend\t \n", " \n\t\n", "x"]
    paths = []
    for i, text in enumerate(texts):
        paths.append(tmp_path / f"doc{i}.txt")
        paths[-1].write_bytes(text.encode())
    rows = datasets.load_dataset(
        "text", data_files=[str(p) for p in paths], split="train", streaming=True, sample_by="document"
    )
    expected = [row["text"].strip() for row in rows if row["text"].strip()]
    source = TextSource("files", paths=tuple(str(p) for p in paths), sample_by="document")
    assert list(read_texts(source)) == expected == ["first line\nsecond line", "héllo — wörld\n\n\nend", "x"]


def test_the_command_prepares_local_files_and_prints_the_hash(tmp_path, capsys):
    files = write_corpus_files(tmp_path / "text", offline_documents(60))
    code = distrai_main(
        [
            "data",
            "prepare",
            "--files",
            str(files["json"]),
            "--tokenizer",
            "byte",
            "--shard-tokens",
            "2048",
            "--heldout-fraction",
            "0.1",
            "--store.url",
            f"file://{tmp_path / 'store'}",
        ]
    )
    assert code == 0
    printed = capsys.readouterr().out.strip().splitlines()
    digest = printed[-1]
    store = open_store(f"file://{tmp_path / 'store'}")
    manifest = parse_manifest(store.get_blob(digest, 1 << 20), digest)
    assert f'manifest = "{digest}"' in "\n".join(printed)
    assert manifest.shard_tokens == 2048 and manifest.tokenizer.name == "byte"
    assert (
        distrai_main(
            [
                "data",
                "prepare",
                "--builtin",
                "5",
                "--tokenizer",
                "byte",
                "--store.url",
                f"file://{tmp_path}/s2",
            ]
        )
        == 1
    )


def test_the_command_names_an_s3_store_and_its_endpoint_once_and_says_the_run_id_changes(
    tmp_path, capsys, monkeypatch, s3_endpoint, s3_bucket, s3_credentials
):
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", s3_credentials["access_key_id"])
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", s3_credentials["secret_access_key"])
    url = f"s3://{s3_bucket}/data"
    argv = [
        "data",
        "prepare",
        "--builtin",
        "60",
        "--tokenizer",
        "byte",
        "--shard-tokens",
        "2048",
        "--heldout-fraction",
        "0.1",
    ]
    assert distrai_main([*argv, "--store.url", url, "--store.endpoint", s3_endpoint]) == 0
    out = capsys.readouterr().out
    digest = out.split()[-1]
    lines = out.split("in the run config:\n")[1].split("\n\n[data]\n")[1].split("\nadding these lines")[0]
    assert lines.count(s3_endpoint) == 1, lines
    store_lines = f'store = "{url}/"\nendpoint = "{s3_endpoint}"'
    assert lines == f'source = "prepared"\nmanifest = "{digest}"\n{store_lines}'
    assert "changes its run id" in " ".join(out.split()) and "distrai run publish" in out
    data = tomllib.loads(lines)
    store = open_store(data["store"], endpoint=data["endpoint"], **s3_credentials)
    assert parse_manifest(store.get_blob(digest, 1 << 20), digest).shard_tokens == 2048
