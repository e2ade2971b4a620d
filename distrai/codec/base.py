"""The codec interface: fp32 pseudo-gradients in, a safetensors-ready payload out, and back, strictly.

Wire format. A payload is a flat `dict[str, Tensor]` of 1-D CPU tensors (uint8, int8 or float32, so it
travels as safetensors) keyed `"<parameter>:<field>"`; which fields exist, their dtypes and their exact lengths follow
from the codec, its options and the parameter's number of elements (`Codec.layout`). The metadata is a
`dict[str, str]`: `codec` (the name), `codec_version` and one entry per option. A decoder is built from
the run config and accepts only payloads whose metadata equals its own.

Entries. `Codec.entries` makes every check `decode` makes and gives each parameter's decoded values
as its payload holds them (`Entries`): the kept indices and values of a sparse codec, the quantised
values and their scales range by range, the plain values. A validator sketches an update from them
(`distrai.train.sketch.sketch_entries`) without building its dense tensors; `dense()` decodes one.

Error feedback (lossy codecs, after SparseLoCo). The miner carries a residual `e` across windows:
`a = decay·e + delta` is encoded (`e = 0` in the first window), and the new residual is
`a − decode(encode(a))`. With `decay = 1` the
decoded updates of windows 1..T sum to the deltas' sum minus the last residual, so nothing is lost
for good. The `none` codec keeps no residual.

Accounting. Traffic is counted as bytes uploaded per worker per parameter. A DiLoCo worker uploads its
encoded pseudo-gradient once per window of H inner steps: `Codec.expected_bytes_per_param`. A DDP
worker's ring all-reduce (reduce-scatter, then all-gather) sends `2·(N−1)/N` fp32 values per parameter
every step, about 8 bytes per parameter per step for many workers: `ring_allreduce_bytes_per_param`.

Refusal reasons (`CodecError.reason`):
  bad_option          a codec option is invalid, or the payload's options differ from the decoder's
  wrong_codec         the metadata names another codec
  bad_version         the metadata names a format version this decoder does not read
  unknown_field       a payload tensor or metadata entry that the format does not have
  missing_field       a payload tensor or metadata entry that the format requires is absent
  bad_dtype           not a dense tensor of the dtype the format fixes for that field
  bad_size            not 1-D, or not of the length the shapes and options imply
  bad_count           a bit-packed stream does not hold the number of entries the shapes and options imply
  bad_padding         the unused bits at the end of a bit-packed stream are not zero
  index_out_of_range  a top-k index is not inside its chunk
  bad_index_order     top-k indices within a chunk are not strictly increasing (so no duplicates)
  value_out_of_range  an entry outside the range the format allows (int8 −128, a bit-packed value too wide)
  non_finite          NaN or infinity in a float field, or in a delta given to encode
  bad_scale           a scale or level that is negative, too large, or out of order
"""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from collections.abc import Mapping
from dataclasses import Field, dataclass, fields
from typing import TYPE_CHECKING, ClassVar, NamedTuple

if TYPE_CHECKING:
    import torch

FLOAT32_MAX = float.fromhex("0x1.fffffep+127")
"""`torch.finfo(torch.float32).max`, written out: the codecs import torch when they first encode or
decode, not when a run config checks their options."""
KEY_SEPARATOR = ":"

Tensors = dict[str, "torch.Tensor"]
Shapes = Mapping[str, tuple[int, ...]]


class CodecError(ValueError):
    """A payload, input or option the codec refuses; `reason` is one of the names in the module docs."""

    def __init__(self, reason: str, detail: str):
        self.reason = reason
        self.detail = detail
        super().__init__(f"{reason}: {detail}")


@dataclass(frozen=True)
class FieldSpec:
    """One payload tensor of one parameter: its dtype and exact length.

    `bits` is set for bit-packed streams (entries of that many bits); `scale_max` for float fields whose
    entries must lie in [0, scale_max].
    """

    dtype: torch.dtype
    length: int
    bits: int | None = None
    scale_max: float | None = None

    @property
    def nbytes(self) -> int:
        import torch

        return self.length * torch.empty((), dtype=self.dtype).element_size()


