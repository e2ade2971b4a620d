"""A validator's work per window at a subnet's size, from measured parts, split by the resource each
uses; every resource has its own target (`RESOURCES`), judged on the validator `min_compute.yml`
specifies (`validator_spec`).

- GPU compute, a share of one miner's GPU-seconds per window of h training steps on the same GPU: the
  replays it shares and its share of the usefulness measurements (`bench/_scale_accounting.py`).
- CPU time, core-seconds timed here on one core, a share of the validator's cores times the window:
  checking every miner's update blob without decoding it (`check_update`); decoding only the updates
  it uses, its measurements (its share and its re-checks), the aggregate's top n and the miner it
  replays, counted as if none were the same update; the duplicate check's count sketch of every update
  from its payload (`CheckedUpdate.sketch`), which `flag_duplicates` spreads over the cores in threads
  (timed here with one thread and with one a core, to show how it scales); and the pairwise cosines.
  A full run times a whole update of the config's model; a quick one times the bench model's and
  scales by the parameter count (every cost is linear in it).
- Link time: every update and the reveals it replays, at the link's rate, a share of the window.
"""

from __future__ import annotations

import math
import os
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path

import torch
import yaml
from _scale_accounting import ScaleAccounting

from distrai.codec import Codec, get_codec, wire_bytes
from distrai.protocol.run import RunConfig
from distrai.protocol.update import check_update, encode_update
from distrai.train.determinism import pinned_threads
from distrai.train.sketch import sketch
from validators.checks import PASS, MinerVerdict
from validators.duplicates import SKETCH_SIZE, flag_duplicates

GPU_KIND, CPU_KIND, LINK_KIND = "GPU compute", "CPU time (one core)", "link time"
MIN_COMPUTE = Path(__file__).resolve().parent.parent / "min_compute.yml"
BLOCK_SECONDS = 12.0
"""Bittensor's block, which the GPU config's windows assume"""
SEED = "distrai.bench.incentives"
REPEATS = 3
"""each timing is the fastest of this many runs"""


@dataclass(frozen=True)
class ValidatorSpec:
    """The validator `min_compute.yml` specifies: what its CPU and link shares are of."""

    cores: int
    download_bits: float
    """bits per second"""


def validator_spec(path: Path = MIN_COMPUTE) -> ValidatorSpec:
    validator = yaml.safe_load(path.read_text())["compute_spec"]["validator"]
    return ValidatorSpec(
        cores=int(validator["cpu"]["min_cores"]),
        download_bits=float(validator["network"]["min_download_speed"]) * 1e6,
    )


@dataclass(frozen=True)
class Resource:
    kind: str
    name: str
    target: float


RESOURCES = (
    Resource(GPU_KIND, "GPU", 0.05),
    Resource(CPU_KIND, "CPU", 0.05),
    Resource(LINK_KIND, "link", 0.25),
)


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
            assert config.data.vocab_size is not None, "the run config sets it with tokenizer 'data'"
            shape.vocab_size = config.data.vocab_size
        model = LlamaForCausalLM(shape)
    return {name: tuple(p.shape) for name, p in model.named_parameters()}


@dataclass(frozen=True)
class ThreadedSketches:
    """`flag_duplicates` sketching `updates` checked updates with one thread and with `threads`."""

    updates: int
    threads: int
    one_thread_seconds: float
    threaded_seconds: float
    threaded_cpu_seconds: float
    """the process's CPU time over the threaded run: the work, whatever the threads waited"""

    @property
    def speedup(self) -> float:
        return self.one_thread_seconds / self.threaded_seconds


@dataclass(frozen=True)
class UpdateCosts:
    """One update's costs to a validator, each the fastest of `REPEATS` runs on this CPU with one
    thread, and how its sketches spread over threads."""

    measured_params: int
    """the parameters of the update that was timed"""
    params: int
    """the parameters they are given for (the config's model)"""
    check_seconds: float
    """`check_update`: every refusal decoding makes, no dense tensors"""
    decode_seconds: float
    sketch_seconds: float
    """the duplicate check's sketch from the payload (`CheckedUpdate.sketch`)"""
    dense_sketch_seconds: float
    """the same sketch of the decoded update (`sketch`), as the duplicate check took it before"""
    payload_bytes: int
    """the codec's payload (`wire_bytes`) of the timed update"""
    file_bytes: int
    """the blob a miner uploads: the payload as a safetensors file"""
    threaded: ThreadedSketches

    @property
    def scale(self) -> float:
        return self.params / self.measured_params

    @property
    def sketch_saving(self) -> float:
        """How many times less the payload's sketch costs than decoding the update and sketching it."""
        return (self.decode_seconds + self.dense_sketch_seconds) / self.sketch_seconds


