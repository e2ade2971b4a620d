"""The link check: reveal bytes, reveal seconds and required rate for the shipped run configs, worked
by hand from the config's own values (the window offsets may change), a measured throttled store,
and `distrai doctor` end to end."""

from __future__ import annotations

import math
import re
import time
import tomllib

import pytest
import torch

from distrai.chain.local import LocalChain
from distrai.cli import main
from distrai.node import linkcheck
from distrai.protocol.run import load_run_config, parse_run_config, shipped_config_path
from distrai.store import FileStore, StoreError
from distrai.train.coded_state import encode_coded_state
from distrai.train.inner import InnerConfig, inner_loop
from distrai.train.loss import causal_lm_loss
from distrai.train.model import ModelSpec, count_parameters, load_model
from distrai.train.optimizer import InnerOptimizerConfig
from distrai.train.train_state import encode_state

TINY_PARAMS = 985_536
GPU_PARAMS = 257_092_608


def config_with(name: str, **sections: dict):
    """A shipped config with some sections' fields replaced."""
    document = tomllib.loads(shipped_config_path(name).read_text())
    for section, fields in sections.items():
        document[section] = {**document.get(section, {}), **fields}
    return parse_run_config(document, name)


@pytest.fixture(scope="module")
def cpu():
    return load_run_config(shipped_config_path("cpu-localnet"))


@pytest.fixture(scope="module")
def gpu():
    return load_run_config(shipped_config_path("gpu-subnet"))


# -- parameters -------------------------------------------------------------------------------------


def test_parameter_count_on_meta_matches_a_real_build(cpu):
    assert linkcheck.parameter_count(cpu) == TINY_PARAMS
    assert count_parameters(load_model(ModelSpec(preset="tiny"))) == TINY_PARAMS


def test_parameter_count_of_the_gpu_subnet_is_155m_in_its_layers_and_103m_in_gpt2_embeddings(gpu):
    n = linkcheck.parameter_count(gpu)
    assert n == GPU_PARAMS
    embeddings = 2 * gpu.data.vocab_size * 1024  # input and output, untied, hidden size 1024
    assert 150e6 < n - embeddings < 160e6


# -- bytes ------------------------------------------------------------------------------------------


def test_state_bytes_by_dtype():
    assert linkcheck.state_bytes_per_param("bfloat16") == 6
    assert linkcheck.state_bytes_per_param("float32") == 12
    with pytest.raises(ValueError, match="unknown model dtype"):
        linkcheck.state_bytes_per_param("int4")
    # revealed: a float32 state coded against the base (measured, docs/reveal-size.md), less with its
    # moments rounded to bfloat16 at the boundaries; a bfloat16 state raw, whatever the moments
    assert linkcheck.revealed_state_bytes_per_param("float32") == 10.0
    assert linkcheck.revealed_state_bytes_per_param("float32", "bfloat16") == 6.5
    assert linkcheck.revealed_state_bytes_per_param("bfloat16") == 6
    assert linkcheck.revealed_state_bytes_per_param("bfloat16", "bfloat16") == 6


@pytest.mark.parametrize("moments", ["float32", "bfloat16"])
def test_the_coded_state_figure_covers_a_trained_state_coded_as_miners_reveal_it(moments):
    model = load_model(ModelSpec(preset="tiny"))
    config = InnerConfig(
        inner_steps=40,
        segment_steps=40,
        optimizer=InnerOptimizerConfig(lr=1e-3),
        base_anchor=0.01,
        boundary_moments=moments,
    )
    generator = torch.Generator().manual_seed(0)
    result = inner_loop(
        model, lambda t: torch.randint(256, (2, 64), generator=generator), causal_lm_loss, config
    )
    base, last = result.boundaries[0].state, result.boundaries[-1].state
    coded = len(encode_coded_state(last, base.params))
    raw = len(encode_state(last))
    assert coded < linkcheck.revealed_state_bytes_per_param("float32", moments) * TINY_PARAMS < raw


