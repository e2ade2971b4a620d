"""Lossless coding of tensors for transport: every bit comes back.

A float tensor's elements are taken as unsigned words of their width (the IEEE bit patterns). Against
a base (the window's G_w, which every validator holds) each word becomes the difference of the two
patterns read as ordered integers (a monotone map: adjacent floats are adjacent integers, across
zero and powers of two too), zigzagged so that small differences of either sign are small numbers.
A parameter that moved by a few thousand units in the last place from G_w then has zero high bytes.
The words are split into byte planes (all first bytes, all second bytes, ...), each compressed on its
own with zstd: a plane of sign and exponent bytes is far from random, a plane of low mantissa bytes
is not, and each is coded at its own entropy. Every step is a bijection on words, so decoding with
the same base gives the original bits, NaN payloads included.

Decompression is for untrusted bytes: each plane's frame must declare exactly the size the caller
expects (known from the tensor's shape, never from the frame), must decode to it, and must carry
nothing after it; so no frame can make the decoder allocate more than the caller allowed.
"""

from __future__ import annotations

import numpy as np
import torch
import zstandard

WORDS = {1: np.uint8, 2: np.uint16, 4: np.uint32, 8: np.uint64}
"""Unsigned word type by element width in bytes."""
FLOAT_DTYPES = frozenset({torch.float16, torch.bfloat16, torch.float32, torch.float64})
ZSTD_LEVEL = 1
"""zstd's level 1: on byte planes of training states it compressed as well as level 3, faster
(`bench/reveal_size.py`)."""


class CodingError(ValueError):
    """Coded bytes that do not decode to what was expected; the message says what is wrong."""


def words_of(tensor: torch.Tensor) -> np.ndarray:
    """The tensor's elements as unsigned words of their width, flattened in C order (a CPU view when
    the tensor is a contiguous CPU tensor)."""
    flat = tensor.detach().to("cpu").contiguous().reshape(-1)
    width = flat.element_size()
    return flat.view(torch.uint8).numpy().view(WORDS[width])


def tensor_of(words: np.ndarray, dtype: torch.dtype, shape: tuple[int, ...]) -> torch.Tensor:
    """The tensor of `dtype` and `shape` whose bit patterns are `words`."""
    raw = torch.from_numpy(np.ascontiguousarray(words).view(np.uint8).copy())
    return raw.view(dtype).reshape(shape)


def _signs(words: np.ndarray) -> np.ndarray:
    """All ones where a word's top bit is set, else zero (an arithmetic shift of the signed view)."""
    signed = words.view(words.dtype.str.replace("u", "i"))
    return (signed >> (8 * words.itemsize - 1)).view(words.dtype)


def _top(words: np.ndarray) -> np.generic:
    return words.dtype.type(1 << (8 * words.itemsize - 1))


def _ordered(words: np.ndarray) -> np.ndarray:
    """IEEE bit patterns as unsigned integers in the order of the floats they stand for: a negative
    float's bits all flipped, a positive float's sign bit set."""
    mask = _signs(words)
    mask |= _top(words)
    mask ^= words
    return mask


def _unordered(ordered: np.ndarray) -> np.ndarray:
    mask = _signs(ordered)
    np.invert(mask, out=mask)
    mask |= _top(ordered)
    mask ^= ordered
    return mask


def _zigzag(diff: np.ndarray) -> np.ndarray:
    """A wrapped difference as an unsigned number, in place: 0, −1, 1, −2, … → 0, 1, 2, 3, …"""
    signs = _signs(diff)
    diff <<= diff.dtype.type(1)
    diff ^= signs
    return diff


def _unzigzag(z: np.ndarray) -> np.ndarray:
    signs = z & z.dtype.type(1)
    np.negative(signs, out=signs)
    z = z >> z.dtype.type(1)
    z ^= signs
    return z


def delta_words(values: torch.Tensor, base: torch.Tensor) -> np.ndarray:
    """The zigzagged difference of `values` from `base` (same float dtype and shape) as ordered integers."""
    _check_pair(values, base)
    diff = _ordered(words_of(values))
    diff -= _ordered(words_of(base))
    return _zigzag(diff)


def undelta_words(delta: np.ndarray, base: torch.Tensor) -> np.ndarray:
    """The words `delta_words` was given, from its output and the same base."""
    ordered = _ordered(words_of(base))
    ordered += _unzigzag(delta)
    return _unordered(ordered)


def split_planes(words: np.ndarray) -> list[bytes]:
    """Byte plane i holds byte i (little-endian) of every word."""
    as_bytes = words.view(np.uint8).reshape(-1, words.itemsize)
    return [as_bytes[:, i].tobytes() for i in range(words.itemsize)]


def join_planes(planes: list[bytes], width: int) -> np.ndarray:
    """The words whose byte planes are `planes` (each of one length)."""
    count = len(planes[0]) if planes else 0
    if len(planes) != width or any(len(p) != count for p in planes):
        raise CodingError(
            f"{len(planes)} byte planes of lengths {[len(p) for p in planes]}, expected {width} of one length"
        )
    as_bytes = np.empty((count, width), dtype=np.uint8)
    for i, plane in enumerate(planes):
        as_bytes[:, i] = np.frombuffer(plane, dtype=np.uint8)
    return as_bytes.reshape(-1).view(WORDS[width])


def compress(data: bytes, level: int = ZSTD_LEVEL) -> bytes:
    """One zstd frame that records its content size (which `decompress_exact` requires) and a checksum
    of it (so a corrupted frame is refused as such, not decoded to other bits)."""
    return zstandard.ZstdCompressor(level=level, write_content_size=True, write_checksum=True).compress(data)


def decompress_exact(frame: bytes | memoryview, size: int) -> bytes:
    """The content of one zstd frame that must be exactly `size` bytes, with nothing after it."""
    try:
        declared = zstandard.frame_content_size(frame)
    except zstandard.ZstdError as exc:
        raise CodingError(f"not a zstd frame: {exc}") from None
    if declared != size:
        raise CodingError(f"the frame declares {declared} bytes of content, expected {size}")
    try:
        content = zstandard.ZstdDecompressor().decompress(frame, allow_extra_data=False)
    except zstandard.ZstdError as exc:
        raise CodingError(f"the frame does not decompress: {exc}") from None
    if len(content) != size:
        raise CodingError(f"the frame decompressed to {len(content)} bytes, expected {size}")
    return content


def _check_pair(values: torch.Tensor, base: torch.Tensor) -> None:
    if values.dtype not in FLOAT_DTYPES or values.dtype != base.dtype or values.shape != base.shape:
        raise ValueError(
            f"a difference needs two float tensors of one dtype and shape, got {values.dtype} "
            f"{tuple(values.shape)} and {base.dtype} {tuple(base.shape)}"
        )
