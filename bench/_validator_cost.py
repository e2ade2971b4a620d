"""A validator's total work per window at a subnet's size, from measured parts.

- GPU compute, as a share of one miner's window of h training steps on the same GPU: the replays it
  shares and its share of the usefulness measurements (`bench/_scale_accounting.py`).
- CPU time, measured here on one core: decoding every miner's update with the run's codec, the
  count sketch of every update the duplicate check takes, and the pairwise cosines of the sketches.
  A full run times a whole update of the config's model; a quick one times the bench model's and
  scales by the parameter count (both costs are linear in it).
- Link time: every update and the reveals it replays, at the link's rate.

Each part is given as seconds of the window on the resource it uses and as a share of it; the total
adds the shares, as if the validator did one after the other.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass

import torch
from _scale_accounting import ScaleAccounting

from distrai.codec import get_codec, wire_bytes
from distrai.protocol.run import RunConfig
from distrai.train.determinism import pinned_threads
from distrai.wire.tensors import encode_tensors
from validators.checks import PASS, MinerVerdict
from validators.duplicates import SKETCH_SIZE, flag_duplicates, update_sketch

GPU_KIND, CPU_KIND, LINK_KIND = "GPU compute", "CPU time (one core)", "link time"


def model_shapes(config: RunConfig) -> dict[str, tuple[int, ...]]:
    """The parameter shapes of the run's model, built on the `meta` device (as
    `linkcheck.parameter_count` counts them)."""
    from transformers import LlamaForCausalLM

    from distrai.train.model import ModelSpec, load_tokenizer, preset_config

    preset = config.model.preset
    if preset is None:
        raise ValueError("the cost of an update is measured for a preset model only")
    with torch.device("meta"):
        kind = "byte" if config.tokenizer == "data" else config.tokenizer
        shape = preset_config(preset, load_tokenizer(ModelSpec(preset=preset), kind))
        if config.tokenizer == "data":
            shape.vocab_size = config.data.vocab_size
        model = LlamaForCausalLM(shape)
    return {name: tuple(p.shape) for name, p in model.named_parameters()}


@dataclass(frozen=True)
class UpdateCosts:
    """One update's costs to a validator, measured on this CPU with one thread."""

    measured_params: int
    """the parameters of the update that was timed"""
    params: int
    """the parameters they are given for (the config's model)"""
    decode_seconds: float
    sketch_seconds: float
    payload_bytes: int
    """the codec's payload (`wire_bytes`) of the timed update"""
    file_bytes: int
    """the blob a miner uploads: the payload as a safetensors file"""

    @property
    def scale(self) -> float:
        return self.params / self.measured_params


def measure_update(config: RunConfig, shapes: Mapping[str, tuple[int, ...]], params: int) -> UpdateCosts:
    """Encode a random update of `shapes` with the run's codec, tensor by tensor (the encoder's
    scratch stays one tensor's), then time decoding it whole, as a validator does, and its sketch."""
    codec = get_codec(config.codec.name, **dict(config.codec.options))
    generator = torch.Generator().manual_seed(0)
    payload: dict[str, torch.Tensor] = {}
    metadata: dict[str, str] = {}
    for name, shape in sorted(shapes.items()):
        delta = torch.randn(shape, generator=generator) * 1e-3
        encoded = codec.encode({name: delta}, None)
        payload.update(encoded.payload)
        metadata = encoded.metadata
        del delta, encoded
    with pinned_threads(1):
        started = time.perf_counter()
        update = codec.decode(payload, metadata, dict(shapes))
        decoded = time.perf_counter()
        update_sketch(update, "distrai.bench.incentives")
        sketched = time.perf_counter()
    measured = sum(t.numel() for t in update.values())
    return UpdateCosts(
        measured_params=measured,
        params=params,
        decode_seconds=(decoded - started) * params / measured,
        sketch_seconds=(sketched - decoded) * params / measured,
        payload_bytes=round(wire_bytes(payload) * params / measured),
        file_bytes=round(len(encode_tensors(payload, metadata)) * params / measured),
    )


