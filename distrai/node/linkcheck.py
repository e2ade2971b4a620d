"""Can this miner's link reveal in time? The bytes a challenged miner uploads in one window, the
seconds it has for them, the rate that needs, and a measured upload rate to compare.

A miner learns whether it is challenged only when the block at the commit deadline exists (its hash
seeds every validator's challenge), so it starts its reveal at `commit_deadline + 1` and must be done
before the reveal deadline: `(reveal_offset − commit_offset − 1)` blocks. In that time it uploads
(`miners/miner.py`, `Miner.reveal`):

- the update blob (the codec's payload);
- when challenged, the start state of the run of `challenge_segments` consecutive segments drawn
  for it (one draw per window that every validator replays, so it does not grow with the
  validators; a run from segment 0 starts at the window's base, which validators build themselves,
  so one state is the worst case);
- when challenged, the trajectory reveal (`distrai.protocol.trajectory`): `trajectory_fraction` of the last
  state's parameters, the same share of the incoming codec residual (fp32; lossy codecs only), and
  32-byte piece digests (left out here: a few kB).

A boundary state holds the parameters in the model's dtype and AdamW's two moments, which torch
keeps in the parameter's dtype: 6 bytes per parameter in bfloat16, 12 in float32. The miner reveals
it coded losslessly against the window's base (`distrai.train.coded_state`), which in float32 takes
`CODED_STATE_BYTES_PER_PARAM` (measured, below; about 4 bytes less when the run rounds the moments to
bfloat16 at every boundary, `train.boundary_moments`); a bfloat16 state's coding is not measured and is
counted at its raw 6 bytes, which the coding exceeds by no more than its frame headers. The
trajectory sample is drawn by piece (`distrai.train.hashing`), so its size
varies around `trajectory_fraction` of the parameters from window to window.

Pure arithmetic first; `parameter_count` builds the model on torch's `meta` device (no memory), and
`measure_upload_rate` is the only function that touches the network.
"""

from __future__ import annotations

import logging
import math
import os
import secrets
import time
from collections.abc import Callable
from dataclasses import dataclass

import torch

from distrai.codec import get_codec
from distrai.protocol.run import RunConfig
from distrai.protocol.windows import WindowConfig
from distrai.store import Store, StoreError

log = logging.getLogger("distrai.linkcheck")

PROBE_PREFIX = "linkcheck/"
DEFAULT_BLOCK_TIME = 12.0
"""Seconds per block on a Bittensor chain."""
DTYPE_BYTES = {"float32": 4, "bfloat16": 2, "float16": 2}
RESIDUAL_BYTES_PER_PARAM = 4
"""The codec's error-feedback residual is fp32 whatever the model's dtype."""
CODED_STATE_BYTES_PER_PARAM = {("float32", "float32"): 10.0, ("float32", "bfloat16"): 6.5}
"""A float32 boundary state (parameters, two AdamW moments) coded against the window's base, by the
moments a boundary keeps (`train.boundary_moments`). Every float32 bit: rounded up from the largest
measured, 9.93 B/param, the tiny byte-vocabulary model at lr 1e-3 after 40 steps (9.84 after 8,
tests/test_linkcheck.py); 9.74 on the tiny preset after 200 steps at the GPU config's lr 4e-4
(`bench/reveal_size.py`, docs/reveal-size.md); each moment takes about 3.1–3.3. Moments rounded to
bfloat16: their low 16 bits code to nothing, about 1.6 each, and the largest measured was 5.93 (the same
model and steps); 6.5 leaves room for the parameters' part, which grows with their distance from the
base, so with the steps and the learning rate (2.93 → 3.29 B/param from 8 to 200 steps at lr 4e-4)."""


# -- what the model holds ---------------------------------------------------------------------------


def parameter_count(config: RunConfig) -> int:
    """Parameters of the run's model (tied weights once), counted on the `meta` device: no weights
    are allocated or initialized. A `path_or_id` model reads only its config (from the hub when it
    is not a local folder)."""
    from transformers import AutoConfig, AutoModelForCausalLM, LlamaForCausalLM

    from distrai.train.model import ModelSpec, load_tokenizer, preset_config

    source = config.model
    with torch.device("meta"):
        if source.preset is not None:
            kind = "byte" if config.tokenizer == "data" else config.tokenizer
            shape = preset_config(source.preset, load_tokenizer(ModelSpec(preset=source.preset), kind))
            if config.tokenizer == "data":
                assert config.data.vocab_size is not None, "the run config sets it with tokenizer 'data'"
                shape.vocab_size = config.data.vocab_size
            model = LlamaForCausalLM(shape)
        else:
            assert source.path_or_id is not None, "a model source names exactly one of preset and path_or_id"
            hf_config = AutoConfig.from_pretrained(source.path_or_id, revision=source.revision)
            model = AutoModelForCausalLM.from_config(hf_config)
    return sum(p.numel() for p in model.parameters())


