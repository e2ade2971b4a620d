"""Canonical SHA-256 of named tensors: the same tensors give the same hex digest on any machine.

Tensors are hashed in pieces of `PIECE_ELEMENTS` elements of their flattened C-order values (a
smaller tensor is one piece), and the hash of a set of tensors is the root over the pieces' digests.
So a party that holds the list of piece digests can check any one piece alone: that is how a miner
reveals a sample of its last state and residual (`distrai.protocol.trajectory`) instead of all of it.

A piece's digest is the SHA-256 of one JSON line `[section, name, dtype, shape, piece index]`
followed by the piece's raw little-endian bytes. The root is the SHA-256 of a domain tag line and
then, for each section in sorted order, each name in sorted order and each piece in order, one JSON
line `[section, name, piece index, digest]`. Device, strides and dict insertion order do not
matter; dtype, shape, every bit of every value, and every name do.
"""

from __future__ import annotations

import hashlib
import json
import sys
from collections.abc import Iterator, Mapping
from dataclasses import dataclass

import torch

from distrai.train.pieces import PIECE_ELEMENTS

if sys.byteorder != "little":
    raise ImportError("distrai's canonical tensor hashing assumes a little-endian machine")


@dataclass(frozen=True, order=True)
class PieceRef:
    """One piece of one named tensor in one section."""

    section: str
    name: str
    index: int

    @property
    def key(self) -> str:
        return f"{self.section}/{self.name}#{self.index}"


def tensor_bytes(tensor: torch.Tensor) -> memoryview:
    """The raw bytes of a tensor in C order, copied to the CPU when needed."""
    flat = tensor.detach().to("cpu").contiguous().reshape(-1)
    return flat.view(torch.uint8).numpy().data


def piece_count(numel: int, piece_elements: int = PIECE_ELEMENTS) -> int:
    """Pieces of a tensor of `numel` elements (an empty tensor is one empty piece)."""
    return max(1, -(-numel // piece_elements))


def piece_of(tensor: torch.Tensor, index: int, piece_elements: int = PIECE_ELEMENTS) -> torch.Tensor:
    """Piece `index` of `tensor`: a 1-d slice of its flattened values."""
    flat = tensor.detach().reshape(-1)
    return flat[index * piece_elements : (index + 1) * piece_elements]


def pieces(
    sections: Mapping[str, Mapping[str, torch.Tensor]], piece_elements: int = PIECE_ELEMENTS
) -> Iterator[PieceRef]:
    """Every piece of the tensors, in the root's canonical order."""
    for section in sorted(sections):
        for name in sorted(sections[section]):
            for index in range(piece_count(sections[section][name].numel(), piece_elements)):
                yield PieceRef(section, name, index)


def piece_digest(ref: PieceRef, tensor: torch.Tensor, piece_elements: int = PIECE_ELEMENTS) -> str:
    """Hex digest of piece `ref.index` of `tensor` (the whole tensor, of which the piece is cut)."""
    return digest_of_piece(ref, piece_of(tensor, ref.index, piece_elements), tuple(tensor.shape))


def digest_of_piece(ref: PieceRef, piece: torch.Tensor, shape: tuple[int, ...]) -> str:
    """Hex digest of a piece already cut from a tensor of `shape` (and the piece's dtype)."""
    header = [ref.section, ref.name, str(piece.dtype).removeprefix("torch."), list(shape), ref.index]
    digest = hashlib.sha256(json.dumps(header).encode() + b"\n")
    digest.update(tensor_bytes(piece))
    return digest.hexdigest()


def piece_digests(
    sections: Mapping[str, Mapping[str, torch.Tensor]], piece_elements: int = PIECE_ELEMENTS
) -> dict[PieceRef, str]:
    """Every piece's digest, in the root's canonical order."""
    return {
        ref: piece_digest(ref, sections[ref.section][ref.name], piece_elements)
        for ref in pieces(sections, piece_elements)
    }


def digests_root(tag: str, digests: Mapping[PieceRef, str]) -> str:
    """The hash of a set of tensors from its pieces' digests (taken in canonical order)."""
    root = hashlib.sha256(json.dumps(["distrai", tag]).encode() + b"\n")
    for ref in sorted(digests):
        root.update(json.dumps([ref.section, ref.name, ref.index, digests[ref]]).encode() + b"\n")
    return root.hexdigest()


def hash_sections(tag: str, sections: Mapping[str, Mapping[str, torch.Tensor]]) -> str:
    """Hex SHA-256 of named tensors grouped in sections, under domain tag `tag`."""
    return digests_root(tag, piece_digests(sections))


def hash_tensors(tag: str, tensors: Mapping[str, torch.Tensor]) -> str:
    """Hex SHA-256 of one set of named tensors (for example a model's parameters)."""
    return hash_sections(tag, {"tensors": tensors})
