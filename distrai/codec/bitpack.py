"""Bit packing of small unsigned integers into bytes, vectorized over the whole stream.

Layout: entry `i` occupies stream bits `[i·bits, (i+1)·bits)`, least significant bit first; stream bit
`j` is bit `j % 8` (least significant first) of byte `j // 8`. The last byte is padded with zero bits,
and `unpack_bits` refuses a stream whose padding is not zero, so every stream has one valid encoding.
The loops below run over bit positions (at most 16 and 8) or over the entries of one group of bytes
(at most 8), never over the stream's entries.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import torch

from distrai.codec.base import CodecError

MAX_BITS = 16


def packed_length(count: int, bits: int) -> int:
    """Bytes needed for `count` entries of `bits` bits."""
    return (count * bits + 7) // 8


def pack_bits(values: torch.Tensor, bits: int) -> torch.Tensor:
    """Pack a 1-D int64 tensor of entries in [0, 2**bits) into a 1-D uint8 tensor."""
    import torch

    _check_bits(bits)
    if values.dtype != torch.int64 or values.dim() != 1:
        raise CodecError(
            "bad_dtype", f"pack_bits needs a 1-D int64 tensor, got {values.dtype} {tuple(values.shape)}"
        )
    if values.numel() and bool(((values < 0) | (values >= 1 << bits)).any()):
        raise CodecError("value_out_of_range", f"pack_bits entries must lie in [0, {1 << bits})")
    count = values.numel()
    nbytes = packed_length(count, bits)
    stream = torch.zeros(nbytes * 8, dtype=torch.uint8)
    planes = stream[: count * bits].view(count, bits)
    narrow = values.to(torch.int32)
    for bit in range(bits):
        planes[:, bit] = (narrow >> bit) & 1
    octets = stream.view(nbytes, 8)
    packed = torch.zeros(nbytes, dtype=torch.uint8)
    for bit in range(8):
        packed |= octets[:, bit] << bit
    return packed


def unpack_bits(packed: torch.Tensor, bits: int, count: int) -> torch.Tensor:
    """Unpack `count` entries of `bits` bits from a 1-D uint8 tensor; the inverse of `pack_bits`."""
    import torch

    _check_bits(bits)
    if packed.dtype != torch.uint8 or packed.dim() != 1:
        raise CodecError(
            "bad_dtype", f"unpack_bits needs a 1-D uint8 tensor, got {packed.dtype} {tuple(packed.shape)}"
        )
    if count < 0:
        raise CodecError("bad_count", f"unpack_bits needs a non-negative count, got {count}")
    expected = packed_length(count, bits)
    if packed.numel() != expected:
        raise CodecError(
            "bad_count",
            f"{packed.numel()} bytes cannot hold exactly {count} entries of {bits} bits ({expected} bytes)",
        )
    used = count * bits % 8
    if used and int(packed[-1]) >> used:
        raise CodecError("bad_padding", "the padding bits after the last entry are not zero")
    # Entries repeat their place in the bytes every `group_bytes` bytes (12 bits: 2 entries in 3 bytes),
    # so each of a group's entries is read from its 1 to 3 bytes in every group at once.
    group_bytes, per_group = bits // math.gcd(bits, 8), 8 // math.gcd(bits, 8)
    groups = -(-count // per_group)
    padded = torch.zeros(groups * group_bytes, dtype=torch.uint8)
    padded[:expected] = packed
    rows = padded.view(groups, group_bytes).to(torch.int32)
    values = torch.empty(groups, per_group, dtype=torch.int64)
    for entry in range(per_group):
        first, shift = divmod(entry * bits, 8)
        word = rows[:, first]
        for extra in range(1, (shift + bits + 7) // 8):
            word = word | (rows[:, first + extra] << 8 * extra)
        values[:, entry] = (word >> shift) & ((1 << bits) - 1)
    return values.reshape(-1)[:count]


def _check_bits(bits: int) -> None:
    if not isinstance(bits, int) or isinstance(bits, bool) or not 1 <= bits <= MAX_BITS:
        raise CodecError("bad_option", f"bits must be an integer in [1, {MAX_BITS}], got {bits!r}")
