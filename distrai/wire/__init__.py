"""The wire format: what crosses between miners and validators, and how untrusted bytes are refused.

Tensors travel as safetensors (never pickles); documents (manifests, reports, aggregates) travel as
canonical JSON inside an envelope signed by the sender's hotkey. Every refusal is a `WireError`
whose `reason` a validator can put in its report.
"""

from distrai.wire.canonical import MAX_DEPTH, canonical_json, looks_like_pickle, parse_json
from distrai.wire.errors import Reason, WireError
from distrai.wire.signed import (
    DOMAIN,
    SignedDocument,
    Signer,
    check_hash,
    open_document,
    sha256_hex,
    sign_document,
    signing_payload,
)
from distrai.wire.tensors import DTYPES, MAX_HEADER_BYTES, TensorSpec, decode_tensors, encode_tensors

__all__ = [
    "DOMAIN",
    "DTYPES",
    "MAX_DEPTH",
    "MAX_HEADER_BYTES",
    "Reason",
    "SignedDocument",
    "Signer",
    "TensorSpec",
    "WireError",
    "canonical_json",
    "check_hash",
    "decode_tensors",
    "encode_tensors",
    "looks_like_pickle",
    "open_document",
    "parse_json",
    "sha256_hex",
    "sign_document",
    "signing_payload",
]
