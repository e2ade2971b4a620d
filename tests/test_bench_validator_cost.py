"""The validator's cost section (`bench/_validator_cost.py`) from given timings: each resource's share is
of its own capacity (one miner's GPU-seconds, the specified cores times the window, the window at the
specified link) and has its own target and verdict."""

from __future__ import annotations

import math

import pytest
from support.bench_jobs import bench_module

from distrai.node import linkcheck
from distrai.protocol.run import load_run_config, shipped_config_path

MINERS, VALIDATORS, STEPS, STEP_SECONDS = 256, 16, 1840, 65_536 / 101_863


def cost_of(check: float, decode: float, sketch: float, link_bits: float | None = None):
    v, scale = bench_module("_validator_cost"), bench_module("_scale_accounting")
    gpu = load_run_config(shipped_config_path("gpu-subnet"))
    params = linkcheck.parameter_count(gpu)
    threaded = v.ThreadedSketches(4, 2, 1.0, 0.6, 1.1)
    update = v.UpdateCosts(params, params, check, decode, sketch, 0.7, 7_532_172, 7_568_900, threaded)
    a = scale.account(gpu, MINERS, VALIDATORS, STEPS, params)
    window = gpu.windows.blocks_per_window * v.BLOCK_SECONDS
    spec = v.ValidatorSpec(cores=8, download_bits=200e6)
    parts = v.cost_parts(a, gpu, update, 2.0, MINERS, STEP_SECONDS, window, link_bits, spec)
    return v, a, v.ValidatorCost(gpu, a, update, parts, link_bits or spec.download_bits, STEP_SECONDS, spec)


def test_min_compute_specifies_the_validator_the_shares_are_of():
    spec = bench_module("_validator_cost").validator_spec()
    assert spec.cores == 8 and spec.download_bits == 200e6


def test_each_resource_has_its_share_target_and_verdict():
    v, a, cost = cost_of(check=0.2, decode=0.4, sketch=0.3)
    parts = {p.name: p for p in cost.parts}
    used = a.measured_per_validator + 16 + a.replays_per_validator
    assert (
        used == math.ceil(256 * 1 / 16) + 1 * 15 + 16 + 1
    )  # its share, one re-check of each other validator
    cpu = 256 * 0.2 + used * 0.4 + 256 * 0.3 + 2.0
    assert parts["decoding the updates it uses"].seconds == pytest.approx(used * 0.4)
    gpu, cpu_resource, link = v.RESOURCES
    assert cost.share(cpu_resource) == pytest.approx(cpu / (8 * 1200))
    assert cost.share(link) == pytest.approx(a.download_bytes * 8 / 200e6 / 1200)
    assert cost.share(gpu) == pytest.approx(a.replay_share + a.scoring_share)
    assert cost.verdicts == {"GPU": True, "CPU": True, "link": True}
    lines = v.cost_markdown(cost)
    rows = {line.split(" | ")[0].lstrip("| "): line for line in lines if line.startswith("| all ")}
    assert set(rows) == {"all GPU", "all CPU", "all link"}
    assert rows["all CPU"].endswith(f"| {cost.share(cpu_resource):.2%} | ≤ 5% of 8 cores × 1,200 s | MET |")
    assert rows["all link"].endswith("| ≤ 25% of the 1,200-s window | MET |")


def test_a_resource_over_its_target_is_missed_alone():
    v, _, cost = cost_of(check=2.0, decode=1.0, sketch=2.0, link_bits=100e6)
    assert cost.verdicts == {"GPU": True, "CPU": False, "link": False}
    misses = [line for line in v.cost_markdown(cost) if line.endswith("| MISSED |")]
    assert [line.split(" | ")[0] for line in misses] == ["| all CPU", "| all link"]
