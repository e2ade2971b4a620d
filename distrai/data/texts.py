"""The text `distrai data prepare` reads: the built-in corpus, local files, or a hub dataset.

Every source is read in file / row order (through a streaming `datasets` iterator, or directly for
whole text files and the built-in corpus), so the same source gives the same documents everywhere and
nothing is held in memory but the current rows.
Each document is stripped of surrounding whitespace, and empty ones are dropped.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType

from distrai.data.corpus import offline_documents

KINDS = ("builtin", "files", "hub")
FILE_FORMATS = {
    ".txt": "text",
    ".text": "text",
    ".md": "text",
    ".py": "text",
    ".jsonl": "json",
    ".json": "json",
    ".parquet": "parquet",
}
"""File suffixes and the `datasets` builder that reads them. A text file is cut into documents by
`TextSource.sample_by` (paragraph: blank-line separated; document: the whole file; line); a JSON
lines or parquet file is one document per row."""
SAMPLE_BY = ("paragraph", "document", "line")


@dataclass(frozen=True)
class TextSource:
    """Where the documents come from."""

    kind: str = "builtin"
    paths: tuple[str, ...] = ()
    hub_id: str | None = None
    hub_config: str | None = None
    hub_revision: str | None = None
    split: str = "train"
    text_field: str = "text"
    sample_by: str = "paragraph"
    builtin_documents: int = 1000
    builtin_seed: int = 0

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ValueError(f"unknown text source {self.kind!r}; choose one of {KINDS}")
        if self.kind == "files" and not self.paths:
            raise ValueError("text source 'files' needs at least one path")
        if self.kind == "hub" and not self.hub_id:
            raise ValueError("text source 'hub' needs a dataset id")
        if self.sample_by not in SAMPLE_BY:
            raise ValueError(f"unknown sample_by {self.sample_by!r}; choose one of {SAMPLE_BY}")
        if self.kind == "builtin" and self.builtin_documents < 1:
            raise ValueError(f"the built-in corpus needs at least one document, got {self.builtin_documents}")

    def describe(self) -> str:
        """One line for the manifest: what was read (file names, not the folders they were in)."""
        if self.kind == "builtin":
            return f"builtin corpus: {self.builtin_documents} documents, seed {self.builtin_seed}"
        if self.kind == "files":
            names = ", ".join(Path(p).name for p in self.paths[:8])
            more = f" and {len(self.paths) - 8} more" if len(self.paths) > 8 else ""
            return f"files ({self.text_field}, a document per {self.sample_by}): {names}{more}"[:1024]
        config = f" {self.hub_config}" if self.hub_config else ""
        return f"hub {self.hub_id}{config} split {self.split} revision {self.hub_revision or 'main'} ({self.text_field})"


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


def _datasets(what: str) -> ModuleType:
    """The `datasets` package, an extra: a clear error naming what needed it when it is missing."""
    try:
        import datasets
    except ImportError as exc:
        raise ValueError(
            f"reading {what} needs the `datasets` package, an extra: pip install 'distrai[hub]'"
        ) from exc
    return datasets


def read_texts(source: TextSource) -> Iterator[str]:
    """The documents of `source`, in order. Whole text files (`sample_by` "document") and the
    built-in corpus are read directly; other files and hub datasets through `datasets`, imported
    only then (it is slow to import, and a machine that prepares whole files needs none)."""
    if source.kind == "builtin":
        texts = offline_documents(source.builtin_documents, source.builtin_seed)
        rows: Iterable = ({source.text_field: text} for text in texts)
    elif source.kind == "files":
        builder = file_format(source.paths)
        if builder == "text" and source.sample_by == "document":
            rows = ({source.text_field: Path(path).read_text(encoding="utf-8")} for path in source.paths)
        else:
            datasets = _datasets(f"{builder} files read by {source.sample_by}")
            options = {"sample_by": source.sample_by} if builder == "text" else {}
            rows = datasets.load_dataset(
                builder, data_files=list(source.paths), split="train", streaming=True, **options
            )
    else:
        datasets = _datasets(f"the hub dataset {source.hub_id}")
        rows = datasets.load_dataset(
            source.hub_id, source.hub_config, split=source.split, revision=source.hub_revision, streaming=True
        )
    for row in rows:
        if source.text_field not in row:
            raise ValueError(f"data rows have no field {source.text_field!r}; fields are {sorted(row)}")
        text = row[source.text_field]
        if not isinstance(text, str):
            raise ValueError(f"field {source.text_field!r} holds {type(text).__name__}, not text")
        text = text.strip()
        if text:
            yield text
