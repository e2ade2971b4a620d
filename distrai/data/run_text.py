"""A run config's text with its data named: what `distrai data prepare --run.template T --run.out F`
writes. The owner's template keeps its comments and layout; the lines that name the prepared data
(`tokenizer = "data"` at the top, the `[data]` table's `source`, `manifest`, `store` and `endpoint`)
replace the template's own or are added. Pure text in, text out; the command validates the result as
a run config before it writes anything."""

from __future__ import annotations

import re
from collections.abc import Mapping

_HEADER = re.compile(r"^\s*\[[^\]]+\]\s*(#.*)?$")
_DATA = re.compile(r"^\s*\[data\]\s*(#.*)?$")
_KEY = re.compile(r"^\s*([A-Za-z0-9_]+)\s*=")
DATA_KEYS = ("source", "manifest", "store", "endpoint")
"""The `[data]` keys that name prepared data; a template's `endpoint` goes when the store has none."""


def _quoted(value: str) -> str:
    return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'


def with_data(template: str, data: Mapping[str, str]) -> str:
    """`template` (a run config's TOML text) with `tokenizer = "data"` at its top and `data`'s keys
    (of `DATA_KEYS`) set in its one `[data]` table, every other line as it was."""
    lines = template.splitlines()
    headers = [i for i, line in enumerate(lines) if _HEADER.match(line)]
    tables = [i for i in headers if _DATA.match(lines[i])]
    if len(tables) != 1:
        raise ValueError(f"the run config template needs exactly one [data] table, it has {len(tables)}")
    start = tables[0]
    end = next((i for i in headers if i > start), len(lines))
    wanted = {key: f"{key} = {_quoted(value)}" for key, value in data.items()}
    unknown = sorted(set(wanted) - set(DATA_KEYS))
    if unknown:
        raise ValueError(f"not a key that names prepared data: {', '.join(unknown)}")
    body = []
    for line in lines[start + 1 : end]:
        key = _KEY.match(line)
        if key is None or key.group(1) not in DATA_KEYS:
            body.append(line)
        elif key.group(1) in wanted:
            body.append(wanted.pop(key.group(1)))
    body[:0] = [wanted[key] for key in DATA_KEYS if key in wanted]
    top = lines[: headers[0]]
    tokenizer = 'tokenizer = "data"'
    keys = [i for i, line in enumerate(top) if (m := _KEY.match(line)) and m.group(1) == "tokenizer"]
    top = [tokenizer if i in keys else line for i, line in enumerate(top)] if keys else [*top, tokenizer, ""]
    middle = lines[headers[0] : start]
    return "\n".join([*top, *middle, lines[start], *body, *lines[end:]]) + "\n"
