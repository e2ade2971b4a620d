"""Pseudo-gradient codecs (`none`, `int8`, `topk`), the registry that builds one from the run config,
and the byte accounting that the benchmarks report."""

from __future__ import annotations

from dataclasses import fields
from types import MappingProxyType

from distrai.codec.base import (
    Codec,
    CodecError,
    Encoded,
    Entries,
    FieldSpec,
    bytes_per_param,
    num_params,
    payload_key,
    reduction_vs_ddp,
    ring_allreduce_bytes_per_param,
    wire_bytes,
)
from distrai.codec.bitpack import pack_bits, packed_length, unpack_bits
from distrai.codec.int8 import Int8Codec
from distrai.codec.plain import NoneCodec
from distrai.codec.topk import TopKCodec

CODECS: MappingProxyType[str, type[Codec]] = MappingProxyType(
    {NoneCodec.name: NoneCodec, Int8Codec.name: Int8Codec, TopKCodec.name: TopKCodec}
)


def get_codec(name: str, **options: object) -> Codec:
    """The codec called `name` with `options` (the rest at their defaults); CodecError if either is unknown."""
    if name not in CODECS:
        raise CodecError("bad_option", f"unknown codec {name!r}; known: {', '.join(CODECS)}")
    cls = CODECS[name]
    allowed = {f.name for f in fields(cls)}
    unknown = sorted(set(options) - allowed)
    if unknown:
        raise CodecError(
            "bad_option",
            f"codec {name} has no option {unknown[0]!r}; its options: {', '.join(sorted(allowed)) or 'none'}",
        )
    return cls(**options)


__all__ = [
    "CODECS",
    "Codec",
    "CodecError",
    "Encoded",
    "Entries",
    "FieldSpec",
    "Int8Codec",
    "NoneCodec",
    "TopKCodec",
    "bytes_per_param",
    "get_codec",
    "num_params",
    "pack_bits",
    "packed_length",
    "payload_key",
    "reduction_vs_ddp",
    "ring_allreduce_bytes_per_param",
    "unpack_bits",
    "wire_bytes",
]