class Encoded(NamedTuple):
    """What `Codec.encode` returns: the payload tensors, their metadata, and the residual to carry."""

    payload: Tensors
    metadata: dict[str, str]
    residual: Tensors | None


class Entries(ABC):
    """One parameter's decoded values, read from its checked payload range by range.

    `between(start, stop)` gives the flat indices (int64, ascending) and the values, bit for bit what
    decoding gives, of the entries in [start, stop) that may be nonzero: every entry it leaves out
    decodes to zero. `dense()` is the whole decoded parameter, flat."""

    numel: int

    @abstractmethod
    def between(self, start: int, stop: int) -> tuple[torch.Tensor, torch.Tensor]:
        """(indices, values) of the entries in [start, stop) that may be nonzero."""

    @abstractmethod
    def dense(self) -> torch.Tensor:
        """The decoded parameter as a 1-D tensor of `numel` entries."""


def payload_key(name: str, field: str) -> str:
    return f"{name}{KEY_SEPARATOR}{field}"


def wire_bytes(payload: Mapping[str, torch.Tensor]) -> int:
    """Exact bytes of the payload's tensor data (a safetensors file adds only its small JSON header)."""
    return sum(t.numel() * t.element_size() for t in payload.values())


def num_params(shapes: Shapes) -> int:
    return sum(math.prod(shape) for shape in shapes.values())


def bytes_per_param(payload: Mapping[str, torch.Tensor], shapes: Shapes) -> float:
    """Bytes on the wire per model parameter for one encoded window."""
    return wire_bytes(payload) / num_params(shapes)


def ring_allreduce_bytes_per_param(steps: int, workers: int | None = None) -> float:
    """Bytes each DDP worker sends per parameter over `steps` fp32 ring all-reduces.

    `workers=None` gives the many-worker limit, 8 bytes per parameter per step.
    """
    share = 2.0 if workers is None else 2.0 * (workers - 1) / workers
    return share * 4 * steps


def reduction_vs_ddp(codec_bytes_per_param: float, steps: int, workers: int | None = None) -> float:
    """How many times less a worker sends per window than DDP does over the window's `steps`."""
    return ring_allreduce_bytes_per_param(steps, workers) / codec_bytes_per_param


def require_int(option: str, value: object, low: int, high: int) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or not low <= value <= high:
        raise CodecError(
            "bad_option", f"option {option} must be an integer in [{low}, {high}], got {value!r}"
        )
    return value


def require_fraction(option: str, value: object) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not 0.0 <= value <= 1.0:
        raise CodecError("bad_option", f"option {option} must be a number in [0, 1], got {value!r}")
    return float(value)


def refuse(reason: str, key: str, detail: str) -> CodecError:
    """A refusal that names the payload tensor (`parameter:field`) it is about."""
    return CodecError(reason, f"{key}: {detail}")


