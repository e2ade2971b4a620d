"""The `none` codec: the pseudo-gradient as plain fp32, 4 bytes per parameter, lossless."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, ClassVar

if TYPE_CHECKING:
    import torch

from distrai.codec.base import Codec, Entries, FieldSpec, Tensors


@dataclass(frozen=True)
class NoneCodec(Codec):
    """Sends every value as fp32; keeps no residual. The reference that the other codecs are measured by."""

    name: ClassVar[str] = "none"

    def layout(self, numel: int) -> dict[str, FieldSpec]:
        import torch

        return {"values": FieldSpec(torch.float32, numel)}

    def encode_flat(self, flat: torch.Tensor) -> Tensors:
        return {"values": flat.clone()}

    def entries_flat(self, name: str, fields: Tensors, numel: int) -> Entries:
        return PlainEntries(numel, fields["values"])


@dataclass(frozen=True)
class PlainEntries(Entries):
    """The sent values are the decoded ones: every entry of a range, read in place."""

    numel: int
    values: torch.Tensor

    def between(self, start: int, stop: int) -> tuple[torch.Tensor, torch.Tensor]:
        import torch

        return torch.arange(start, stop, dtype=torch.int64), self.values[start:stop]

    def dense(self) -> torch.Tensor:
        return self.values.clone()