def test_reveal_bytes_of_the_tiny_cpu_config(cpu):
    assert cpu.model.dtype == "float32" and cpu.codec.name == "topk"
    n = TINY_PARAMS
    assert cpu.verification.challenge_segments == 2  # a run of two segments: still one start state
    # topk: per chunk of `chunk` entries, k indices of ceil(log2(chunk)) bits, k 2-bit codes, two fp32
    # levels; the flat tensor's last chunk keeps ceil(k·tail/chunk) entries.
    chunk, k = cpu.codec.options["chunk"], cpu.codec.options["k"]
    full, tail = divmod(n, chunk)
    kept = full * k + math.ceil(k * tail / chunk)
    bits = (chunk - 1).bit_length()
    update = math.ceil(kept * bits / 8) + math.ceil(kept * 2 / 8) + 4 * 2 * (full + (tail > 0))
    assert update < cpu.limits.max_update_bytes

    one = linkcheck.reveal_bytes(cpu, n, validators=1)
    sampled = math.ceil(cpu.verification.trajectory_fraction * n)
    assert one.update == update and one.update_source == "codec"
    assert cpu.train.boundary_moments == "bfloat16"
    state = math.ceil(6.5 * n)  # fp32 parameters, moments rounded to bf16, coded against the base
    assert one.state == state
    assert one.trajectory == sampled * (4 + 4)  # fp32 parameters and the fp32 residual
    assert (one.n_states, one.states) == (1, state)
    assert one.total == update + sampled * 8 + state


def test_gpu_subnet_reveals_under_8_bytes_per_parameter_whatever_the_validators(gpu):
    assert gpu.model.dtype == "float32" and gpu.verification.challenge_segments == 1
    assert gpu.train.boundary_moments == "bfloat16"
    one = linkcheck.reveal_bytes(gpu, GPU_PARAMS, validators=1)
    assert one.state / GPU_PARAMS == pytest.approx(6.5, abs=1e-8)
    # one fp32 start state, its moments rounded to bf16 at the boundary, coded against the base (6.5 B/param:
    # the largest measured, 5.93, with room for the parameters' growth) and the trajectory sample:
    # (4 + 4) B/param × trajectory_fraction; 10.0 + 1.0 = 11.0 with float32 moments, 13 before the coding
    expected = 6.5 + 8.0 * gpu.verification.trajectory_fraction
    assert one.per_param(GPU_PARAMS) == pytest.approx(expected, abs=1e-6)
    assert one.per_param(GPU_PARAMS) <= 8.0  # the reveal's target
    assert one.update < 0.05 * GPU_PARAMS  # topk at 4096/64: about 0.03 bytes per parameter
    many = linkcheck.reveal_bytes(gpu, GPU_PARAMS, validators=10_000)
    assert many == one
    for v in range(1, 12):
        assert linkcheck.states_revealed(gpu, v) == 1
    kept = gpu.model_copy(update={"train": gpu.train.model_copy(update={"boundary_moments": "float32"})})
    assert linkcheck.reveal_bytes(kept, GPU_PARAMS, validators=1).per_param(GPU_PARAMS) == pytest.approx(
        10.0 + 8.0 * gpu.verification.trajectory_fraction, abs=1e-6
    )


def test_no_validators_means_no_challenge_and_only_the_update(gpu):
    none = linkcheck.reveal_bytes(gpu, GPU_PARAMS, validators=0)
    assert (none.n_states, none.states, none.trajectory) == (0, 0, 0)
    assert none.total == none.update


def test_codec_without_residual_and_the_update_limit():
    plain = config_with("cpu-localnet", codec={"name": "none", "options": {}})
    got = linkcheck.reveal_bytes(plain, TINY_PARAMS, validators=2)
    sampled = math.ceil(plain.verification.trajectory_fraction * TINY_PARAMS)
    assert got.trajectory == sampled * 4  # the fp32 parameters; no residual
    assert (got.update, got.update_source) == (4 * TINY_PARAMS, "codec")
    capped = config_with(
        "cpu-localnet", codec={"name": "none", "options": {}}, limits={"max_update_bytes": 1 << 20}
    )
    got = linkcheck.reveal_bytes(capped, TINY_PARAMS, validators=2)
    assert (got.update, got.update_source) == (1 << 20, "limit")


