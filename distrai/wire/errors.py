"""Why a peer's bytes were refused.

Every refusal in `distrai.wire` is a `WireError` carrying one `Reason`, so a validator can record the
reason in its report (as the plain string value) and a miner can read exactly what was wrong.
"""

from __future__ import annotations

from enum import StrEnum


class Reason(StrEnum):
    """One member per kind of refusal; the value is what reports carry."""

    MISSING_SIGNATURE = "missing_signature"
    BAD_SIGNATURE = "bad_signature"
    UNREGISTERED_HOTKEY = "unregistered_hotkey"
    WRONG_SIGNER = "wrong_signer"
    WRONG_RUN = "wrong_run"
    WRONG_WINDOW = "wrong_window"
    HASH_MISMATCH = "hash_mismatch"
    WRONG_OWNER = "wrong_owner"
    TOO_LARGE = "too_large"
    WRONG_DTYPE = "wrong_dtype"
    WRONG_SHAPE = "wrong_shape"
    MISSING_TENSOR = "missing_tensor"
    UNEXPECTED_TENSOR = "unexpected_tensor"
    NON_FINITE = "non_finite"
    MALFORMED_SAFETENSORS = "malformed_safetensors"
    MALFORMED_JSON = "malformed_json"
    PICKLE = "pickle"
    MISSING_FIELD = "missing_field"
    BAD_FIELD = "bad_field"


class WireError(ValueError):
    """Bytes or values refused for `reason`; the message names what was wrong."""

    def __init__(self, reason: Reason, message: str):
        super().__init__(f"{reason}: {message}")
        self.reason = reason
        self.message = message