def state_bytes_per_param(dtype: str) -> int:
    """Bytes per parameter of one boundary state as saved: the parameter and AdamW's two moments,
    all in the model's dtype."""
    if dtype not in DTYPE_BYTES:
        raise ValueError(f"unknown model dtype {dtype!r}; known: {', '.join(DTYPE_BYTES)}")
    return 3 * DTYPE_BYTES[dtype]


def revealed_state_bytes_per_param(dtype: str, moments: str = "float32") -> float:
    """Bytes per parameter of one boundary state as revealed: coded against the window's base
    (measured in float32, with the `moments` a boundary keeps), else its raw size."""
    return CODED_STATE_BYTES_PER_PARAM.get((dtype, moments), state_bytes_per_param(dtype))


def states_revealed(config: RunConfig, validators: int) -> int:
    """Most boundary states a challenged miner reveals in one window: the start of its run of
    challenged segments, one whatever the run's length and the number of validators (0 when none
    holds a permit, since nobody challenges)."""
    _check_count("validators", validators)
    return 1 if validators else 0


# -- the bytes of a reveal --------------------------------------------------------------------------


@dataclass(frozen=True)
class RevealBytes:
    """Worst-case bytes a challenged miner uploads in one window, by part."""

    update: int
    """the update blob: the codec's payload for `n_params` parameters, or the run's
    `limits.max_update_bytes` when that is smaller (no valid update is larger)"""
    update_source: str
    """"codec" (the codec's payload size) or "limit" (`limits.max_update_bytes`)"""
    trajectory: int
    """the trajectory reveal's drawn share of the last parameters and of the fp32 incoming residual
    (0 with no challenge)"""
    n_states: int
    """boundary states revealed"""
    state: int
    """bytes of one boundary state (parameters and both AdamW moments) as revealed, coded against the
    window's base"""
    states: int
    """bytes of all revealed states"""

    @property
    def total(self) -> int:
        return self.update + self.trajectory + self.states

    def per_param(self, n_params: int) -> float:
        """What a challenged miner reveals beyond its update, in bytes per parameter."""
        return (self.trajectory + self.states) / n_params


def update_bytes(config: RunConfig, n_params: int) -> tuple[int, str]:
    """The update blob's size and where it comes from: the run codec's payload for `n_params`
    parameters taken as one flat tensor (exact up to each tensor's last partial chunk), capped at
    `limits.max_update_bytes`."""
    codec = get_codec(config.codec.name, **dict(config.codec.options))
    estimate = codec.expected_wire_bytes({"flat": (_check_count("n_params", n_params),)})
    limit = config.limits.max_update_bytes
    return (estimate, "codec") if estimate <= limit else (limit, "limit")


def reveal_bytes(config: RunConfig, n_params: int, validators: int) -> RevealBytes:
    """Worst-case bytes a challenged miner uploads in one window when `validators` (with a permit)
    may challenge it: update, trajectory sample and `states_revealed` boundary states."""
    update, source = update_bytes(config, n_params)
    n_states = states_revealed(config, validators)
    state = math.ceil(
        revealed_state_bytes_per_param(config.model.dtype, config.train.boundary_moments) * n_params
    )
    lossy = get_codec(config.codec.name, **dict(config.codec.options)).residual_decay() is not None
    sampled = math.ceil(config.verification.trajectory_fraction * n_params)
    per_sampled = DTYPE_BYTES[config.model.dtype] + (RESIDUAL_BYTES_PER_PARAM if lossy else 0)
    return RevealBytes(
        update=update,
        update_source=source,
        trajectory=sampled * per_sampled if n_states else 0,
        n_states=n_states,
        state=state,
        states=n_states * state,
    )


# -- time and rate ----------------------------------------------------------------------------------


def reveal_blocks(config: RunConfig | WindowConfig) -> int:
    """Blocks from the one after the commit deadline (the challenge is known) to the reveal deadline."""
    windows = config.windows if isinstance(config, RunConfig) else config
    return windows.reveal_offset - windows.commit_offset - 1


