"""Signed extrinsics for the embedded chain: a canonical payload signed with sr25519.

The payload names the chain (its genesis hash), the call, its arguments, the signer and the
signer's nonce, so a signature can be used once, on one chain, for one call.

`Keypair` is imported from `bittensor_core`, the compiled extension bittensor 11 keeps its keys in:
`bittensor.keyfiles.Keypair` is that very class (bittensor's `sp_core` module re-exports
`bittensor_core.Keypair`), so keys, signatures and addresses are the SDK's own, but importing it from
here skips the `bittensor` package (0.4 s: its EVM, ABI and RPC modules), which a node's chain,
wallet and registration checks need before anything else. The rest of DisTrAI takes `Keypair` from
this module.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from bittensor_core import Keypair

from distrai.chain.base import ChainError


@dataclass(frozen=True)
class SignedExtrinsic:
    payload: bytes
    signature: bytes

    def decode(self) -> dict[str, Any]:
        try:
            body = json.loads(self.payload)
        except (UnicodeDecodeError, json.JSONDecodeError) as exc:
            raise ChainError("BadPayload", f"extrinsic payload is not JSON: {exc}") from exc
        if not isinstance(body, dict) or set(body) != {"genesis", "call", "args", "signer", "nonce"}:
            raise ChainError("BadPayload", "extrinsic payload must hold genesis, call, args, signer, nonce")
        return body


def encode_payload(genesis: str, call: str, args: dict[str, Any], signer: str, nonce: int) -> bytes:
    body = {"genesis": genesis, "call": call, "args": args, "signer": signer, "nonce": nonce}
    return json.dumps(body, sort_keys=True, separators=(",", ":")).encode()


def sign_extrinsic(
    keypair: Keypair, genesis: str, call: str, args: dict[str, Any], nonce: int
) -> SignedExtrinsic:
    payload = encode_payload(genesis, call, args, keypair.ss58_address, nonce)
    return SignedExtrinsic(payload, bytes(keypair.sign(payload)))


def verify_extrinsic(ext: SignedExtrinsic) -> dict[str, Any]:
    """The decoded body of `ext` if its signature was made by its named signer; else ChainError."""
    body = ext.decode()
    signer = body["signer"]
    try:
        public = Keypair(ss58_address=signer)
    except Exception as exc:  # the SDK raises its own types for a malformed address
        raise ChainError("BadSigner", f"signer {signer!r} is not an ss58 address") from exc
    if len(ext.signature) != 64 or not public.verify(ext.payload, ext.signature):
        raise ChainError("BadSignature", f"signature does not verify for {signer}")
    return body