def test_bad_counts_are_refused(cpu):
    with pytest.raises(ValueError, match="validators"):
        linkcheck.reveal_bytes(cpu, TINY_PARAMS, validators=-1)
    with pytest.raises(ValueError, match="n_params"):
        linkcheck.reveal_bytes(cpu, 1.5, validators=1)


# -- time and rate ----------------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["cpu-localnet", "gpu-subnet"])
def test_reveal_seconds_from_the_offsets(name):
    config = load_run_config(shipped_config_path(name))
    blocks = config.windows.reveal_offset - config.windows.commit_offset - 1
    assert linkcheck.reveal_blocks(config) == blocks
    assert linkcheck.reveal_seconds(config, 12.0) == blocks * 12.0
    assert linkcheck.reveal_seconds(config.windows, 0.5) == blocks * 0.5
    with pytest.raises(ValueError, match="block time"):
        linkcheck.reveal_seconds(config, 0)


def test_required_rate_for_the_gpu_subnet(gpu):
    parts = linkcheck.reveal_bytes(gpu, GPU_PARAMS, validators=8)
    seconds = linkcheck.reveal_seconds(gpu, 12.0)
    rate = linkcheck.required_rate(parts.total, seconds)
    assert rate == parts.total / seconds
    assert linkcheck.format_rate(rate) == f"{rate * 8 / 1e6:,.1f} Mbit/s"


def test_rate_arithmetic_and_formats():
    assert linkcheck.required_rate(1_000_000, 2.0) == 500_000.0
    assert linkcheck.required_rate(1, 0.0) == math.inf
    assert linkcheck.required_rate(0, 0.0) == 0.0
    assert linkcheck.mbit_per_s(1_000_000) == 8.0
    assert linkcheck.format_rate(1_000_000) == "8.0 Mbit/s"
    assert linkcheck.format_rate(125_000_000) == "1,000.0 Mbit/s"
    assert linkcheck.format_bytes(3.4e9) == "3.4 GB"
    assert linkcheck.format_duration(14 * 60) == "14.0 min"


def test_verdicts_say_what_will_happen():
    # 3.4 GB in 14 min at the measured rate, 11 min to do it in
    slow = linkcheck.LinkVerdict(measured_rate=3.4e9 / (14 * 60), reveal_bytes=3_400_000_000, seconds=11 * 60)
    assert not slow.ok
    assert slow.margin == pytest.approx(11 / 14)
    assert slow.required_rate == pytest.approx(3.4e9 / 660)
    assert (
        slow.message
        == "uploads a 3.4 GB reveal in 14.0 min of the 11.0 min it has: a challenged window would be missed"
    )
    fast = linkcheck.LinkVerdict(measured_rate=3.4e9 / 120, reveal_bytes=3_400_000_000, seconds=660)
    assert fast.ok and fast.margin == pytest.approx(5.5)
    assert "in time with 5.5× headroom" in fast.message
    no_time = linkcheck.LinkVerdict(measured_rate=1e9, reveal_bytes=10, seconds=0.0)
    assert not no_time.ok and no_time.margin == 0.0 and "no time" in no_time.message
    exact = linkcheck.LinkVerdict(measured_rate=100.0, reveal_bytes=1000, seconds=10.0)
    assert exact.ok and exact.margin == 1.0


# -- measuring --------------------------------------------------------------------------------------


def test_measures_a_throttled_file_store_and_cleans_up(tmp_path):
    store = FileStore(tmp_path / "store", bandwidth_bytes_per_s=4_000_000)
    started = time.monotonic()
    rate = linkcheck.measure_upload_rate(store, 2_000_000)
    wall = time.monotonic() - started
    # the token bucket lets a tenth of a second's worth pass at once: 2 MB take >= 0.4 s, so <= 5 MB/s;
    # the probe's time is within the call's, however busy the machine
    assert 2_000_000 / wall <= rate < 5_500_000
    assert store.list(linkcheck.PROBE_PREFIX) == []