def measure_update(
    config: RunConfig, shapes: Mapping[str, tuple[int, ...]], params: int, threads: int | None = None
) -> UpdateCosts:
    """Encode a random update of `shapes` with the run's codec, tensor by tensor (the encoder's
    scratch stays one tensor's), then time checking it, sketching it from its payload, decoding it
    whole and sketching the decoded update, as a validator would; and `flag_duplicates` on 2 ×
    `threads` copies of it with one thread and with `threads` (default: this machine's cores)."""
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
    blob = encode_update(payload, metadata, "miner", 1)
    checked = check_update(blob, codec, shapes, len(blob), "miner", 1)
    update = checked.decode()
    with pinned_threads(1):
        check = fastest(lambda: check_update(blob, codec, shapes, len(blob), "miner", 1))
        payload_sketch = fastest(lambda: checked.sketch(SEED, SKETCH_SIZE))
        dense_sketch = fastest(partial(sketch, update, SEED, SKETCH_SIZE))
        del update
        decode = fastest(checked.decode)
    measured = sum(math.prod(shape) for shape in shapes.values())
    scale = params / measured
    return UpdateCosts(
        measured_params=measured,
        params=params,
        check_seconds=check * scale,
        decode_seconds=decode * scale,
        sketch_seconds=payload_sketch * scale,
        dense_sketch_seconds=dense_sketch * scale,
        payload_bytes=round(wire_bytes(payload) * scale),
        file_bytes=round(len(blob) * scale),
        threaded=time_threaded_sketches(codec, payload, metadata, shapes, threads or os.cpu_count() or 1),
    )


def fastest(work: Callable[[], object]) -> float:
    """Seconds of the fastest of `REPEATS` runs of `work` (the machine may be shared)."""
    best = math.inf
    for _ in range(REPEATS):
        started = time.perf_counter()
        work()
        best = min(best, time.perf_counter() - started)
    return best


def time_threaded_sketches(
    codec: Codec,
    payload: Mapping[str, torch.Tensor],
    metadata: Mapping[str, str],
    shapes: Mapping[str, tuple[int, ...]],
    threads: int,
) -> ThreadedSketches:
    """`flag_duplicates` over 2 × `threads` checked blobs of the payload (one per hotkey), the fastest
    of `REPEATS` runs with one thread and with `threads`."""
    batch = []
    for uid in range(2 * threads):
        hotkey = f"miner{uid}"
        blob = encode_update(payload, metadata, hotkey, 1)
        batch.append(MinerVerdict(hotkey, uid, {"update": PASS}))
        batch[-1].checked = check_update(blob, codec, shapes, len(blob), hotkey, 1)

    def run(workers: int) -> tuple[float, float]:
        for verdict in batch:
            verdict.verdicts, verdict.numbers = {"update": PASS}, {}
        wall, cpu = time.perf_counter(), time.process_time()
        flag_duplicates(batch, {v.hotkey: 1 for v in batch}, 0.95, SEED, workers=workers)
        return time.perf_counter() - wall, time.process_time() - cpu

    one = min(run(1) for _ in range(REPEATS))
    threaded = min(run(threads) for _ in range(REPEATS))
    return ThreadedSketches(2 * threads, threads, one[0], threaded[0], threaded[1])


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
        flag_duplicates(verdicts, {v.hotkey: 1 for v in verdicts}, threshold, SEED, workers=1)
        seconds = time.perf_counter() - started
    return seconds * (miners * (miners - 1)) / (timed * (timed - 1))


@dataclass(frozen=True)
class CostPart:
    name: str
    kind: str
    amount: str
    """what is done, with its arithmetic"""
    seconds: float
    """seconds on the resource the part uses: of the GPU, of one core, of the link"""
    share: float
    """of one miner's GPU-seconds (GPU), of the validator's cores times the window (CPU), of the
    window (link)"""