def reveal_seconds(config: RunConfig | WindowConfig, block_time: float = DEFAULT_BLOCK_TIME) -> float:
    """Seconds a challenged miner has to upload its reveal: `(reveal_offset − commit_offset − 1) ·
    block_time`."""
    if isinstance(block_time, bool) or not block_time > 0 or not math.isfinite(block_time):
        raise ValueError(f"block time must be a positive number of seconds, got {block_time!r}")
    return reveal_blocks(config) * float(block_time)


def required_rate(n_bytes: int, seconds: float) -> float:
    """Bytes per second that move `n_bytes` in `seconds` (infinite when there is no time for them)."""
    if n_bytes <= 0:
        return 0.0
    return math.inf if seconds <= 0 else n_bytes / seconds


def mbit_per_s(bytes_per_s: float) -> float:
    return bytes_per_s * 8 / 1e6


def format_rate(bytes_per_s: float) -> str:
    """A rate in megabits per second, as links are sold: `781.3 Mbit/s`."""
    if math.isinf(bytes_per_s):
        return "∞ Mbit/s"
    mbit = mbit_per_s(bytes_per_s)
    return f"{mbit:,.1f} Mbit/s" if mbit >= 1 else f"{mbit:.3f} Mbit/s"


def format_bytes(n_bytes: float) -> str:
    """Decimal units, like the rates: `16.4 GB`."""
    for unit, size in (("TB", 1e12), ("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if n_bytes >= size:
            return f"{n_bytes / size:.1f} {unit}"
    return f"{int(n_bytes)} B"


def format_duration(seconds: float) -> str:
    if math.isinf(seconds):
        return "forever"
    if seconds < 100:
        return f"{seconds:.0f} s" if seconds >= 10 else f"{seconds:.1f} s"
    if seconds < 6000:
        return f"{seconds / 60:.1f} min"
    return f"{seconds / 3600:.1f} h"


# -- measuring the link -----------------------------------------------------------------------------


def measure_upload_rate(store: Store, n_bytes: int, *, clock: Callable[[], float] = time.monotonic) -> float:
    """Upload rate to `store` in bytes per second: one `put` of `n_bytes` random bytes under
    `linkcheck/<random hex>`, timed, then deleted (also when the put fails). A small probe on a
    high-latency store measures the latency more than the bandwidth: probe with several MB."""
    if _check_count("n_bytes", n_bytes) == 0:
        raise ValueError("the probe must be at least one byte")
    key = PROBE_PREFIX + secrets.token_hex(16)
    data = os.urandom(n_bytes)
    try:
        started = clock()
        store.put(key, data)
        elapsed = clock() - started
    finally:
        try:
            store.delete(key)
        except StoreError as exc:
            log.warning("could not delete the link probe %s: %s", key, exc)
    return n_bytes / max(elapsed, 1e-9)


# -- the verdict ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class LinkVerdict:
    """A measured upload rate against the rate a reveal of `reveal_bytes` in `seconds` needs."""

    measured_rate: float
    """bytes per second"""
    reveal_bytes: int
    seconds: float

    @property
    def required_rate(self) -> float:
        return required_rate(self.reveal_bytes, self.seconds)

    @property
    def margin(self) -> float:
        """measured / required: at least 1.0 when the reveal fits."""
        needed = self.required_rate
        if needed == 0:
            return math.inf
        return 0.0 if math.isinf(needed) else self.measured_rate / needed

    @property
    def ok(self) -> bool:
        return self.margin >= 1.0

    @property
    def upload_seconds(self) -> float:
        """Seconds the reveal takes at the measured rate."""
        return self.reveal_bytes / self.measured_rate if self.measured_rate > 0 else math.inf

    @property
    def message(self) -> str:
        size = format_bytes(self.reveal_bytes)
        takes = format_duration(self.upload_seconds)
        if self.seconds <= 0 < self.reveal_bytes:
            return (
                f"uploads a {size} reveal in {takes}, but has no time for it: the reveal deadline is one block "
                "after the commit deadline, so a challenged window would be missed"
            )
        head = f"uploads a {size} reveal in {takes} of the {format_duration(self.seconds)} it has"
        if self.ok:
            headroom = "" if math.isinf(self.margin) else f" with {self.margin:.1f}× headroom"
            return f"{head}: a challenged window would be revealed in time{headroom}"
        return f"{head}: a challenged window would be missed"


def _check_count(name: str, value: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ValueError(f"{name} must be a non-negative integer, got {value!r}")
    return value