def time_cosines(timed: int, miners: int, threshold: float) -> float:
    """Seconds of the duplicate check's pairwise work for `miners` updates (`flag_duplicates`),
    timed on `timed` updates and scaled by the number of pairs; the updates are small enough that
    sketching them costs nothing beside it."""
    generator = torch.Generator().manual_seed(1)
    verdicts = []
    for uid in range(timed):
        verdict = MinerVerdict(f"miner{uid}", uid, {"update": PASS})
        verdict.update = {"w": torch.randn(SKETCH_SIZE, generator=generator)}
        verdicts.append(verdict)
    with pinned_threads(1):
        started = time.perf_counter()
        flag_duplicates(verdicts, {v.hotkey: 1 for v in verdicts}, threshold, "distrai.bench.incentives")
        seconds = time.perf_counter() - started
    return seconds * (miners * (miners - 1)) / (timed * (timed - 1))


@dataclass(frozen=True)
class CostPart:
    name: str
    kind: str
    amount: str
    """what is done, with its arithmetic"""
    seconds: float
    """seconds of the window on the resource the part uses"""
    share: float
    """of one miner's compute (GPU) or of the window (CPU, link)"""


def cost_parts(
    a: ScaleAccounting,
    config: RunConfig,
    costs: UpdateCosts,
    cosine_seconds: float,
    cosine_timed: int,
    step_seconds: float,
    window_seconds: float,
    link_bits: float,
) -> list[CostPart]:
    """The parts of a validator's window at the accounting's size."""
    miner_seconds = a.steps_per_window * step_seconds
    scoring = config.scoring
    seqs, seq_len = scoring.usefulness_sequences, config.data.seq_len
    decode = a.miners * costs.decode_seconds
    sketch = a.miners * costs.sketch_seconds
    link = a.download_bytes * 8 / link_bits
    measured = (
        "" if costs.scale == 1 else f", timed at {costs.measured_params:,} and scaled ×{costs.scale:,.1f}"
    )
    return [
        CostPart(
            "replays",
            GPU_KIND,
            f"⌈{a.challenged} × {config.verification.replicas} / {a.validators}⌉ = {a.replays_per_validator} "
            f"miner × {config.verification.challenge_segments} segment × {config.train.segment_steps} steps = "
            f"{a.replay_steps} of a miner's {a.steps_per_window:,} steps",
            a.replay_share * miner_seconds,
            a.replay_share,
        ),
        CostPart(
            "usefulness measurements",
            GPU_KIND,
            f"⌈{a.miners} × {scoring.score_replicas} / {a.validators}⌉ + {scoring.score_rechecks} = "
            f"{a.measured_per_validator} updates × 3 passes × {seqs} × {seq_len:,} tokens, + 1 pass over the "
            f"reserve, at ⅓ of a training step's FLOPs per token = {a.scoring_share:.2%} of a miner's "
            f"{a.steps_per_window:,} × {config.train.batch_size * seq_len:,} tokens",
            a.scoring_share * miner_seconds,
            a.scoring_share,
        ),
        CostPart(
            "decoding every update",
            CPU_KIND,
            f"{a.miners} × {costs.decode_seconds:.2f} s ({config.codec.name} decode of a {costs.params:,}-parameter "
            f"update{measured})",
            decode,
            decode / window_seconds,
        ),
        CostPart(
            "duplicate sketches",
            CPU_KIND,
            f"{a.miners} × {costs.sketch_seconds:.2f} s (`sketch` of {SKETCH_SIZE:,} numbers of a decoded update"
            f"{measured})",
            sketch,
            sketch / window_seconds,
        ),
        CostPart(
            "duplicate cosines",
            CPU_KIND,
            f"every pair of {a.miners} sketches (`flag_duplicates`), timed"
            + ("" if cosine_timed == a.miners else f" on {cosine_timed} and scaled by the pairs"),
            cosine_seconds,
            cosine_seconds / window_seconds,
        ),
        CostPart(
            "downloads",
            LINK_KIND,
            f"{a.miners} updates × {a.update_bytes / 1e6:.2f} MB + {a.replays_per_validator} reveal × "
            f"{a.reveal_bytes / 1e9:.2f} GB = {a.download_bytes / 1e9:.2f} GB at {link_bits / 1e6:.0f} Mbit/s",
            link,
            link / window_seconds,
        ),
    ]


@dataclass(frozen=True)
class ValidatorCost:
    """A validator's window at a subnet's size: the config, its arithmetic and the measured parts."""

    config: RunConfig
    accounting: ScaleAccounting
    update: UpdateCosts
    parts: list[CostPart]
    link_bits: float
    step_seconds: float
    """one training step of a miner on the GPU the accounting assumes"""
