"""The real-text corpus: the running Python's standard library, offline and pinned by a hash.

The corpus is a fixed list of the standard library's `.py` sources (`sysconfig`'s "stdlib"
folder): tests, site-packages, idlelib, lib2to3 and turtledemo are left out, and so are the
generated tables of `encodings` (charmaps) and `pydoc_data`, files over `MAX_FILE_BYTES` (one such
file would be much of the held-out split), files that are not UTF-8 and files with no text. The files are taken in the order of the SHA-256 of their relative paths (a
fixed spread over the whole library) while they fit in the byte cap, then sorted by path; each is
one document. The corpus hash is the SHA-256 of every file's relative path and bytes in that
order, so two machines with the same Python read the same text exactly when their hashes agree.

A byte-level BPE tokenizer is trained with `tokenizers` on the corpus's training documents only
(every document that could be held out is excluded), saved with `save_pretrained` and loaded back
with `AutoTokenizer.from_pretrained`, as a hub tokenizer would be. The corpus is then prepared with
the project's `distrai data prepare` machinery into a file store; the workers open it from there.
"""

from __future__ import annotations

import hashlib
import platform
import sysconfig
from dataclasses import dataclass
from pathlib import Path

from transformers import AutoTokenizer, PreTrainedTokenizerBase

from distrai.data.byte_tokenizer import byte_to_symbol
from distrai.data.manifest import DataManifest
from distrai.data.prepare import PrepareOptions, prepare
from distrai.data.stream import is_heldout_document
from distrai.data.texts import TextSource, read_texts
from distrai.data.tokenizers import tokenizer_sha256
from distrai.localnet.local_data import train_bpe
from distrai.store import open_store

EXCLUDED_FOLDERS = ("site-packages", "idlelib", "lib2to3", "turtledemo", "encodings", "pydoc_data")
"""Folders of the standard library that are not read (besides every path part starting "test")."""
MAX_FILE_BYTES = 256 << 10


@dataclass(frozen=True)
class Corpus:
    """A fixed list of standard-library files: `files` relative to `root`, sorted."""

    root: Path
    files: tuple[str, ...]
    bytes: int
    sha256: str
    python: str
    max_bytes: int

    @property
    def paths(self) -> tuple[str, ...]:
        return tuple(str(self.root / name) for name in self.files)


def corpus_sha256(root: Path, files: tuple[str, ...]) -> str:
    """SHA-256 over each file's relative path, its length and its bytes, in the order given."""
    digest = hashlib.sha256()
    for name in files:
        data = (root / name).read_bytes()
        digest.update(name.encode() + b"\0" + len(data).to_bytes(8, "little"))
        digest.update(data)
    return digest.hexdigest()


def _eligible(root: Path, path: Path, excluded: tuple[str, ...] = EXCLUDED_FOLDERS) -> bool:
    parts = path.relative_to(root).parts
    if any(part in excluded or part.startswith("test") for part in parts):
        return False
    data = path.read_bytes()
    if len(data) > MAX_FILE_BYTES:
        return False
    try:
        return bool(data.decode("utf-8").strip())
    except UnicodeDecodeError:
        return False


def _chosen(root: Path, candidates: list[Path], max_bytes: int) -> Corpus:
    """The candidates (files under `root`) taken in the order of their relative paths' SHA-256 while
    they fit `max_bytes`, then sorted by path."""
    names = {path.relative_to(root).as_posix(): path.stat().st_size for path in candidates}
    chosen: list[str] = []
    total = 0
    for name in sorted(names, key=lambda n: hashlib.sha256(n.encode()).hexdigest()):
        if total + names[name] <= max_bytes:
            chosen.append(name)
            total += names[name]
    if not chosen:
        raise ValueError(f"no source file under {root} fits {max_bytes} bytes")
    files = tuple(sorted(chosen))
    return Corpus(root, files, total, corpus_sha256(root, files), platform.python_version(), max_bytes)


def stdlib_corpus(max_bytes: int, root: Path | None = None) -> Corpus:
    """The corpus of at most `max_bytes` from the standard library at `root` (default: this Python's)."""
    root = Path(sysconfig.get_paths()["stdlib"]) if root is None else root
    candidates = [path for path in sorted(root.rglob("*.py")) if path.is_file() and _eligible(root, path)]
    return _chosen(root, candidates, max_bytes)