class Codec(ABC):
    """A pseudo-gradient codec. Subclasses are frozen dataclasses whose fields are the options."""

    name: ClassVar[str]
    version: ClassVar[str] = "1"
    # Declared (never set here) so that `dataclasses.fields` accepts a Codec: every subclass is a dataclass.
    __dataclass_fields__: ClassVar[dict[str, Field[object]]]

    @abstractmethod
    def layout(self, numel: int) -> dict[str, FieldSpec]:
        """The payload fields of a parameter with `numel` elements, in wire order."""

    @abstractmethod
    def encode_flat(self, flat: torch.Tensor) -> Tensors:
        """Encode one finite fp32 1-D tensor into its fields."""

    @abstractmethod
    def entries_flat(self, name: str, fields: Tensors, numel: int) -> Entries:
        """Check the values of one parameter's fields (dtypes and lengths already checked) and give its
        entries, without decoding them."""

    def decode_flat(self, name: str, fields: Tensors, numel: int) -> torch.Tensor:
        """Decode one parameter's fields (dtypes and lengths already checked) into a 1-D fp32 tensor."""
        return self.entries_flat(name, fields, numel).dense()

    def residual_decay(self) -> float | None:
        """The error-feedback decay, or None for a codec that keeps no residual."""
        return None

    def options(self) -> dict[str, str]:
        return {f.name: _option_text(getattr(self, f.name)) for f in fields(self)}

    def metadata(self) -> dict[str, str]:
        return {"codec": self.name, "codec_version": self.version, **self.options()}

    def expected_wire_bytes(self, shapes: Shapes) -> int:
        """Exact payload bytes this codec produces for a model of these parameter shapes."""
        return sum(
            spec.nbytes for shape in shapes.values() for spec in self.layout(math.prod(shape)).values()
        )

    def expected_bytes_per_param(self, shapes: Shapes) -> float:
        return self.expected_wire_bytes(shapes) / num_params(shapes)

    def encode(
        self, delta: Mapping[str, torch.Tensor], residual: Mapping[str, torch.Tensor] | None = None
    ) -> Encoded:
        """Encode `delta` plus the decayed `residual` (None: zero; lossy codecs only); return the new residual."""
        import torch

        _check_inputs("delta", delta)
        decay = self.residual_decay()
        if residual is not None:
            if decay is None:
                raise CodecError("bad_option", f"codec {self.name} keeps no residual, but one was given")
            _check_inputs("residual", residual)
            _check_same_tensors(delta, residual)
        payload: Tensors = {}
        new_residual: Tensors = {}
        for name, tensor in delta.items():
            accumulated = tensor if residual is None else _decayed(residual[name], decay) + tensor
            flat = accumulated.detach().reshape(-1).contiguous()
            if not bool(torch.isfinite(flat).all()):
                raise CodecError("non_finite", f"delta plus decayed residual for {name} is not finite")
            encoded = self.encode_flat(flat)
            for field, value in encoded.items():
                payload[payload_key(name, field)] = value
            if decay is not None:
                decoded = self.decode_flat(name, encoded, flat.numel())
                new_residual[name] = (flat - decoded).reshape(tensor.shape)
        return Encoded(payload, self.metadata(), None if decay is None else new_residual)

    def decode(
        self, payload: Mapping[str, torch.Tensor], metadata: Mapping[str, str], shapes: Shapes
    ) -> Tensors:
        """Validate every field of `payload` against `metadata` and `shapes`, then decode to fp32 tensors."""
        return {
            name: entries.dense().reshape(shapes[name])
            for name, entries in self.entries(payload, metadata, shapes).items()
        }

    def entries(
        self, payload: Mapping[str, torch.Tensor], metadata: Mapping[str, str], shapes: Shapes
    ) -> dict[str, Entries]:
        """Validate every field of `payload` against `metadata` and `shapes` as `decode` does (the same
        refusals, in the same order), and give each parameter's entries instead of its dense tensor."""
        self._check_metadata(metadata)
        if not isinstance(payload, Mapping):
            raise CodecError(
                "bad_dtype", f"payload must be a mapping of names to tensors, got {type(payload).__name__}"
            )
        layouts = {name: self.layout(math.prod(shape)) for name, shape in shapes.items()}
        expected = {payload_key(name, field) for name, layout in layouts.items() for field in layout}
        _check_key_sets("payload tensor", expected, set(payload))
        entries: dict[str, Entries] = {}
        for name, layout in layouts.items():
            parts = {}
            for field, spec in layout.items():
                key = payload_key(name, field)
                parts[field] = _checked_field(key, payload[key], spec)
            entries[name] = self.entries_flat(name, parts, math.prod(shapes[name]))
        return entries

    def _check_metadata(self, metadata: Mapping[str, str]) -> None:
        if not isinstance(metadata, Mapping) or not all(
            isinstance(key, str) and isinstance(value, str) for key, value in metadata.items()
        ):
            raise CodecError("bad_option", "metadata must be a mapping of strings to strings")
        if "codec" not in metadata:
            raise CodecError("missing_field", "metadata has no codec entry")
        if metadata["codec"] != self.name:
            raise CodecError(
                "wrong_codec", f"metadata names codec {metadata['codec']!r}, expected {self.name!r}"
            )
        if "codec_version" not in metadata:
            raise CodecError("missing_field", "metadata has no codec_version entry")
        if metadata["codec_version"] != self.version:
            raise CodecError(
                "bad_version",
                f"codec_version {metadata['codec_version']!r} is not {self.version!r} ({self.name})",
            )
        expected = self.metadata()
        _check_key_sets("metadata entry", set(expected), set(metadata))
        for key, value in expected.items():
            if metadata[key] != value:
                raise CodecError(
                    "bad_option", f"metadata option {key}={metadata[key]!r}, but this run uses {value!r}"
                )


