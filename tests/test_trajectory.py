"""The trajectory reveal's wire form: what a miner builds round-trips, and a malformed one is
refused with an error that names what is wrong."""

from __future__ import annotations

import pytest
import torch
from support.raw_blobs import raw_blob

from distrai.protocol.trajectory import (
    build_trajectory,
    decode_trajectory,
    encode_trajectory,
    param_pieces,
    residual_ref,
)
from distrai.train.hashing import piece_digests
from distrai.wire import WireError

PIECE = 4
LIMIT = 1 << 20


def reveal():
    params = {"a": torch.arange(10, dtype=torch.float32), "b": torch.ones(3)}
    residual = {n: 0.5 * t for n, t in params.items()}
    sample = [param_pieces(params, PIECE)["param/a#1"], param_pieces(params, PIECE)["param/b#0"]]
    return sample, build_trajectory(
        sample,
        params,
        piece_digests({"param": params, "step": {"step": torch.tensor([7])}}, PIECE),
        residual,
        piece_digests({"tensors": residual}, PIECE),
        None,
        PIECE,
    )


def test_a_trajectory_reveal_round_trips_with_its_drawn_pieces_only():
    sample, built = reveal()
    back = decode_trajectory(encode_trajectory(built), LIMIT)
    assert back.last_state == built.last_state and back.residual_in == built.residual_in
    assert back.residual_out is None
    assert sorted(back.params) == sorted(sample)
    assert torch.equal(back.params[sample[0]], torch.tensor([4.0, 5.0, 6.0, 7.0]))
    assert torch.equal(back.residual[residual_ref(sample[0])], torch.tensor([2.0, 2.5, 3.0, 3.5]))


@pytest.mark.parametrize(
    ("record", "message"),
    [
        (
            {"last_state": "x", "residual_in": None, "residual_out": None},
            "record's last_state: Input should be a valid array",
        ),
        (
            {"last_state": [["param", "a", 0, "zz"]], "residual_in": None, "residual_out": None},
            r"record's last_state.0.3: String should match pattern",
        ),
        (
            {"last_state": [["param", "a", -1, "ab" * 32]], "residual_in": None, "residual_out": None},
            "record's last_state.0.2: Input should be greater than or equal to 0",
        ),
        (
            {"last_state": [["param", "a", 0, "ab" * 32]] * 2, "residual_in": None, "residual_out": None},
            "lists piece param/a#0 twice",
        ),
        (
            {"last_state": [], "residual_in": [[1, 2]], "residual_out": None},
            "record's residual_in.0.0: Input should be a valid string",
        ),
    ],
)
def test_a_malformed_record_is_refused_by_name(record, message):
    with pytest.raises(ValueError, match=message):
        decode_trajectory(raw_blob({}, {**record, "format": "distrai.protocol.trajectory/1"}), LIMIT)


def test_an_unexpected_tensor_is_refused():
    data = raw_blob(
        {"state/a#0": torch.zeros(2)},
        {
            "last_state": [],
            "residual_in": None,
            "residual_out": None,
            "format": "distrai.protocol.trajectory/1",
        },
    )
    with pytest.raises(ValueError, match="unexpected tensor 'state/a#0'"):
        decode_trajectory(data, LIMIT)


def test_a_reveal_over_the_limit_is_refused():
    _, built = reveal()
    data = encode_trajectory(built)
    with pytest.raises(WireError, match="the limit is"):
        decode_trajectory(data, len(data) - 1)
