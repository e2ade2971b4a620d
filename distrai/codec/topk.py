"""The `topk` codec: chunked top-k with 2-bit values and bit-packed indices, after SparseLoCo.

Each parameter is cut into chunks of `chunk` elements. A full chunk keeps its `k` entries of largest
magnitude; the last, shorter chunk of length L keeps `ceil(k·L/chunk)`, the same density. Ties in
magnitude go to the lower index. Kept indices are sent in ascending order within each chunk, each in
`ceil(log2(chunk))` bits.

Values take 2 bits from a 4-level codebook per chunk, `{±lo, ±hi}`: with the kept magnitudes sorted
ascending as `m[0..n)`, `lo = m[n//4]` and `hi = m[3n//4]` (the medians of the lower and upper halves);
bit 0 of a code picks `hi` (the nearer level), bit 1 the negative sign. Levels travel as fp32 pairs.
Selection and levels use only comparisons, sorts and elementwise arithmetic, so the bytes are the
same on every machine and thread count.

Fields: `indices` (uint8, packed), `values` (uint8, packed codes), `levels` (float32, 2 per chunk).
At the defaults (chunk 4096, k 64) that is (64·12 + 64·2)/8 + 8 = 120 bytes per 4096 parameters,
about 0.0293 bytes per parameter. The default `decay` of the carried residual is 0.95.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, ClassVar

if TYPE_CHECKING:
    import torch

from distrai.codec.base import (
    FLOAT32_MAX,
    Codec,
    CodecError,
    Entries,
    FieldSpec,
    Tensors,
    refuse,
    require_fraction,
    require_int,
)
from distrai.codec.bitpack import MAX_BITS, pack_bits, packed_length, unpack_bits

CODE_BITS = 2
HIGH_LEVEL = 1
NEGATIVE = 2


@dataclass(frozen=True)
class TopKCodec(Codec):
    """Keeps `k` of every `chunk` entries at 2 bits each; `decay` weighs the carried residual."""

    name: ClassVar[str] = "topk"
    chunk: int = 4096
    k: int = 64
    decay: float = 0.95

    def __post_init__(self) -> None:
        require_int("chunk", self.chunk, 2, 1 << MAX_BITS)
        require_int("k", self.k, 1, self.chunk)
        object.__setattr__(self, "decay", require_fraction("decay", self.decay))

    @property
    def index_bits(self) -> int:
        return (self.chunk - 1).bit_length()

    def residual_decay(self) -> float:
        return self.decay

    def tail_k(self, tail: int) -> int:
        """Entries kept from a last chunk of `tail` elements."""
        return -(-self.k * tail // self.chunk)

    def layout(self, numel: int) -> dict[str, FieldSpec]:
        import torch

        full, tail = divmod(numel, self.chunk)
        kept = full * self.k + self.tail_k(tail)
        chunks = full + (tail > 0)
        return {
            "indices": FieldSpec(torch.uint8, packed_length(kept, self.index_bits), bits=self.index_bits),
            "values": FieldSpec(torch.uint8, packed_length(kept, CODE_BITS), bits=CODE_BITS),
            "levels": FieldSpec(torch.float32, 2 * chunks, scale_max=FLOAT32_MAX),
        }

    def encode_flat(self, flat: torch.Tensor) -> Tensors:
        import torch

        full, tail = divmod(flat.numel(), self.chunk)
        groups = [(flat[: full * self.chunk].reshape(full, self.chunk), self.k)] if full else []
        if tail:
            groups.append((flat[full * self.chunk :].reshape(1, tail), self.tail_k(tail)))
        parts = [_encode_rows(rows, kept) for rows, kept in groups]
        empty = (torch.zeros(0, dtype=torch.int64), torch.zeros(0, dtype=torch.int64), torch.zeros(0))
        indices, codes, levels = (
            torch.cat([part[i] for part in parts]) if parts else empty[i] for i in range(3)
        )
        return {
            "indices": pack_bits(indices, self.index_bits),
            "values": pack_bits(codes, CODE_BITS),
            "levels": levels,
        }

    def entries_flat(self, name: str, fields: Tensors, numel: int) -> Entries:
        import torch

        full, tail = divmod(numel, self.chunk)
        counts = torch.tensor([self.k] * full + ([self.tail_k(tail)] if tail else []), dtype=torch.int64)
        lengths = torch.tensor([self.chunk] * full + ([tail] if tail else []), dtype=torch.int64)
        chunk_of = torch.repeat_interleave(torch.arange(counts.numel()), counts)
        indices = _unpacked(name, "indices", fields, self.index_bits, chunk_of.numel())
        codes = _unpacked(name, "values", fields, CODE_BITS, chunk_of.numel())
        levels = fields["levels"].reshape(-1, 2)
        if bool((levels[:, 0] > levels[:, 1]).any()):
            chunk = int(torch.nonzero(levels[:, 0] > levels[:, 1])[0])
            raise refuse(
                "bad_scale", f"{name}:levels", f"chunk {chunk} has its low level above its high level"
            )
        _check_indices(name, indices, chunk_of, lengths)
        magnitudes = levels[chunk_of, codes & HIGH_LEVEL]
        signed = torch.where((codes & NEGATIVE) > 0, -magnitudes, magnitudes)
        return KeptEntries(numel, chunk_of * self.chunk + indices, signed)


@dataclass(frozen=True)
class KeptEntries(Entries):
    """The kept entries alone: their flat positions (ascending: chunk by chunk, each chunk's indices
    strictly increasing) and their signed levels; every other entry decodes to zero."""

    numel: int
    positions: torch.Tensor
    values: torch.Tensor

    def between(self, start: int, stop: int) -> tuple[torch.Tensor, torch.Tensor]:
        import torch

        first, last = torch.searchsorted(self.positions, torch.tensor([start, stop])).tolist()
        return self.positions[first:last], self.values[first:last]

    def dense(self) -> torch.Tensor:
        import torch

        decoded = torch.zeros(self.numel, dtype=torch.float32)
        decoded[self.positions] = self.values
        return decoded


def _encode_rows(rows: torch.Tensor, kept: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Indices (ascending per row), 2-bit codes and (lo, hi) levels of the top `kept` of each row."""
    import torch

    length = rows.shape[1]
    magnitudes = rows.abs()
    # Finite non-negative floats order like their bit patterns; the low bits make every key unique and
    # rank the lower index first among equal magnitudes, so the selection has exactly one answer.
    keys = (magnitudes.view(torch.int32).to(torch.int64) << MAX_BITS) | (length - 1 - torch.arange(length))
    indices = torch.sort(torch.topk(keys, kept, dim=1, sorted=False).indices, dim=1).values
    values = torch.gather(rows, 1, indices)
    kept_magnitudes = values.abs()
    ordered = torch.sort(kept_magnitudes, dim=1).values
    low = ordered[:, kept // 4]
    high = ordered[:, (3 * kept) // 4]
    nearer_high = (high.unsqueeze(1) - kept_magnitudes) < (kept_magnitudes - low.unsqueeze(1))
    codes = nearer_high.to(torch.int64) * HIGH_LEVEL + (values < 0).to(torch.int64) * NEGATIVE
    return indices.reshape(-1), codes.reshape(-1), torch.stack([low, high], dim=1).reshape(-1)


def _unpacked(name: str, field: str, fields: Tensors, bits: int, count: int) -> torch.Tensor:
    try:
        return unpack_bits(fields[field], bits, count)
    except CodecError as error:
        raise refuse(error.reason, f"{name}:{field}", error.detail) from error


def _check_indices(name: str, indices: torch.Tensor, chunk_of: torch.Tensor, lengths: torch.Tensor) -> None:
    import torch

    outside = indices >= lengths[chunk_of]
    if bool(outside.any()):
        entry = int(torch.nonzero(outside)[0])
        raise refuse(
            "index_out_of_range",
            f"{name}:indices",
            f"entry {entry} points at {int(indices[entry])}, outside chunk {int(chunk_of[entry])} "
            f"of length {int(lengths[chunk_of[entry]])}",
        )
    same_chunk = chunk_of[1:] == chunk_of[:-1]
    disordered = same_chunk & (indices[1:] <= indices[:-1])
    if bool(disordered.any()):
        entry = int(torch.nonzero(disordered)[0]) + 1
        raise refuse(
            "bad_index_order",
            f"{name}:indices",
            f"entry {entry} ({int(indices[entry])}) does not follow {int(indices[entry - 1])} in chunk "
            f"{int(chunk_of[entry])}; indices must strictly increase within a chunk",
        )
