"""Canonical JSON: one byte string per document, so a signature over it means the same on every machine.

The canonical form of a value is `json.dumps` with keys sorted by Unicode code point, no whitespace
(`,` and `:` separators), non-ASCII characters written as UTF-8 rather than `\\u` escapes (control
characters, quotes and backslashes are escaped as `json` always escapes them), and:

- objects (`dict` with `str` keys), arrays (`list`, or `tuple`, written as an array), `str`, `bool`,
  `None`, `int` in the signed 64-bit range, and finite `float` only; at most `MAX_DEPTH` nested
  containers; strings must be valid Unicode (no lone surrogates).
- a float is written as Python's `repr`: the shortest decimal string that reads back as the same
  IEEE-754 double (`0.1`, `1e+16`, `-0.0`, `1.0`). CPython computes it with correctly rounded
  arithmetic, so two machines write the same bytes for the same double. A float stays a float
  (`1.0`, never `1`) and an int stays an int, so parsing and re-encoding gives back the same bytes.

`parse_json` is the strict reader for untrusted documents: it accepts exactly the values that
`canonical_json` can write (in any spacing or key order) and refuses everything else with a
`WireError`. It also refuses pickles posing as documents; `looks_like_pickle` is the sniffer, shared
with the tensor decoder.
"""

from __future__ import annotations

import json
import math
import pickletools
import re
from typing import Any

from distrai.wire.errors import Reason, WireError

MAX_DEPTH = 32
INT_MIN = -(2**63)
INT_MAX = 2**63 - 1
_MAX_INT_DIGITS = len(str(INT_MIN))
_SURROGATE = re.compile("[\ud800-\udfff]")
_PLAIN_KEY = re.compile(r"[A-Za-z0-9_]+")
_ZIP_MAGIC = b"PK\x03\x04"
_PICKLE_PROTO = b"\x80"


def looks_like_pickle(data: bytes) -> bool:
    """True for a zip archive (how `torch.save` wraps its pickle) or bytes that read as a complete
    pickle opcode stream. Only sniffs opcodes with `pickletools`; nothing is ever unpickled."""
    if data.startswith(_ZIP_MAGIC):
        return True
    try:
        for opcode, _arg, _pos in pickletools.genops(data):
            if opcode.name == "STOP":
                return True
    except Exception:
        return False
    return False


def canonical_json(obj: Any) -> bytes:
    """The canonical UTF-8 bytes of `obj` (see the module docstring); `WireError` if it has none."""
    _check_value(obj, "$", 1)
    text = json.dumps(obj, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False)
    return text.encode("utf-8")


def parse_json(data: bytes, max_bytes: int) -> dict[str, Any]:
    """Parse an untrusted JSON object of at most `max_bytes` bytes, refusing anything `canonical_json`
    could not have written: pickles, non-UTF-8, duplicate keys, NaN/Infinity (or numbers that overflow
    a double), integers outside 64 bits, lone surrogates, deep nesting, and a non-object top level."""
    if data[:1] == _PICKLE_PROTO or looks_like_pickle(data):
        raise WireError(Reason.PICKLE, "document is a pickle, not JSON; pickles are never accepted")
    if len(data) > max_bytes:
        raise WireError(Reason.TOO_LARGE, f"document is {len(data)} bytes, the limit is {max_bytes}")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise WireError(
            Reason.MALFORMED_JSON, f"document is not UTF-8 (bad byte at offset {exc.start})"
        ) from exc
    try:
        value = json.loads(
            text,
            object_pairs_hook=_object_without_duplicates,
            parse_constant=_refuse_constant,
            parse_float=_finite_float,
            parse_int=_bounded_int,
        )
    except RecursionError as exc:
        raise WireError(Reason.MALFORMED_JSON, f"document nests deeper than {MAX_DEPTH} levels") from exc
    except json.JSONDecodeError as exc:
        raise WireError(
            Reason.MALFORMED_JSON, f"invalid JSON: {exc.msg} at line {exc.lineno} column {exc.colno}"
        ) from exc
    if not isinstance(value, dict):
        raise WireError(Reason.MALFORMED_JSON, f"top level is {_json_type(value)}, expected an object")
    _check_value(value, "$", 1)
    return value


def _object_without_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    obj = dict(pairs)
    if len(obj) != len(pairs):
        seen: set[str] = set()
        for key, _ in pairs:
            if key in seen:
                raise WireError(Reason.MALFORMED_JSON, f"duplicate key {key!r} in a JSON object")
            seen.add(key)
    return obj


def _refuse_constant(name: str) -> float:
    raise WireError(Reason.NON_FINITE, f"JSON constant {name} is not allowed: numbers must be finite")


def _finite_float(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise WireError(Reason.NON_FINITE, f"number {text[:40]} does not fit in a finite double")
    return value


def _bounded_int(text: str) -> int:
    value = int(text) if len(text) <= _MAX_INT_DIGITS else None
    if value is None or not INT_MIN <= value <= INT_MAX:
        raise WireError(Reason.MALFORMED_JSON, f"integer {text[:40]} is outside the signed 64-bit range")
    return value


def _check_value(value: Any, path: str, depth: int) -> None:
    """Refuse anything without a canonical form; `path` names the offending value (`$.a[2].b`)."""
    if value is None or isinstance(value, bool):
        return
    if isinstance(value, int):
        if not INT_MIN <= value <= INT_MAX:
            raise WireError(
                Reason.MALFORMED_JSON, f"{path}: integer {value} is outside the signed 64-bit range"
            )
        return
    if isinstance(value, float):
        if not math.isfinite(value):
            raise WireError(Reason.NON_FINITE, f"{path}: {value} is not a finite number")
        return
    if isinstance(value, str):
        _check_text(value, path)
        return
    if isinstance(value, dict | list | tuple):
        if depth > MAX_DEPTH:
            raise WireError(Reason.MALFORMED_JSON, f"{path}: nested deeper than {MAX_DEPTH} levels")
        if isinstance(value, dict):
            for key, item in value.items():
                if not isinstance(key, str):
                    raise WireError(Reason.MALFORMED_JSON, f"{path}: object key {key!r} is not a string")
                _check_text(key, path)
                _check_value(item, _child_path(path, key), depth + 1)
        else:
            for index, item in enumerate(value):
                _check_value(item, f"{path}[{index}]", depth + 1)
        return
    raise WireError(
        Reason.MALFORMED_JSON,
        f"{path}: {type(value).__name__} has no JSON form (use dict, list, str, int, float, bool or None)",
    )


def _check_text(text: str, path: str) -> None:
    if _SURROGATE.search(text):
        raise WireError(Reason.MALFORMED_JSON, f"{path}: string {text[:40]!r} holds a lone surrogate")


def _child_path(path: str, key: str) -> str:
    return f"{path}.{key}" if _PLAIN_KEY.fullmatch(key) else f"{path}[{json.dumps(key)}]"


def _json_type(value: Any) -> str:
    names = {list: "an array", str: "a string", int: "a number", float: "a number", bool: "a boolean"}
    return names.get(type(value), "null")
