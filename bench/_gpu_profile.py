"""Where a step's time goes: one step of a loop under `torch.profiler`, its kernels grouped into kinds,
for bench/gpu.py's `--profile` section.

On a GPU the kernels are the device's (time on the GPU, from CUPTI); on a CPU they are the operators'
self times. The kinds are told apart by kernel name, first match wins: inductor's compiled kernels
(`triton_*`, `cpp_fused_*`), then sort, scatter and index_put (where deterministic algorithms send
embedding and loss gradients when inductor falls back to eager), attention, matrix multiplies, the
optimizer, copies and fills, and the rest. The wall time of the profiled step beside the kernels'
sum shows how long the device waited for the host, and the number of distinct compiled graphs run
shows graph breaks (a model compiled whole runs two: its forward and its backward)."""

from __future__ import annotations

import re
import time
from dataclasses import dataclass

import torch
from torch.autograd import DeviceType
from torch.profiler import ProfilerActivity, profile

FALLBACKS = "sort, scatter, index_put"
"""The kind that deterministic algorithms make inductor leave to eager kernels; its calls are counted
too, since on a CPU their time per step is near the table's 0.1-ms resolution."""
KINDS: tuple[tuple[str, re.Pattern[str]], ...] = tuple(
    (kind, re.compile(pattern, re.IGNORECASE))
    for kind, pattern in (
        ("compiled (inductor)", r"^triton_|cpp_fused|compiledfxgraph"),
        (FALLBACKS, r"sort|scatter|index_put|indexing_backward|embedding_(dense_)?backward"),
        ("attention", r"flash|fmha|attention|sdpa"),
        ("matmul", r"gemm|cutlass|xmma|cublas|nvjet|sm90_|sm80_|aten::(mm|addmm|bmm|matmul|linear)$"),
        ("optimizer", r"adam|multi_tensor_apply|foreach"),
        ("copies and fills", r"memcpy|memset|copy|fill|zero"),
    )
)
OTHER = "other"
COMPILED_GRAPH = "## Call CompiledFxGraph"
"""How the profiler names (on the host) a run of one graph that inductor compiled."""


@dataclass(frozen=True)
class Kernel:
    name: str
    seconds: float
    calls: int

    @property
    def kind(self) -> str:
        return next((kind for kind, pattern in KINDS if pattern.search(self.name)), OTHER)


@dataclass(frozen=True)
class Profile:
    """One step: its wall time, its kernels (longest first) and how many distinct compiled graphs ran."""

    wall_s: float
    kernels: tuple[Kernel, ...]
    graphs: int

    def seconds_by_kind(self) -> dict[str, float]:
        kinds = {kind: 0.0 for kind, _ in KINDS} | {OTHER: 0.0}
        for k in self.kernels:
            kinds[k.kind] += k.seconds
        return kinds

    def calls_of(self, kind: str) -> int:
        return sum(k.calls for k in self.kernels if k.kind == kind)

    @property
    def kernel_s(self) -> float:
        return sum(k.seconds for k in self.kernels)


def profile_step(step, model, optimizer, batch: torch.Tensor, device: torch.device) -> Profile:
    """Run `step` once under the profiler (after the loop's warm-up, so nothing compiles here)."""
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device.type == "cuda" else [])
    with profile(activities=activities) as prof:
        _sync(device)
        start = time.perf_counter()
        step(model, optimizer, batch)
        _sync(device)
        wall = time.perf_counter() - start
    wanted = DeviceType.CUDA if device.type == "cuda" else DeviceType.CPU
    events = prof.key_averages()
    kernels = [
        Kernel(e.key, _self_us(e, device) / 1e6, e.count)
        for e in events
        if e.device_type == wanted and _self_us(e, device) > 0
    ]
    graphs = sum(1 for e in events if e.key.startswith(COMPILED_GRAPH))
    return Profile(wall, tuple(sorted(kernels, key=lambda k: -k.seconds)), graphs)


def _self_us(event, device: torch.device) -> float:
    return event.self_device_time_total if device.type == "cuda" else event.self_cpu_time_total


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def profile_section(preset: str, profiles: dict[str, Profile], device: torch.device, top: int = 8) -> str:
    """Milliseconds per step by kind, one column per loop; then each loop's longest kernels."""
    names = list(profiles)
    where = "GPU kernels (CUPTI)" if device.type == "cuda" else "operators' self CPU time"
    lines = [
        f"## Where a step's time goes: preset {preset}, one profiled step, {where}",
        "",
        "| kind | " + " | ".join(names) + " |",
        "|---|" + "---:|" * len(names),
    ]
    by_kind = {name: p.seconds_by_kind() for name, p in profiles.items()}
    for kind in [k for k, _ in KINDS] + [OTHER]:
        cells = [_ms_share(by_kind[n][kind], profiles[n].kernel_s) for n in names]
        lines.append(f"| {kind} | " + " | ".join(cells) + " |")
    lines.append("| **sum of kernels** | " + " | ".join(_ms(profiles[n].kernel_s) for n in names) + " |")
    lines.append("| wall time of the step | " + " | ".join(_ms(profiles[n].wall_s) for n in names) + " |")
    lines.append(
        "| distinct compiled graphs run | " + " | ".join(str(profiles[n].graphs) for n in names) + " |"
    )
    lines.append(
        f"| calls of {FALLBACKS} | " + " | ".join(str(profiles[n].calls_of(FALLBACKS)) for n in names) + " |"
    )
    lines += [
        "",
        "Milliseconds per step (share of the kernels' sum). The profiler slows the host's launches, so "
        "the wall time here is longer than the throughput table's step; on a GPU, wall time well above "
        "the kernels' sum is time the device waited for the host.",
        "",
        f"Longest kernels, {top} per loop:",
        "",
        "| loop | kernel | kind | calls | ms per step |",
        "|---|---|---|---:|---:|",
    ]
    for name, p in profiles.items():
        for k in p.kernels[:top]:
            shown = k.name if len(k.name) <= 90 else k.name[:87] + "..."
            shown = shown.replace("|", "\\|")
            lines.append(f"| {name} | `{shown}` | {k.kind} | {k.calls} | {k.seconds * 1e3:,.2f} |")
    return "\n".join(lines)


def _ms(seconds: float) -> str:
    return f"{seconds * 1e3:,.1f}"


def _ms_share(seconds: float, total: float) -> str:
    return f"{seconds * 1e3:,.1f} ({seconds / total:.0%})" if total > 0 else "–"
