"""The validator's side of a trajectory reveal (`distrai.protocol.trajectory`): the revealed piece digests
against the manifest's committed roots, the drawn pieces against their digests, and the encoding
of each drawn piece against the published update and the committed outgoing residual."""

from __future__ import annotations

from collections.abc import Mapping

import torch

from distrai.codec import Codec, CodecError
from distrai.protocol.trajectory import TrajectoryReveal, residual_ref
from distrai.protocol.update import RESIDUAL_TAG
from distrai.train.hashing import PieceRef, digest_of_piece, digests_root, piece_of
from distrai.train.train_state import STATE_TAG, STEP_PIECE, step_digest
from distrai.wire.verdicts import Check
from distrai.wire.window_documents import UpdateManifest
from validators.refused import Refused


def check_roots(reveal: TrajectoryReveal, manifest: UpdateManifest) -> None:
    """The revealed digest lists must be the ones the manifest committed to, the last state's for
    its last step (`states`)."""
    if digests_root(STATE_TAG, reveal.last_state) != manifest.boundaries[-1].state_hash:
        raise Refused(
            Check.STATES, "the revealed digests of the last state do not hash to its committed state hash"
        )
    last = manifest.boundaries[-1].step
    if reveal.last_state.get(STEP_PIECE) != step_digest(last):
        raise Refused(Check.STATES, f"the committed last state is not a state after step {last}")
    for what, digests, committed in (
        ("incoming", reveal.residual_in, manifest.residual_in_hash),
        ("outgoing", reveal.residual_out, manifest.residual_out_hash),
    ):
        if (digests is None) != (committed is None):
            raise Refused(
                Check.STATES,
                f"the {what} residual's digests are {'missing' if digests is None else 'unexpected'}",
            )
        if digests is not None and digests_root(RESIDUAL_TAG, digests) != committed:
            raise Refused(
                Check.STATES, f"the revealed digests of the {what} residual do not hash to the committed hash"
            )


def check_last_pieces(
    reveal: TrajectoryReveal, sample: list[PieceRef], params: Mapping[str, torch.Tensor], piece_elements: int
) -> None:
    """Every drawn piece of the last parameters is revealed, well formed (the dtype and length of
    `params`, the model's own parameters) and hashes to its digest."""
    for ref in sample:
        expected = params[ref.name]
        piece = _revealed_piece(Check.STATES, "last state", reveal.params, ref, expected, piece_elements)
        if digest_of_piece(ref, piece, tuple(expected.shape)) != reveal.last_state.get(ref):
            raise Refused(
                Check.STATES, f"piece {ref.key} of the last state does not hash to its committed digest"
            )


def check_encoding(
    codec: Codec,
    reveal: TrajectoryReveal,
    sample: list[PieceRef],
    base: Mapping[str, torch.Tensor],
    update: Mapping[str, torch.Tensor],
    piece_elements: int,
) -> None:
    """On every drawn piece, the published (decoded) update is the codec's encoding of G_w − θ_H
    (`base`: G_w as float32 from the model's own dtype, as the miner's inner loop took it)
    plus the decayed incoming residual, and the committed outgoing residual holds what it leaves
    (`trajectory`); the same arithmetic, element for element, as `Codec.encode`."""
    decay = codec.residual_decay()
    for ref in sample:
        shape = tuple(base[ref.name].shape)
        accumulated = piece_of(base[ref.name], ref.index, piece_elements).to(torch.float32) - reveal.params[
            ref
        ].to(torch.float32)
        rref = residual_ref(ref)
        if reveal.residual_in is not None:
            residual = _revealed_piece(
                Check.TRAJECTORY,
                "incoming residual",
                reveal.residual,
                rref,
                torch.empty(shape),
                piece_elements,
            )
            if digest_of_piece(rref, residual, shape) != reveal.residual_in.get(rref):
                raise Refused(
                    Check.TRAJECTORY, f"piece {rref.key} of the incoming residual does not hash to its digest"
                )
            if decay is None:
                raise Refused(
                    Check.TRAJECTORY,
                    f"codec {codec.name} keeps no residual, but an incoming one was revealed",
                )
            accumulated = (residual if decay == 1.0 else residual * decay) + accumulated
        if not bool(torch.isfinite(accumulated).all()):
            raise Refused(Check.TRAJECTORY, f"G_w − θ_H plus the residual is not finite in piece {ref.key}")
        try:
            decoded = codec.decode_flat(ref.name, codec.encode_flat(accumulated), accumulated.numel())
        except CodecError as exc:
            raise Refused(Check.TRAJECTORY, f"piece {ref.key} does not encode: {exc}") from exc
        if not torch.equal(decoded, piece_of(update[ref.name], ref.index, piece_elements)):
            raise Refused(
                Check.TRAJECTORY,
                f"the published update is not the encoding of the committed trajectory (piece {ref.key})",
            )
        if reveal.residual_out is not None:
            left = accumulated - decoded
            if digest_of_piece(rref, left, shape) != reveal.residual_out.get(rref):
                raise Refused(
                    Check.TRAJECTORY,
                    f"residual_out_hash is not the residual the encoding leaves (piece {ref.key})",
                )


def _revealed_piece(
    check: Check,
    what: str,
    revealed: Mapping[PieceRef, torch.Tensor],
    ref: PieceRef,
    like: torch.Tensor,
    piece_elements: int,
) -> torch.Tensor:
    piece = revealed.get(ref)
    if piece is None:
        raise Refused(check, f"piece {ref.key} of the {what} was not revealed")
    length = piece_of(like, ref.index, piece_elements).numel()
    if piece.dtype != like.dtype or piece.shape != (length,):
        raise Refused(
            check,
            f"piece {ref.key} of the {what} is {piece.dtype} {tuple(piece.shape)}, expected {like.dtype} ({length},)",
        )
    if not bool(torch.isfinite(piece).all()):
        raise Refused(check, f"piece {ref.key} of the {what} holds NaN or Inf")
    return piece