def installed_corpus(max_bytes: int) -> Corpus:
    """The corpus of at most `max_bytes` from every `.py` source this Python has installed: its standard
    library (as `stdlib_corpus` reads it) and its site-packages (tests and files over the cap left out),
    named by their paths from the file system's root. A larger corpus than the standard library alone,
    for the device mode; two machines read the same text exactly when their hashes agree."""
    root = Path("/")
    stdlib = Path(sysconfig.get_paths()["stdlib"]).resolve()
    folders = {stdlib: EXCLUDED_FOLDERS}
    for key in ("purelib", "platlib"):
        folders.setdefault(Path(sysconfig.get_paths()[key]).resolve(), ())
    candidates = {
        path
        for folder, excluded in folders.items()
        for path in folder.rglob("*.py")
        if path.is_file() and _eligible(folder, path, excluded)
    }
    return _chosen(root, sorted(candidates), max_bytes)


def read_documents(corpus: Corpus) -> list[str]:
    """The corpus's documents, read as `distrai data prepare --files … --sample-by document` reads
    them: one per file, in the list's order."""
    documents = list(read_texts(TextSource("files", paths=corpus.paths, sample_by="document")))
    if len(documents) != len(corpus.files):
        raise ValueError(f"{len(corpus.files)} corpus files gave {len(documents)} documents, not one each")
    return documents


def train_tokenizer(training_texts: list[str], vocab_size: int, folder: Path) -> PreTrainedTokenizerBase:
    """The local network's byte-level BPE of `vocab_size` tokens (`local_data.train_bpe`: EOS included,
    reserved tokens where the text supports fewer merges) trained on `training_texts`, saved to `folder`
    and loaded back from it, as a run's tokenizer is."""
    train_bpe(training_texts, vocab_size).save_pretrained(folder)
    return AutoTokenizer.from_pretrained(folder)


def token_bytes(tokenizer: PreTrainedTokenizerBase) -> list[int]:
    """Bytes of text each token id stands for (0 for special and added tokens), for a byte-level tokenizer:
    each character of a byte-level token is one byte."""
    alphabet = set(byte_to_symbol().values())
    special = set(tokenizer.all_special_ids) | set(tokenizer.added_tokens_decoder)
    counts = []
    for index, token in enumerate(tokenizer.convert_ids_to_tokens(list(range(len(tokenizer))))):
        if index in special:
            counts.append(0)
        elif token and all(char in alphabet for char in token):
            counts.append(len(token))
        else:
            raise ValueError(f"token {index} ({token!r}) is not byte-level: cannot count its bytes")
    return counts


@dataclass(frozen=True)
class PreparedText:
    """The prepared corpus: the file store holding its shards, the manifest and the tokenizer."""

    corpus: Corpus
    store: str
    manifest: DataManifest
    manifest_sha256: str
    tokenizer_sha256: str
    vocab_size: int
    training_documents: int


def prepare_corpus(
    corpus: Corpus,
    folder: Path,
    vocab_size: int,
    heldout_fraction: float,
    shard_tokens: int,
    heldout_max_tokens: int,
) -> PreparedText:
    """Train the tokenizer on the training documents and prepare the corpus into `folder`/store."""
    documents = read_documents(corpus)
    training = [text for i, text in enumerate(documents) if not is_heldout_document(i, heldout_fraction)]
    tokenizer = train_tokenizer(training, vocab_size, folder / "tokenizer")
    store = open_store(str(folder / "store"))
    options = PrepareOptions(
        shard_tokens=shard_tokens, heldout_fraction=heldout_fraction, heldout_max_tokens=heldout_max_tokens
    )
    source = (
        f"Python {corpus.python} standard library: {len(corpus.files)} .py files, {corpus.bytes} bytes, "
        f"corpus sha256 {corpus.sha256}"
    )
    name = f"byte-level BPE, {len(tokenizer)} tokens, trained on the corpus's training documents"
    manifest = prepare(documents, tokenizer, name, source, store, options)
    return PreparedText(
        corpus=corpus,
        store=store.url,
        manifest=manifest,
        manifest_sha256=manifest.sha256(),
        tokenizer_sha256=tokenizer_sha256(tokenizer),
        vocab_size=len(tokenizer),
        training_documents=len(training),
    )
