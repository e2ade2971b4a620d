"""A local network's data from local text files, for a run config whose data is still a template.

A run config that trains on prepared data names its manifest (`data.manifest`); the GPU configs ship
without one until the owner prepares real text (`gpu-subnet.toml`, `gpu-smoke.toml`). With
`--data.files`, `distrai localnet` prepares such a template's data itself, offline: it trains a
byte-level BPE of the config's `data.vocab_size` tokens on the files' training documents (each file
one document; the held-out ones are left out of the tokenizer's text, as `bench/_corpus.py` does),
prepares the files into the network's store with it, and writes the run config with the manifest
filled in (`run.toml` in the network's folder), which every node then runs.

The vocabulary. GPT-2's BPE cannot be downloaded on a machine without a network, and what sizes the
model is the vocabulary's size, not its merges: the BPE learns as many merges as the text supports
and, when that is fewer than `vocab_size`, the rest are reserved tokens that no text produces
(`<|reserved_i|>`), so the model has exactly the shape of a run on GPT-2's 50,257 tokens
(embedding and output layer of 50,257 rows). The held-out loss is then a loss on this text and
tokenizer, not comparable with a GPT-2-tokenized corpus's.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from pathlib import Path

from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
from transformers import PreTrainedTokenizerFast

from distrai.data.prepare import PrepareOptions, prepare
from distrai.data.stream import is_heldout_document
from distrai.protocol.run import RunConfig, load_run_config
from distrai.store import Store

EOS = "<|endoftext|>"
RESERVED = "<|reserved_{}|>"
HELDOUT_FRACTION = 0.1
SHARD_BATCHES = 4
"""A shard holds this many of the run's batches: enough shards for every miner's share and the reserve."""
_DATA_HEADER = re.compile(r"^\[data\][ \t]*$", re.MULTILINE)


def needs_local_data(config: RunConfig) -> bool:
    """Whether the run config's data is a template: prepared data with no manifest and no store."""
    data = config.data
    return data.source == "prepared" and data.manifest is None and data.store is None


def read_documents(paths: Sequence[str | Path]) -> list[str]:
    """Each file's text, stripped, as one document, in the order given; a file that is not UTF-8
    text or holds only white space is refused, naming it."""
    documents = []
    for path in paths:
        try:
            text = Path(path).read_text(encoding="utf-8").strip()
        except UnicodeDecodeError as exc:
            raise ValueError(
                f"--data.files: {path} is not UTF-8 text (bad byte at offset {exc.start})"
            ) from None
        except OSError as exc:
            raise ValueError(f"--data.files: cannot read {path}: {exc.strerror or exc}") from None
        if not text:
            raise ValueError(f"--data.files: {path} holds no text")
        documents.append(text)
    return documents


def train_bpe(texts: Sequence[str], vocab_size: int) -> PreTrainedTokenizerFast:
    """A byte-level BPE of exactly `vocab_size` tokens (EOS included) trained on `texts`: the
    merges the text supports, then reserved tokens up to the size."""
    alphabet = pre_tokenizers.ByteLevel.alphabet()
    if vocab_size < len(alphabet) + 1:
        raise ValueError(f"a byte-level BPE needs at least {len(alphabet) + 1} tokens, not {vocab_size}")
    backend = Tokenizer(models.BPE())
    backend.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    backend.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size, special_tokens=[EOS], initial_alphabet=alphabet, show_progress=False
    )
    backend.train_from_iterator(texts, trainer=trainer)
    learned = backend.get_vocab_size()
    backend.add_special_tokens([RESERVED.format(i) for i in range(vocab_size - learned)])
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=backend, eos_token=EOS)
    if len(tokenizer) != vocab_size:
        raise ValueError(f"the trained BPE has {len(tokenizer)} tokens, not the {vocab_size} asked for")
    return tokenizer


def with_manifest(template: str, manifest: str) -> str:
    """The run config's TOML text with `manifest` set in its [data] table."""
    if re.search(r"^manifest\s*=", template, re.MULTILINE):
        raise ValueError("the run config already names its data's manifest")
    if len(_DATA_HEADER.findall(template)) != 1:
        raise ValueError("the run config has no single [data] table to name the manifest in")
    return _DATA_HEADER.sub(f'[data]\nmanifest = "{manifest}"', template, count=1)


def prepare_local_data(template: Path, files: Sequence[str | Path], store: Store, out: Path) -> RunConfig:
    """Prepare `files` into `store` for the run config at `template` (whose data is a template) and
    write the run config naming them to `out`; returns it."""
    config = load_run_config(template)
    if not needs_local_data(config):
        raise ValueError(f"{template} names its data already; --data.files applies to a template")
    if not files:
        raise ValueError(
            f"{template} names no prepared data (data.manifest): give local text with --data.files, "
            "which the network prepares with a BPE of data.vocab_size tokens"
        )
    if config.data.vocab_size is None:
        raise ValueError(f"{template} names no data.vocab_size for the network's BPE of its data")
    documents = read_documents(files)
    training = [text for i, text in enumerate(documents) if not is_heldout_document(i, HELDOUT_FRACTION)]
    tokenizer = train_bpe(training, config.data.vocab_size)
    options = PrepareOptions(
        shard_tokens=SHARD_BATCHES * config.train.batch_size * config.data.seq_len,
        heldout_fraction=HELDOUT_FRACTION,
    )
    name = f"byte-level BPE, {len(tokenizer)} tokens, trained on the files' training documents"
    source = f"{len(documents)} local files, {sum(len(d) for d in documents)} characters"
    manifest = prepare(documents, tokenizer, name, source, store, options)
    out.write_text(with_manifest(template.read_text(encoding="utf-8"), manifest.sha256()), encoding="utf-8")
    return load_run_config(out)