def _option_text(value: object) -> str:
    return repr(value) if isinstance(value, float) else str(value)


def _decayed(residual: torch.Tensor, decay: float | None) -> torch.Tensor:
    assert decay is not None, "encode refuses a residual for a codec that keeps none"
    return residual if decay == 1.0 else residual * decay


def _check_inputs(what: str, tensors: Mapping[str, torch.Tensor]) -> None:
    import torch

    if not isinstance(tensors, Mapping):
        raise CodecError("bad_dtype", f"{what} must be a mapping of names to tensors")
    for name, tensor in tensors.items():
        if (
            not isinstance(tensor, torch.Tensor)
            or tensor.dtype != torch.float32
            or tensor.layout != torch.strided
        ):
            kind = tensor.dtype if isinstance(tensor, torch.Tensor) else type(tensor).__name__
            raise CodecError("bad_dtype", f"{what}[{name}] must be a dense float32 tensor, got {kind}")
        if tensor.device.type != "cpu":
            raise CodecError("bad_dtype", f"{what}[{name}] must be on the CPU, got {tensor.device}")
        if not bool(torch.isfinite(tensor).all()):
            raise CodecError("non_finite", f"{what}[{name}] holds NaN or infinity")


def _check_same_tensors(delta: Mapping[str, torch.Tensor], residual: Mapping[str, torch.Tensor]) -> None:
    _check_key_sets("residual tensor", set(delta), set(residual))
    for name, tensor in delta.items():
        if residual[name].shape != tensor.shape:
            raise CodecError(
                "bad_size",
                f"residual[{name}] has shape {tuple(residual[name].shape)}, delta {tuple(tensor.shape)}",
            )


def _check_key_sets(what: str, expected: set, given: set) -> None:
    unknown = given - expected
    if unknown:
        raise CodecError("unknown_field", f"unexpected {what} {sorted(map(str, unknown))[0]!r}")
    missing = expected - given
    if missing:
        raise CodecError("missing_field", f"{what} {sorted(missing)[0]!r} is missing")


def _checked_field(key: str, value: object, spec: FieldSpec) -> torch.Tensor:
    import torch

    if not isinstance(value, torch.Tensor) or value.layout != torch.strided or value.device.type != "cpu":
        raise refuse("bad_dtype", key, f"must be a dense CPU tensor, got {type(value).__name__}")
    if value.dtype != spec.dtype:
        raise refuse("bad_dtype", key, f"has dtype {value.dtype}, expected {spec.dtype}")
    if value.dim() != 1:
        raise refuse("bad_size", key, f"must be 1-D, got shape {tuple(value.shape)}")
    if value.numel() != spec.length:
        if spec.bits is not None:
            raise refuse(
                "bad_count",
                key,
                f"holds {value.numel()} bytes; the expected entries of {spec.bits} bits need {spec.length}",
            )
        raise refuse("bad_size", key, f"has {value.numel()} entries, expected {spec.length}")
    if value.dtype.is_floating_point:
        if not bool(torch.isfinite(value).all()):
            raise refuse("non_finite", key, "holds NaN or infinity")
        if spec.scale_max is not None and bool(((value < 0) | (value > spec.scale_max)).any()):
            raise refuse("bad_scale", key, f"holds a scale outside [0, {spec.scale_max:g}]")
    return value
