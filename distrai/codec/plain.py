"""The `none` codec: the pseudo-gradient as plain fp32, 4 bytes per parameter, lossless."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, ClassVar

if TYPE_CHECKING:
    import torch

from distrai.codec.base import Codec, FieldSpec, Tensors


@dataclass(frozen=True)
class NoneCodec(Codec):
    """Sends every value as fp32; keeps no residual. The reference that the other codecs are measured by."""

    name: ClassVar[str] = "none"

    def layout(self, numel: int) -> dict[str, FieldSpec]:
        import torch

        return {"values": FieldSpec(torch.float32, numel)}

    def encode_flat(self, flat: torch.Tensor) -> Tensors:
        return {"values": flat.clone()}

    def decode_flat(self, name: str, fields: Tensors, numel: int) -> torch.Tensor:
        return fields["values"].clone()