def test_the_probe_is_deleted_when_the_put_fails(tmp_path):
    class Failing(FileStore):
        def put(self, key, data):
            super().put(key, data[:10])
            self.written = key
            raise StoreError("link dropped")

    store = Failing(tmp_path / "store")
    with pytest.raises(StoreError, match="link dropped"):
        linkcheck.measure_upload_rate(store, 1000)
    assert store.written.startswith(linkcheck.PROBE_PREFIX)
    assert not store.exists(store.written)
    with pytest.raises(ValueError, match="at least one byte"):
        linkcheck.measure_upload_rate(store, 0)


# -- distrai doctor ---------------------------------------------------------------------------------


def tight_config(tmp_path):
    """The CPU config with a 5-block reveal phase, whatever the shipped offsets are now."""
    text = shipped_config_path("cpu-localnet").read_text()
    for field, value in (
        ("blocks_per_window", 30),
        ("commit_offset", 12),
        ("reveal_offset", 18),
        ("aggregate_offset", 26),
    ):
        text, found = re.subn(rf"(?m)^{field}\s*=\s*\d+", f"{field} = {value}", text)
        assert found == 1, field
    path = tmp_path / "run.toml"
    path.write_text(text)
    return path


def doctor(tmp_path, *args: str) -> int:
    return main(["doctor", "--run.config", str(tight_config(tmp_path)), "--store.url", *args])


def test_doctor_fails_a_throttled_link_that_cannot_fit_the_reveal(tmp_path, capsys):
    # a 1M-parameter fp32 model's reveal (10.9 MB: its coded start state and the trajectory sample) in
    # 5 one-second blocks needs 2.2 MB/s; the link is throttled to 1 MB/s
    store = (tmp_path / "store").as_uri()
    code = doctor(
        tmp_path, store, "--store.bandwidth", "1000000", "--probe-bytes", "1000000", "--block-time", "1"
    )
    out = " ".join(capsys.readouterr().out.split())
    assert code == 1, out
    assert "TOO SLOW" in out and "a challenged window would be missed" in out
    assert f"{TINY_PARAMS:,}" in out
    assert not any((tmp_path / "store" / "linkcheck").iterdir())


def test_doctor_passes_an_unthrottled_link(tmp_path, capsys):
    # one coded start state and the trajectory sample (~11 MB) in twelve-second blocks: well under the disk's rate
    code = doctor(
        tmp_path,
        str(tmp_path / "store"),
        "--validators",
        "1",
        "--probe-bytes",
        "1048576",
        "--block-time",
        "12",
    )
    out = " ".join(capsys.readouterr().out.split())
    assert code == 0, out
    assert "OK" in out and "in time" in out


def test_doctor_reports_a_store_it_cannot_use(tmp_path, capsys):
    code = doctor(
        tmp_path, str(tmp_path / "store"), "--store.endpoint", "http://localhost:9", "--block-time", "1"
    )
    assert code == 1
    assert "cannot measure" in capsys.readouterr().out


def test_doctor_reads_the_block_time_of_the_chain(tmp_path, capsys, cpu):
    # the local network's config on its 1-s blocks: the reveal phase is seconds, not minutes of 12-s blocks
    chain = LocalChain.create(tmp_path / "chain.db", block_time=1.0)
    code = main(
        [
            "doctor",
            "--run.config",
            str(shipped_config_path("cpu-localnet")),
            "--store.url",
            str(tmp_path / "store"),
        ]
        + ["--subtensor.network", "embedded", "--chain.path", str(chain.path), "--probe-bytes", "65536"]
    )
    out = " ".join(capsys.readouterr().out.split())
    assert code in (0, 1), out
    blocks = linkcheck.reveal_blocks(cpu)
    seconds = linkcheck.format_duration(blocks * 1.0)
    assert f"time to reveal │ {seconds} │ {blocks} blocks × 1 s (the block time of the" in out
    assert f"of the {seconds} it has" in out
    assert (
        main(
            ["doctor", "--run.config", str(shipped_config_path("cpu-localnet")), "--store.url", str(tmp_path)]
            + ["--subtensor.network", "embedded", "--chain.path", str(tmp_path / "none.db")]
        )
        == 1
    )
    refused = " ".join(capsys.readouterr().out.split())
    assert (
        "cannot read the seconds per block of the embedded chain" in refused
        and "no embedded chain" in refused
    )
    assert "--subtensor.network" in refused and "--block-time" in refused