def cost_parts(
    a: ScaleAccounting,
    config: RunConfig,
    costs: UpdateCosts,
    cosine_seconds: float,
    cosine_timed: int,
    step_seconds: float,
    window_seconds: float,
    link_bits: float | None = None,
    spec: ValidatorSpec | None = None,
) -> list[CostPart]:
    """The parts of a validator's window at the accounting's size, on the validator `spec` gives
    (default: `min_compute.yml`'s) and at `link_bits` (default: its download rate)."""
    spec = spec or validator_spec()
    link_bits = link_bits or spec.download_bits
    miner_seconds = a.steps_per_window * step_seconds
    core_seconds = spec.cores * window_seconds
    scoring = config.scoring
    seqs, seq_len = scoring.usefulness_sequences, config.data.seq_len
    used = a.measured_per_validator + scoring.aggregate_top_n + a.replays_per_validator
    check = a.miners * costs.check_seconds
    decode = used * costs.decode_seconds
    sketches = a.miners * costs.sketch_seconds
    link = a.download_bytes * 8 / link_bits
    measured = (
        "" if costs.scale == 1 else f", timed at {costs.measured_params:,} and scaled ×{costs.scale:,.1f}"
    )
    t = costs.threaded
    return [
        CostPart(
            "replays",
            GPU_KIND,
            f"(⌈{a.challenged} × {config.verification.replicas} / {a.validators}⌉ miner + "
            f"{a.receipts_rechecked} receipt re-checked) × {config.verification.challenge_segments} segment × "
            f"{config.train.segment_steps} steps = "
            f"{a.replay_steps:g} of a miner's {a.steps_per_window:,} steps",
            a.replay_share * miner_seconds,
            a.replay_share,
        ),
        CostPart(
            "usefulness measurements",
            GPU_KIND,
            f"⌈{a.miners} × {scoring.score_replicas} / {a.validators}⌉ + {scoring.score_rechecks} × "
            f"{a.validators - 1} = "
            f"{a.measured_per_validator} updates × 3 passes × {seqs} × {seq_len:,} tokens, + 1 pass over the "
            f"reserve, at ⅓ of a training step's FLOPs per token = {a.scoring_share:.2%} of a miner's "
            f"{a.steps_per_window:,} × {config.train.batch_size * seq_len:,} tokens",
            a.scoring_share * miner_seconds,
            a.scoring_share,
        ),
        CostPart(
            "checking every update",
            CPU_KIND,
            f"{a.miners} × {costs.check_seconds:.3f} s (`check_update`: every refusal of decoding, no dense "
            f"tensors{measured})",
            check,
            check / core_seconds,
        ),
        CostPart(
            "decoding the updates it uses",
            CPU_KIND,
            f"({a.measured_per_validator} measured + {scoring.aggregate_top_n} aggregated + "
            f"{a.replays_per_validator} replayed) × {costs.decode_seconds:.2f} s ({config.codec.name} decode of "
            f"a {costs.params:,}-parameter update{measured}); fewer when one is both measured and aggregated",
            decode,
            decode / core_seconds,
        ),
        CostPart(
            "duplicate sketches",
            CPU_KIND,
            f"{a.miners} × {costs.sketch_seconds:.3f} s (`CheckedUpdate.sketch` of {SKETCH_SIZE:,} numbers from "
            f"the payload{measured}), in {spec.cores} threads (`flag_duplicates`: {t.updates} updates in "
            f"{t.threads} threads ran {t.speedup:.2f}× as fast as in 1 on this machine's {t.threads} cores)",
            sketches,
            sketches / core_seconds,
        ),
        CostPart(
            "duplicate cosines",
            CPU_KIND,
            f"every pair of {a.miners} sketches (`flag_duplicates`), timed"
            + ("" if cosine_timed == a.miners else f" on {cosine_timed} and scaled by the pairs"),
            cosine_seconds,
            cosine_seconds / core_seconds,
        ),
        CostPart(
            "downloads",
            LINK_KIND,
            f"{a.miners} updates × {a.update_bytes / 1e6:.2f} MB + {a.replays_per_validator + a.receipts_rechecked} reveal × "
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
    spec: ValidatorSpec = field(default_factory=validator_spec)

    def share(self, resource: Resource) -> float:
        return sum(part.share for part in self.parts if part.kind == resource.kind)

    def seconds(self, resource: Resource) -> float:
        return sum(part.seconds for part in self.parts if part.kind == resource.kind)

    @property
    def verdicts(self) -> dict[str, bool]:
        """Resource name ("GPU", "CPU", "link") → whether its share meets its target."""
        return {r.name: self.share(r) <= r.target for r in RESOURCES}


def cost_markdown(cost: ValidatorCost) -> list[str]:
    """The section's lines: what is counted, the update's numbers, and a table of the parts with one
    row per resource, its share, target and verdict."""
    a, g, c, spec = cost.accounting, cost.config, cost.update, cost.spec
    window_seconds = g.windows.blocks_per_window * BLOCK_SECONDS
    miner_seconds = a.steps_per_window * cost.step_seconds
    t = c.threaded
    capacity = {
        GPU_KIND: f"of one miner's {miner_seconds:,.0f} GPU-seconds",
        CPU_KIND: f"of {spec.cores} cores × {window_seconds:,.0f} s",
        LINK_KIND: f"of the {window_seconds:,.0f}-s window",
    }
    name = {r.kind: r.name for r in RESOURCES}
    rows = [
        [p.name, name[p.kind], p.amount, f"{p.seconds:,.1f}", f"{p.share:.2%}", "", ""] for p in cost.parts
    ]
    for r in RESOURCES:
        share = cost.share(r)
        rows.append(
            [
                f"all {r.name}",
                r.name,
                "",
                f"{cost.seconds(r):,.1f}",
                f"{share:.2%}",
                f"≤ {r.target:.0%} {capacity[r.kind]}",
                "MET" if share <= r.target else "MISSED",
            ]
        )
    headers = [
        "part",
        "resource",
        "what, and its arithmetic",
        "seconds (GPU, one core, link)",
        "share",
        "target",
        "verdict",
    ]
    return [
        f"The GPU config (`distrai/configs/gpu-subnet.toml`, {a.params:,} parameters) at {a.miners} miners and "
        f"{a.validators} validators, on the validator `min_compute.yml` specifies ({spec.cores} cores, "
        f"{spec.download_bits / 1e6:.0f} Mbit/s down). Each resource has its own target: GPU-seconds ≤ 5% of "
        f"one miner's per window (h = {a.steps_per_window:,} steps at the measured H100 pace, "
        f"{cost.step_seconds:.3f} s a step, {miner_seconds:,.0f} s); CPU core-seconds, timed on one core of this "
        f"machine, ≤ 5% of {spec.cores} cores × the {window_seconds:,.0f}-s window; link time ≤ 25% of the "
        f"window at {cost.link_bits / 1e6:.0f} Mbit/s. The resources work side by side.",
        "",
        f"The update: {c.file_bytes / 1e6:.2f} MB as a file ({c.payload_bytes / 1e6:.2f} MB of payload"
        f"{'' if c.scale == 1 else ', scaled'}); {a.miners} updates are {a.miners * a.update_bytes / 1e9:.2f} GB "
        f"(`linkcheck.update_bytes`). A replayed reveal beyond its update is {a.reveal_bytes / 1e9:.2f} GB.",
        "",
        f"A validator checks every update without decoding it and decodes only those it uses. On one core, "
        f"per {c.params:,}-parameter update: checking {c.check_seconds:.3f} s, decoding {c.decode_seconds:.2f} s "
        f"(a dense fp32 copy, {4 * c.params / 1e9:.2f} GB), the sketch of the decoded update "
        f"{c.dense_sketch_seconds:.2f} s, the same sketch from the payload {c.sketch_seconds:.3f} s: "
        f"{c.sketch_saving:.1f}× less than decoding and sketching. `flag_duplicates` sketched {t.updates} "
        f"updates in {t.threaded_seconds:.2f} s in {t.threads} threads and {t.one_thread_seconds:.2f} s in 1 "
        f"({t.speedup:.2f}× on this machine's {t.threads} cores, {t.threaded_cpu_seconds:.2f} s of CPU time); "
        f"the CPU share counts one core's seconds.",
        "",
        "| " + " | ".join(headers) + " |",
        "|" + "---|" * len(headers),
        *("| " + " | ".join(row) + " |" for row in rows),
    ]
