"""Tensors hashed in pieces: the root over piece digests is the canonical hash, and one piece can
be checked alone against its digest, which is what lets a miner reveal only a sample."""

from __future__ import annotations

import torch

from distrai.train.hashing import (
    PIECE_ELEMENTS,
    PieceRef,
    digest_of_piece,
    digests_root,
    hash_sections,
    piece_count,
    piece_digests,
    piece_of,
    pieces,
)

SMALL = 8


def tensors() -> dict[str, dict[str, torch.Tensor]]:
    generator = torch.Generator().manual_seed(0)
    return {
        "param": {"w": torch.randn(3, 7, generator=generator), "b": torch.randn(5, generator=generator)},
        "optim": {"w/exp_avg": torch.randn(3, 7, generator=generator)},
    }


def test_pieces_cut_the_flattened_values_and_a_small_tensor_is_one_piece():
    assert [piece_count(n, SMALL) for n in (0, 1, 8, 9, 21)] == [1, 1, 1, 2, 3]
    refs = list(pieces(tensors(), SMALL))
    assert refs == sorted(refs)
    assert [r.key for r in refs if r.section == "param"] == [
        "param/b#0",
        "param/w#0",
        "param/w#1",
        "param/w#2",
    ]
    w = tensors()["param"]["w"]
    assert torch.equal(torch.cat([piece_of(w, i, SMALL) for i in range(3)]), w.reshape(-1))
    assert piece_count(150_000_000) == 144 and PIECE_ELEMENTS % 4096 == 0


def test_a_piece_checks_alone_against_its_digest():
    sections = tensors()
    digests = piece_digests(sections, SMALL)
    ref = PieceRef("param", "w", 1)
    piece = piece_of(sections["param"]["w"], 1, SMALL).clone()
    assert digest_of_piece(ref, piece, (3, 7)) == digests[ref]
    piece[0] += 1
    assert digest_of_piece(ref, piece, (3, 7)) != digests[ref]
    assert (
        digest_of_piece(PieceRef("param", "w", 2), piece_of(sections["param"]["w"], 1, SMALL), (3, 7))
        != digests[ref]
    )
    assert digest_of_piece(ref, piece_of(sections["param"]["w"], 1, SMALL), (7, 3)) != digests[ref]


def test_the_root_binds_every_piece_and_nothing_else():
    sections = tensors()
    digests = piece_digests(sections)
    assert digests_root("t", digests) == hash_sections("t", sections)
    assert digests_root("t", dict(reversed(list(digests.items())))) == hash_sections("t", sections)
    changed = {k: dict(v) for k, v in sections.items()}
    changed["param"]["w"] = changed["param"]["w"].clone()
    changed["param"]["w"][2, 6] += 1e-7
    after = piece_digests(changed, SMALL)
    before = piece_digests(sections, SMALL)
    assert [ref.key for ref in before if before[ref] != after[ref]] == ["param/w#2"]
    assert hash_sections("t", changed) != hash_sections("t", sections)
    fewer = dict(digests)
    fewer.pop(next(iter(fewer)))
    assert digests_root("t", fewer) != digests_root("t", digests)
    assert digests_root("u", digests) != digests_root("t", digests)
