"""Tensor blobs with any record at all, as a miner or a broken store could write them: what the
decoders' refusals are tested on (the product writes only records its models built)."""

from __future__ import annotations

import json

import torch

from distrai.train.tensorfile import META_KEY
from distrai.wire import encode_tensors


def raw_blob(tensors: dict[str, torch.Tensor], record: dict) -> bytes:
    """Safetensors bytes of `tensors` with `record`, whatever it holds, as the blob's record."""
    return encode_tensors(dict(tensors), metadata={META_KEY: json.dumps(record)})
