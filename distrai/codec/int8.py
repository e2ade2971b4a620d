"""The `int8` codec: chunked absmax int8 quantization with a fp32 scale per chunk, and error feedback.

Each parameter is cut into chunks of `chunk` elements (the last one may be shorter). A chunk's scale is
`absmax / 127`; each element is sent as `round_half_even(x / scale)` in [−127, 127] (−128 is never sent
and is refused), so `|x − q·scale| ≤ scale / 2`. An all-zero chunk has scale 0 and sends zeros.
Fields: `values` (int8, one per element) and `scales` (float32, one per chunk): `1 + 4/chunk` bytes per
parameter. Every operation is elementwise or a max, so the bytes are the same on every machine.
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

LEVELS = 127
# The largest scale a decoder accepts: 127 times it stays finite in fp32, so decoding never overflows.
SCALE_MAX = FLOAT32_MAX / 128


@dataclass(frozen=True)
class Int8Codec(Codec):
    """int8 values with one fp32 scale per `chunk` elements; `decay` weighs the carried residual."""

    name: ClassVar[str] = "int8"
    chunk: int = 4096
    decay: float = 1.0

    def __post_init__(self) -> None:
        require_int("chunk", self.chunk, 1, 1 << 24)
        object.__setattr__(self, "decay", require_fraction("decay", self.decay))

    def residual_decay(self) -> float:
        return self.decay

    def layout(self, numel: int) -> dict[str, FieldSpec]:
        import torch

        return {
            "values": FieldSpec(torch.int8, numel),
            "scales": FieldSpec(torch.float32, -(-numel // self.chunk), scale_max=SCALE_MAX),
        }

    def encode_flat(self, flat: torch.Tensor) -> Tensors:
        import torch

        numel = flat.numel()
        chunks = -(-numel // self.chunk)
        padded = torch.zeros(chunks * self.chunk, dtype=torch.float32)
        padded[:numel] = flat
        rows = padded.view(chunks, self.chunk)
        scales = rows.abs().amax(dim=1) / LEVELS
        if bool((scales > SCALE_MAX).any()):
            raise CodecError(
                "bad_scale", f"values above {SCALE_MAX * LEVELS:g} in magnitude cannot be sent as int8"
            )
        divisors = torch.where(scales > 0, scales, torch.ones_like(scales)).unsqueeze(1)
        quantized = torch.round(rows / divisors).clamp(-LEVELS, LEVELS).to(torch.int8)
        return {"values": quantized.reshape(-1)[:numel].clone(), "scales": scales}

    def entries_flat(self, name: str, fields: Tensors, numel: int) -> Entries:
        values = fields["values"]
        if bool((values == -LEVELS - 1).any()):
            raise refuse(
                "value_out_of_range", f"{name}:values", f"holds {-LEVELS - 1}; values lie in [-127, 127]"
            )
        return QuantizedEntries(numel, values, fields["scales"], self.chunk)


@dataclass(frozen=True)
class QuantizedEntries(Entries):
    """Every entry of a range, each its int8 value times its chunk's scale in fp32, as decoding
    multiplies them: a range at a time, never the whole parameter."""

    numel: int
    values: torch.Tensor
    scales: torch.Tensor
    chunk: int

    def between(self, start: int, stop: int) -> tuple[torch.Tensor, torch.Tensor]:
        import torch

        indices = torch.arange(start, stop, dtype=torch.int64)
        return indices, self.values[start:stop].to(torch.float32) * self.scales[indices // self.chunk]

    def dense(self) -> torch.Tensor:
        import torch

        scales = self.scales.repeat_interleave(self.chunk)[: self.numel]
        return self.values.to(torch.float32) * scales
