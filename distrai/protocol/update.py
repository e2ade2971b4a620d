"""A miner's update blob: the codec's payload as safetensors, bound to the miner and the window.

The blob's metadata names the hotkey and the window it was made for, beside the codec's own
entries. The manifest commits to the blob's sha256 before anything is revealed, so a miner that
copies another's committed hash (a copycat) or resends an old blob (stale) publishes a blob that
names someone else or another window, and is refused without any heuristic: nobody can make a
blob bound to their own hotkey with the same payload before the payload is revealed.

A validator checks every miner's blob (`check_update`: every refusal decoding makes) but decodes only
the updates it measures, replays or aggregates: a dense update is 4 bytes a parameter, 1 GB at 257M,
where the blob is 7.5 MB. It sketches the others from their payload (`CheckedUpdate.sketch`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

import torch

from distrai.codec import Codec, Entries
from distrai.train.hashing import PieceRef, digests_root, piece_digests
from distrai.train.sketch import sketch_entries
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
    payload, codec_metadata = _bound_payload(blob, max_bytes, hotkey, window)
    return codec.decode(payload, codec_metadata, dict(shapes))


def check_update(
    blob: bytes,
    codec: Codec,
    shapes: Mapping[str, tuple[int, ...]],
    max_bytes: int,
    hotkey: str,
    window: int,
) -> CheckedUpdate:
    """Every check `decode_update` makes, refusing what it refuses with the same error, without
    building the dense tensors; the blob kept, to decode or sketch when needed."""
    payload, codec_metadata = _bound_payload(blob, max_bytes, hotkey, window)
    codec.entries(payload, codec_metadata, dict(shapes))
    return CheckedUpdate(blob, codec, dict(shapes), hotkey, window)


def _bound_payload(
    blob: bytes, max_bytes: int, hotkey: str, window: int
) -> tuple[dict[str, torch.Tensor], dict[str, str]]:
    """The codec's payload and metadata of a blob that `hotkey` published for `window`; WireError
    when it is no safetensors file within `max_bytes`, or was made for another hotkey or window."""
    payload, metadata = decode_tensors(blob, max_bytes=max_bytes)
    named = (metadata.get(HOTKEY_ENTRY), metadata.get(WINDOW_ENTRY))
    if named != (hotkey, str(window)):
        raise WireError(
            Reason.WRONG_OWNER,
            f"the update was made by {named[0]!r} for window {named[1]!r}, not by {hotkey} for window {window}",
        )
    return payload, {k: v for k, v in metadata.items() if k not in (HOTKEY_ENTRY, WINDOW_ENTRY)}


@dataclass(frozen=True)
class CheckedUpdate:
    """An update blob that passed `check_update`, for its miner and window. Each use reads the blob
    again (about 10 ms for the 7.5 MB of a 257M-parameter update), so nothing but the blob is kept."""

    blob: bytes = field(repr=False)
    codec: Codec
    shapes: dict[str, tuple[int, ...]]
    hotkey: str
    window: int

    def entries(self) -> dict[str, Entries]:
        """Each parameter's decoded values as the payload holds them (`distrai.codec.Entries`)."""
        payload, codec_metadata = _bound_payload(self.blob, len(self.blob), self.hotkey, self.window)
        return self.codec.entries(payload, codec_metadata, self.shapes)

    def decode(self) -> dict[str, torch.Tensor]:
        """The pseudo-gradient, as `decode_update` gives it."""
        return decode_update(self.blob, self.codec, self.shapes, len(self.blob), self.hotkey, self.window)

    def sketch(self, seed: str, size: int) -> torch.Tensor:
        """`distrai.train.sketch.sketch(self.decode(), seed, size)`, bit for bit, without decoding."""
        return sketch_entries(self.entries(), seed, size)
