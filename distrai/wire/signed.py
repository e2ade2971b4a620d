"""Documents signed by a hotkey: manifests, reports and aggregates travel as a JSON envelope

    {"body": {...}, "signature": "<128 lowercase hex>", "signer": "<ss58 address>"}

The sr25519 signature covers `DOMAIN` followed by the canonical JSON of the body, so it binds the
body's meaning rather than its spelling, and a signature made for anything other than a DisTrAI
document never verifies as one. `open_document` is the only way untrusted document bytes become a
body: it runs every check, cheapest first, and names the first one that failed.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

from distrai.chain.signing import Keypair
from distrai.wire.canonical import canonical_json, parse_json
from distrai.wire.errors import Reason, WireError

DOMAIN = b"distrai/v1\n"
ENVELOPE_FIELDS = frozenset({"body", "signer", "signature"})
_SIGNATURE_HEX = re.compile(r"[0-9a-f]{128}")
_SHA256_HEX = re.compile(r"[0-9a-f]{64}")


class Signer(Protocol):
    """What signing needs from a keypair: the bittensor SDK's `Keypair` satisfies it."""

    @property
    def ss58_address(self) -> str: ...

    def sign(self, data: bytes) -> bytes: ...


@dataclass(frozen=True)
class SignedDocument:
    """A body whose signature verified, with the hotkey that signed it and the 64-byte signature."""

    body: dict[str, Any]
    signer: str
    signature: bytes


def signing_payload(body: dict[str, Any]) -> bytes:
    """The exact bytes a document signature covers."""
    return DOMAIN + canonical_json(body)


def sign_document(keypair: Signer, body: dict[str, Any]) -> bytes:
    """The envelope bytes (canonical JSON) carrying `body` signed by `keypair`."""
    if not isinstance(body, dict):
        raise TypeError(f"a document body is a dict, got {type(body).__name__}")
    signature = keypair.sign(signing_payload(body))
    return canonical_json({"body": body, "signer": keypair.ss58_address, "signature": signature.hex()})


def open_document(
    data: bytes,
    *,
    max_bytes: int,
    is_registered: Callable[[str], bool],
    run_id: str | None = None,
    window: int | None = None,
    signer: str | None = None,
) -> SignedDocument:
    """Verify untrusted envelope bytes and return the signed document, or raise `WireError`.

    Checks, in order: not a pickle, size, JSON (these three by `parse_json`); envelope fields (the
    signer must be an SS58 address in the chain's format); signature present; signature valid; signer
    registered (`is_registered(ss58)`); signer is `signer` when given; `body["run_id"]` is
    `run_id` and `body["window"]` is `window` when given."""
    envelope = parse_json(data, max_bytes)
    body, claimed_signer = _envelope_fields(envelope)
    signature = _signature_bytes(envelope)
    _verify(claimed_signer, body, signature)
    if not is_registered(claimed_signer):
        raise WireError(
            Reason.UNREGISTERED_HOTKEY, f"signer {claimed_signer} is not registered on the subnet"
        )
    if signer is not None and claimed_signer != signer:
        raise WireError(Reason.WRONG_SIGNER, f"document is signed by {claimed_signer}, expected {signer}")
    if run_id is not None:
        _expect_field(body, "run_id", str, run_id, Reason.WRONG_RUN)
    if window is not None:
        _expect_field(body, "window", int, window, Reason.WRONG_WINDOW)
    return SignedDocument(body=body, signer=claimed_signer, signature=signature)


def sha256_hex(data: bytes) -> str:
    """The lowercase hex SHA-256 of `data`: how documents name blobs and each other."""
    return hashlib.sha256(data).hexdigest()


def check_hash(data: bytes, expected_hex: str) -> None:
    """Raise `HASH_MISMATCH` unless `data` hashes to `expected_hex` (64 lowercase hex characters)."""
    if not isinstance(expected_hex, str) or not _SHA256_HEX.fullmatch(expected_hex):
        raise WireError(
            Reason.BAD_FIELD, f"expected hash {expected_hex!r} is not 64 lowercase hex characters"
        )
    actual = sha256_hex(data)
    if actual != expected_hex:
        raise WireError(Reason.HASH_MISMATCH, f"data hashes to {actual}, expected {expected_hex}")


def _envelope_fields(envelope: dict[str, Any]) -> tuple[dict[str, Any], str]:
    extra = sorted(set(envelope) - ENVELOPE_FIELDS)
    if extra:
        raise WireError(Reason.BAD_FIELD, f"envelope has unexpected fields {extra}")
    for name in ("body", "signer"):
        if name not in envelope:
            raise WireError(Reason.MISSING_FIELD, f"envelope has no {name!r} field")
    body, signer = envelope["body"], envelope["signer"]
    if not isinstance(body, dict):
        raise WireError(Reason.BAD_FIELD, "envelope field 'body' is not an object")
    if not isinstance(signer, str):
        raise WireError(Reason.BAD_FIELD, "envelope field 'signer' is not a string")
    try:
        normal_form = Keypair(ss58_address=signer).ss58_address
    except ValueError as exc:
        raise WireError(Reason.BAD_FIELD, f"signer {signer[:64]!r} is not an SS58 address ({exc})") from exc
    if normal_form != signer:
        raise WireError(
            Reason.BAD_FIELD,
            f"signer {signer} is not written in the chain's SS58 format; write it {normal_form}",
        )
    return body, signer


def _signature_bytes(envelope: dict[str, Any]) -> bytes:
    signature = envelope.get("signature")
    if signature is None or signature == "":
        raise WireError(Reason.MISSING_SIGNATURE, "envelope carries no signature")
    if not isinstance(signature, str) or not _SIGNATURE_HEX.fullmatch(signature):
        raise WireError(Reason.BAD_SIGNATURE, "signature is not 128 lowercase hex characters (64 bytes)")
    return bytes.fromhex(signature)


def _verify(signer: str, body: dict[str, Any], signature: bytes) -> None:
    try:
        valid = Keypair(ss58_address=signer).verify(signing_payload(body), signature)
    except ValueError:
        valid = False
    if not valid:
        raise WireError(Reason.BAD_SIGNATURE, f"signature does not verify for signer {signer}")


def _expect_field(body: dict[str, Any], name: str, kind: type, expected: object, mismatch: Reason) -> None:
    if name not in body:
        raise WireError(Reason.MISSING_FIELD, f"body has no {name!r} field")
    value = body[name]
    if type(value) is not kind:
        raise WireError(Reason.BAD_FIELD, f"body field {name!r} is {value!r}, expected a {kind.__name__}")
    if value != expected:
        raise WireError(mismatch, f"body field {name!r} is {value!r}, expected {expected!r}")
