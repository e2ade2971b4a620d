"""The trajectory reveal: how a challenged miner shows that its published update is the codec's
encoding of its committed training, without uploading its whole last state.

The manifest commits, before the challenge is drawn, to the last boundary's state hash and to the
hashes of the codec residual carried into and out of the window; each hash is a root over piece
digests (`distrai.train.hashing`). The window's shared reveal seed then draws a sample of the
model's parameter pieces (`distrai.protocol.windows.trajectory_sample`), and the miner reveals:

- the piece digests of its last state (parameters, optimizer state and step) and of both
  residuals: 32 bytes a piece, which the validator checks against the committed roots;
- the drawn pieces of the last state's parameters and of the incoming residual.

For each drawn piece the validator encodes G_w − θ_H plus the decayed incoming residual, exactly as
`Codec.encode` does for the whole tensor (every codec works chunk by chunk, and a chunk divides a
piece), and requires the published update to decode to the same values there and the committed
outgoing residual to hold what the encoding leaves. A miner that publishes anything but the honest
encoding on a share s of its parameters passes with probability about (1 − s)^(fraction · pieces).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass

import torch

from distrai.protocol.update import RESIDUAL_SECTION
from distrai.protocol.windows import ChallengeInputs, trajectory_sample
from distrai.train.hashing import PIECE_ELEMENTS, PieceRef, piece_of, pieces
from distrai.train.tensorfile import decode_tensors, encode_tensors
from distrai.wire.blob_records import PieceDigest, TrajectoryRecord

PARAM_SECTION = "param"
"""The section of a train state's hash that holds its parameters (`distrai.train.train_state`)."""
_TENSOR_KEY = re.compile(r"(param|residual)/(.+)#(\d+)")

Digests = dict[PieceRef, str]


@dataclass(frozen=True)
class TrajectoryReveal:
    last_state: Digests
    residual_in: Digests | None
    residual_out: Digests | None
    params: dict[PieceRef, torch.Tensor]
    """drawn pieces of the last state's parameters (section `param`)"""
    residual: dict[PieceRef, torch.Tensor]
    """the same pieces of the incoming residual (section `tensors`), when there is one"""


def param_pieces(
    params: Mapping[str, torch.Tensor], piece_elements: int = PIECE_ELEMENTS
) -> dict[str, PieceRef]:
    """The parameter pieces a sample is drawn from, by key."""
    return {ref.key: ref for ref in pieces({PARAM_SECTION: params}, piece_elements)}


def residual_ref(ref: PieceRef) -> PieceRef:
    """The residual's piece that goes with a parameter piece."""
    return PieceRef(RESIDUAL_SECTION, ref.name, ref.index)


def build_trajectory(
    sample: list[PieceRef],
    last_params: Mapping[str, torch.Tensor],
    last_digests: Digests,
    residual_in: Mapping[str, torch.Tensor] | None,
    residual_in_digests: Digests | None,
    residual_out_digests: Digests | None,
    piece_elements: int = PIECE_ELEMENTS,
) -> TrajectoryReveal:
    """What a challenged miner reveals for the drawn `sample` of parameter pieces."""
    return TrajectoryReveal(
        last_state=dict(last_digests),
        residual_in=None if residual_in_digests is None else dict(residual_in_digests),
        residual_out=None if residual_out_digests is None else dict(residual_out_digests),
        params={ref: piece_of(last_params[ref.name], ref.index, piece_elements).clone() for ref in sample},
        residual={}
        if residual_in is None
        else {
            residual_ref(ref): piece_of(residual_in[ref.name], ref.index, piece_elements).clone()
            for ref in sample
        },
    )


def encode_trajectory(reveal: TrajectoryReveal) -> bytes:
    tensors = {f"param/{ref.name}#{ref.index}": t for ref, t in reveal.params.items()}
    tensors.update({f"residual/{ref.name}#{ref.index}": t for ref, t in reveal.residual.items()})
    record = TrajectoryRecord(
        last_state=_digest_list(reveal.last_state),
        residual_in=None if reveal.residual_in is None else _digest_list(reveal.residual_in),
        residual_out=None if reveal.residual_out is None else _digest_list(reveal.residual_out),
    )
    return encode_tensors(tensors, record)


def decode_trajectory(data: bytes, max_bytes: int) -> TrajectoryReveal:
    """Parse a trajectory reveal; ValueError (or WireError) names what is malformed."""
    tensors, record = decode_tensors(data, TrajectoryRecord, max_bytes=max_bytes)
    params: dict[PieceRef, torch.Tensor] = {}
    residual: dict[PieceRef, torch.Tensor] = {}
    for key, tensor in tensors.items():
        match = _TENSOR_KEY.fullmatch(key)
        if match is None:
            raise ValueError(f"trajectory reveal holds unexpected tensor {key!r}")
        kind, name, index = match.group(1), match.group(2), int(match.group(3))
        if kind == "param":
            params[PieceRef(PARAM_SECTION, name, index)] = tensor
        else:
            residual[PieceRef(RESIDUAL_SECTION, name, index)] = tensor
    return TrajectoryReveal(
        last_state=_digests("last_state", record.last_state),
        residual_in=None if record.residual_in is None else _digests("residual_in", record.residual_in),
        residual_out=None if record.residual_out is None else _digests("residual_out", record.residual_out),
        params=params,
        residual=residual,
    )


def _digest_list(digests: Digests) -> list[PieceDigest]:
    return [(ref.section, ref.name, ref.index, digest) for ref, digest in sorted(digests.items())]


def _digests(field: str, entries: list[PieceDigest]) -> Digests:
    """The record's digests by piece; a piece listed twice is refused."""
    digests: Digests = {}
    for section, name, index, digest in entries:
        ref = PieceRef(section, name, index)
        if ref in digests:
            raise ValueError(f"trajectory reveal's {field} lists piece {ref.key} twice")
        digests[ref] = digest
    return digests


def drawn_pieces(
    inputs: ChallengeInputs,
    miner_hotkey: str,
    params: Mapping[str, torch.Tensor],
    fraction: float,
    piece_elements: int = PIECE_ELEMENTS,
) -> list[PieceRef]:
    """The parameter pieces a challenged miner reveals in the window of `inputs`."""
    by_key = param_pieces(params, piece_elements)
    return [by_key[key] for key in trajectory_sample(inputs, miner_hotkey, by_key, fraction)]
