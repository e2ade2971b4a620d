"""A miner's update blob: the codec's payload as safetensors, bound to the miner and the window.

The blob's metadata names the hotkey and the window it was made for, beside the codec's own
entries. The manifest commits to the blob's sha256 before anything is revealed, so a miner that
copies another's committed hash (a copycat) or resends an old blob (stale) publishes a blob that
names someone else or another window, and is refused without any heuristic: nobody can make a
blob bound to their own hotkey with the same payload before the payload is revealed.
"""

from __future__ import annotations

from collections.abc import Mapping

import torch

from distrai.codec import Codec
from distrai.train.hashing import PieceRef, digests_root, piece_digests
from distrai.wire import Reason, WireError, decode_tensors, encode_tensors

HOTKEY_ENTRY = "distrai.hotkey"
WINDOW_ENTRY = "distrai.window"
RESIDUAL_TAG = "codec_residual"


RESIDUAL_SECTION = "tensors"


def residual_hash(residual: Mapping[str, torch.Tensor]) -> str:
    """The canonical hash of a codec's error-feedback residual (manifests commit to it)."""
    return digests_root(RESIDUAL_TAG, residual_digests(residual))


def residual_digests(residual: Mapping[str, torch.Tensor]) -> dict[PieceRef, str]:
    """The piece digests `residual_hash` is the root of (one section, `tensors`)."""
    return piece_digests({RESIDUAL_SECTION: dict(residual)})


def encode_update(
    payload: Mapping[str, torch.Tensor], codec_metadata: Mapping[str, str], hotkey: str, window: int
) -> bytes:
    """The blob a miner publishes for `window`."""
    metadata = {**codec_metadata, HOTKEY_ENTRY: hotkey, WINDOW_ENTRY: str(window)}
    return encode_tensors(dict(payload), metadata)


def is_encoding_of(
    blob: bytes,
    payload: Mapping[str, torch.Tensor],
    codec_metadata: Mapping[str, str],
    hotkey: str,
    window: int,
) -> bool:
    """Whether `blob` holds exactly this payload and metadata for `hotkey` and `window`.

    Compared by content, not by bytes: safetensors writes its metadata entries in no fixed order,
    so two encodings of one update may differ in their bytes."""
    try:
        tensors, metadata = decode_tensors(blob, max_bytes=len(blob))
    except WireError:
        return False
    expected = {**codec_metadata, HOTKEY_ENTRY: hotkey, WINDOW_ENTRY: str(window)}
    return (
        metadata == expected
        and tensors.keys() == payload.keys()
        and all(
            tensors[k].dtype == payload[k].dtype
            and tensors[k].shape == payload[k].shape
            and torch.equal(tensors[k], payload[k])
            for k in tensors
        )
    )


def decode_update(
    blob: bytes,
    codec: Codec,
    shapes: Mapping[str, tuple[int, ...]],
    max_bytes: int,
    hotkey: str,
    window: int,
) -> dict[str, torch.Tensor]:
    """A blob that `hotkey` published for `window` → its pseudo-gradient; WireError or CodecError
    name what is wrong (`wrong_owner` when the blob was made for another hotkey or window)."""
    payload, metadata = decode_tensors(blob, max_bytes=max_bytes)
    named = (metadata.get(HOTKEY_ENTRY), metadata.get(WINDOW_ENTRY))
    if named != (hotkey, str(window)):
        raise WireError(
            Reason.WRONG_OWNER,
            f"the update was made by {named[0]!r} for window {named[1]!r}, not by {hotkey} for window {window}",
        )
    codec_metadata = {k: v for k, v in metadata.items() if k not in (HOTKEY_ENTRY, WINDOW_ENTRY)}
    return codec.decode(payload, codec_metadata, dict(shapes))
