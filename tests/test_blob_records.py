"""The record inside every kind of tensor blob (`distrai.wire.blob_records`): each round-trips
through the blob, a blob of one kind is never read as another, and a record its model refuses is
refused by field, before any decoder reads it."""

from __future__ import annotations

import pytest
import torch
from support.raw_blobs import raw_blob

from distrai.train.tensorfile import RecordError, blob_format, decode_tensors, encode_tensors
from distrai.wire.blob_records import (
    CheckpointRecord,
    CodedStateRecord,
    CodedTensor,
    OuterStateRecord,
    TrainStateRecord,
    TrajectoryRecord,
)

RECORDS = [
    TrainStateRecord(step=40),
    OuterStateRecord(step=3),
    CheckpointRecord(window=7, outer_step=6),
    TrajectoryRecord(last_state=[("param", "w", 2, "ab" * 32)], residual_in=None, residual_out=[]),
    CodedStateRecord(
        step=40,
        tensors={"param/w": CodedTensor(dtype="bfloat16", shape=[2, 3], delta=True, planes=[5, 7])},
    ),
]
TENSORS = {"param/w": torch.zeros(12, dtype=torch.uint8)}


@pytest.mark.parametrize("record", RECORDS, ids=lambda r: type(r).__name__)
def test_every_record_round_trips_through_its_blob(record):
    blob = encode_tensors(TENSORS, record)
    assert blob_format(blob) == record.format == type(record).kind()
    tensors, back = decode_tensors(blob, type(record))
    assert back == record and torch.equal(tensors["param/w"], TENSORS["param/w"])


@pytest.mark.parametrize("record", RECORDS, ids=lambda r: type(r).__name__)
def test_a_blob_of_one_kind_is_not_read_as_another(record):
    blob = encode_tensors(TENSORS, record)
    for other in RECORDS:
        if type(other) is not type(record):
            with pytest.raises(ValueError, match=f"expected a '{other.format}' blob, found format"):
                decode_tensors(blob, type(other))


@pytest.mark.parametrize(
    ("record", "message"),
    [
        ({"step": "40"}, "record's step: Input should be a valid integer (got '40')"),
        ({"step": 40, "steps": 41}, "record's steps: Extra inputs are not permitted"),
        ({}, "record's step: Field required"),
        ({"step": 2.5}, "record's step: Input should be a valid integer"),
    ],
)
def test_a_record_its_model_refuses_is_refused_by_field(record, message):
    blob = raw_blob(TENSORS, {**record, "format": TrainStateRecord.kind()})
    with pytest.raises(RecordError) as refused:
        decode_tensors(blob, TrainStateRecord)
    assert str(refused.value).startswith("the distrai.train_state/1 record's ")
    assert message in str(refused.value)
