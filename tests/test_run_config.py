"""The run config, its run id and the owner's commitment (distrai/protocol/run.py)."""

from __future__ import annotations

import copy
import json
import tomllib

import pytest
from bittensor.keyfiles import Keypair
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import ValidationError

from distrai.protocol.run import (
    MAX_COMMITMENT_BYTES,
    SHIPPED_CONFIGS,
    RunCommitment,
    RunConfig,
    RunConfigError,
    RunMismatch,
    canonical_config_json,
    challenge_inputs,
    check_run_matches,
    load_run_config,
    parse_run_commitment,
    parse_run_config,
    run_commitment,
    run_id,
    shipped_config_path,
)
from distrai.protocol.windows import challenge_count, challenged, miner_segments
from distrai.wire import sign_document
from distrai.wire.window_documents import Boundary, UpdateBlob, UpdateManifest

MINIMAL_TOML = """\
name = "test-run"
netuid = 3

[model]
preset = "tiny"

[data]
seq_len = 32

[train]
inner_steps = 12
segment_steps = 4
batch_size = 4

[windows]
blocks_per_window = 20
commit_offset = 8
reveal_offset = 12
aggregate_offset = 16
"""

# The same run as MINIMAL_TOML: comments, other key order, inline tables, and defaults spelled out.
SAME_RUN_TOML = """\
# a comment
netuid = 3
tokenizer = "byte"
name = "test-run"

[windows]  # offsets in blocks
aggregate_offset = 16
reveal_offset = 12
commit_offset = 8
blocks_per_window = 20
checkpoint_every = 10

[train]
batch_size = 4
segment_steps = 4
inner_steps = 12
betas = [0.9, 0.95]
micro_batches = 1

[outer]
lr = 0.7
momentum = 0.9
nesterov = true
clip_to_median_norm = true

[codec]
name = "none"

[data]
seq_len = 32
source = "builtin"

[model]
dtype = "float32"
preset = "tiny"

[scoring]
duplicate_cosine = 0.95

[verification]
replay_tolerance = 0.0
"""


def minimal() -> dict:
    return tomllib.loads(MINIMAL_TOML)


def with_change(path: str, value) -> dict:
    doc = copy.deepcopy(minimal())
    *parents, key = path.split(".")
    node = doc
    for part in parents:
        node = node.setdefault(part, {})
    node[key] = value
    return doc


def refusal(doc: dict) -> str:
    with pytest.raises(RunConfigError) as refused:
        parse_run_config(doc, "run.toml")
    return str(refused.value)


# --- shipped configs ----------------------------------------------------------------------------


@pytest.mark.parametrize("name", SHIPPED_CONFIGS)
def test_shipped_configs_load(name):
    config = load_run_config(shipped_config_path(name))
    assert config.name
    assert len(run_id(config)) == 64


def test_cpu_example_is_small_and_offline():
    config = load_run_config(shipped_config_path("cpu-localnet"))
    assert (config.model.preset, config.tokenizer, config.data.source) == ("tiny", "data", "prepared")
    assert config.data.store is None and config.data.vocab_size == 260  # the built-in corpus, byte tokenizer
    assert config.data.seq_len <= 128 and config.train.batch_size <= 16
    assert 20 <= config.train.inner_steps <= 120 and 5 <= config.train.segment_steps <= 20
    assert config.codec.name in ("topk", "int8")
    assert 20 <= config.windows.blocks_per_window <= 30
    assert config.windows.pipelined and config.windows.commit_offset == config.windows.blocks_per_window
    assert config.verification.replay_tolerance == 0.0


def test_gpu_example_is_a_real_run():
    config = load_run_config(shipped_config_path("gpu-subnet"))
    assert config.model.preset == "150m" and config.data.source == "prepared"
    assert config.tokenizer == "data" and config.data.vocab_size == 50257  # GPT-2's BPE
    assert config.data.manifest is None  # a template until the owner prepares the data
    # the cap: a miner trains until its commit deadline, and H leaves room for an 8-GPU miner of H100s
    # (8 x 1,840 steps a window at the measured pace, docs/protocol.md "How long a miner trains")
    assert 8 * 1840 <= config.train.inner_steps <= 20_000
    assert full_manifest_bytes(config) <= config.limits.max_manifest_bytes
    # the fast step (docs/gpu.md): fp32 master weights, bf16 compute, flash attention, fused AdamW
    assert (config.model.dtype, config.model.attention) == ("float32", "sdpa")
    assert (config.train.autocast, config.train.adamw) == ("bfloat16", "fused")
    assert config.codec.name == "topk"
    assert config.windows.pipelined and config.windows.commit_offset == config.windows.blocks_per_window
    assert (
        config.verification.challenge_segments * config.train.segment_steps / config.train.inner_steps <= 0.1
    )


def full_manifest_bytes(config) -> int:
    """The size of a signed manifest of H steps: every loss and every boundary's hash and sketch."""
    h, k = config.train.inner_steps, config.train.segment_steps
    body = UpdateManifest(
        run_id="ab" * 32,
        window=10**6,
        hotkey="5" + "x" * 47,
        base_hash="cd" * 32,
        update=UpdateBlob(
            sha256="ef" * 32, size=10**8, codec="topk", codec_metadata={"chunk": "4096", "k": "64"}
        ),
        micro_batches=32,
        losses=[2.345678901234567] * h,
        boundaries=[
            Boundary(step=s, state_hash="01" * 32, sketch=[-1.2345678901234567e-05] * 64)
            for s in range(0, h + 1, k)
        ],
        residual_in_hash="23" * 32,
        residual_out_hash="45" * 32,
    )
    return len(sign_document(Keypair.create_from_uri("//Miner"), body.model_dump()))


def test_unknown_shipped_config_is_refused():
    with pytest.raises(ValueError, match="cpu-localnet"):
        shipped_config_path("laptop")


# --- defaults -----------------------------------------------------------------------------------


def test_defaults_fill_every_optional_section():
    config = parse_run_config(minimal())
    assert (
        config.outer.lr,
        config.outer.momentum,
        config.outer.nesterov,
        config.outer.clip_to_median_norm,
    ) == (
        0.7,
        0.9,
        True,
        True,
    )
    assert config.tokenizer == "byte"
    assert config.task.kind == "pretrain" and config.task.teacher is None
    assert config.codec.name == "none" and config.codec.options == {}
    assert config.data.source == "builtin"
    assert config.model.dtype == "float32"
    assert config.train.micro_batches == 1 and config.train.n_segments == 3
    assert config.verification.replay_tolerance == 0.0
    assert config.scoring.burn_share == 0.0
    assert config.scoring.duplicate_cosine == 0.95
    assert config.train.base_anchor == 0.01


def test_config_is_frozen():
    config = parse_run_config(minimal())
    with pytest.raises(ValidationError):
        config.netuid = 4
    with pytest.raises(ValidationError):
        config.train.inner_steps = 4


def test_a_distill_run_validates():
    doc = with_change(
        "task", {"kind": "distill", "teacher": {"preset": "small"}, "alpha": 0.7, "temperature": 1.5}
    )
    config = parse_run_config(doc)
    assert config.task.teacher.preset == "small"
    assert config.task.alpha == 0.7 and config.task.top_k == 32


def test_a_pinned_hub_model_with_its_own_tokenizer_validates():
    doc = with_change("model", {"path_or_id": "org/model", "revision": "abc123"})
    doc["tokenizer"] = "model"
    doc["data"] = {"source": "prepared", "manifest": "c" * 64, "store": "s3://owner/data", "seq_len": 128}
    config = parse_run_config(doc)
    assert (config.model.path_or_id, config.model.revision, config.data.store) == (
        "org/model",
        "abc123",
        "s3://owner/data",
    )
    doc["tokenizer"] = "data"
    doc["data"]["vocab_size"] = 50257
    assert "tokenizer 'data' sizes a preset model" in refusal(doc)


# --- validation errors name the field ------------------------------------------------------------


@pytest.mark.parametrize(
    ("path", "value", "expected"),
    [
        ("windows.reveal_offset", 7, "run.toml: windows.reveal_offset: 7 must be after commit_offset (8)"),
        ("windows.aggregate_offset", 20, "run.toml: windows.aggregate_offset: 20 must be inside the window"),
        (
            "windows.commit_offset",
            0,
            "run.toml: windows.commit_offset: Input should be greater than or equal to 1",
        ),
        ("train.segment_steps", 5, "run.toml: train.segment_steps: 5 must divide inner_steps (12)"),
        ("train.micro_batches", 3, "run.toml: train.micro_batches: 3 must divide batch_size (4)"),
        ("train.lr", "fast", "run.toml: train.lr: Input should be a valid number (got 'fast')"),
        ("train.lr", 0.0, "run.toml: train.lr: Input should be greater than 0"),
        ("train.lr", float("inf"), "run.toml: train.lr: Input should be a finite number"),
        ("outer.momentum", float("nan"), "run.toml: outer.momentum: Input should be a finite number"),
        ("train.betas", [0.9, 1.0], "run.toml: train.betas: [0.9, 1.0] must both be in [0, 1)"),
        (
            "train.inner_steps",
            True,
            "run.toml: train.inner_steps: Input should be a valid integer (got True)",
        ),
        ("train.momentum", 0.9, "run.toml: train.momentum: is not a setting of the run config"),
        (
            "model.preset",
            "huge",
            "run.toml: model.preset: Input should be 'micro', 'tiny', 'small', '150m' or '1b'",
        ),
        ("model.path_or_id", "org/model", "run.toml: model: set exactly one of preset or path_or_id"),
        ("data.source", "hub", "run.toml: data.source: a run does not read 'hub' text itself"),
        ("data.manifest", "a" * 64, "run.toml: data: manifest applies only to source 'prepared'"),
        ("data.vocab_size", 260, "run.toml: data.vocab_size goes with tokenizer 'data' (and only with it)"),
        ("data.heldout_fraction", 0.0, "run.toml: data.heldout_fraction: Input should be greater than 0"),
        ("task.kind", "distill", "run.toml: task: kind 'distill' needs a teacher"),
        ("task.alpha", 0.3, "run.toml: task: alpha applies only to kind 'distill'"),
        ("codec.options", {"k": 8}, "run.toml: codec: codec 'none' takes no options"),
        ("codec.options", {"k": True}, "run.toml: codec.options: option 'k' must be a finite number"),
        ("codec.name", "zip", "run.toml: codec.name: unknown codec 'zip'; known: none, int8, topk"),
        (
            "verification.challenge_miners",
            0,
            "run.toml: verification.challenge_miners: a count must be at least 1",
        ),
        (
            "verification.challenge_miners",
            1.5,
            "run.toml: verification.challenge_miners: a fraction must be in (0, 1]",
        ),
        (
            "verification.replicas",
            0,
            "run.toml: verification.replicas: Input should be greater than or equal to 1",
        ),
        (
            "verification.retention_windows",
            2,
            "run.toml: verification.retention_windows: Input should be greater than or equal to 3",
        ),
        (
            "verification.challenge_segments",
            4,
            "run.toml: verification.challenge_segments (4) is more than the 3",
        ),
        ("scoring.burn_share", 1.0, "run.toml: scoring.burn_share: Input should be less than 1"),
        ("scoring.ema_alpha", 0.0, "run.toml: scoring.ema_alpha: Input should be greater than 0"),
        (
            "scoring.duplicate_cosine",
            0.0,
            "run.toml: scoring.duplicate_cosine: Input should be greater than 0",
        ),
        (
            "train.base_anchor",
            -0.1,
            "run.toml: train.base_anchor: Input should be greater than or equal to 0",
        ),
        ("limits.max_update_bytes", 10, "run.toml: limits.max_update_bytes: Input should be greater than"),
        ("tokenizer", "model", "run.toml: tokenizer 'model' needs model.path_or_id"),
        ("name", "my run", "run.toml: name: 'my run' may hold only letters"),
        ("netuid", 70000, "run.toml: netuid: Input should be less than or equal to 65535"),
        ("model.attention", "flash", "run.toml: model.attention: Input should be 'eager' or 'sdpa'"),
        ("train.autocast", "float16", "run.toml: train.autocast: Input should be 'bfloat16'"),
        ("train.adamw", "apex", "run.toml: train.adamw: Input should be 'single', 'foreach' or 'fused'"),
    ],
)
def test_invalid_knobs_are_refused_with_the_field_named(path, value, expected):
    assert expected in refusal(with_change(path, value))


def test_a_missing_section_is_named():
    doc = minimal()
    del doc["windows"]
    assert "run.toml: windows: is required" in refusal(doc)


def test_every_problem_is_listed():
    doc = with_change("train.lr", -1.0)
    doc["netuid"] = -1
    lines = refusal(doc).splitlines()
    assert len(lines) == 2
    assert all(line.startswith("run.toml: ") for line in lines)


def test_a_teacher_must_share_the_students_tokenizer():
    doc = with_change("task", {"kind": "distill", "teacher": {"path_or_id": "org/teacher", "revision": "v1"}})
    assert "run.toml: task.teacher must share the student's tokenizer" in refusal(doc)


def test_load_names_the_file(tmp_path):
    bad = tmp_path / "cpu.toml"
    bad.write_text(MINIMAL_TOML.replace("reveal_offset = 12", "reveal_offset = 6"))
    with pytest.raises(
        RunConfigError, match=r"cpu\.toml: windows\.reveal_offset: 6 must be after commit_offset \(8\)"
    ):
        load_run_config(bad)


def test_load_refuses_broken_toml_and_missing_files(tmp_path):
    broken = tmp_path / "broken.toml"
    broken.write_text("name = \n")
    with pytest.raises(RunConfigError, match=r"broken\.toml: not valid TOML"):
        load_run_config(broken)
    with pytest.raises(RunConfigError, match=r"absent\.toml: cannot read"):
        load_run_config(tmp_path / "absent.toml")


# --- run id -------------------------------------------------------------------------------------


def test_comments_order_and_spelled_out_defaults_keep_the_run_id(tmp_path):
    first, second = tmp_path / "a.toml", tmp_path / "b.toml"
    first.write_text(MINIMAL_TOML)
    second.write_text(SAME_RUN_TOML)
    assert run_id(load_run_config(first)) == run_id(load_run_config(second))


def test_an_integer_written_for_a_float_keeps_the_run_id():
    assert run_id(parse_run_config(with_change("outer.lr", 1))) == run_id(
        parse_run_config(with_change("outer.lr", 1.0))
    )


@pytest.mark.parametrize("name", SHIPPED_CONFIGS)
def test_canonical_json_reads_back_as_the_same_run(name):
    config = load_run_config(shipped_config_path(name))
    again = parse_run_config(json.loads(canonical_config_json(config)))
    assert again == config
    assert run_id(again) == run_id(config)


@pytest.mark.parametrize(
    ("path", "value"),
    [
        ("name", "other-run"),
        ("netuid", 4),
        ("model.init_seed", 1),
        ("data.seq_len", 33),
        ("train.inner_steps", 24),
        ("train.lr", 3.0001e-4),
        ("outer.nesterov", False),
        ("codec", {"name": "int8"}),
        ("windows.checkpoint_every", 11),
        ("verification.loss_tolerance", 1e-3),
        ("verification.trajectory_fraction", 0.5),
        ("scoring.burn_share", 0.1),
        ("limits.max_manifest_bytes", 4096),
        ("model.attention", "sdpa"),
        ("train.autocast", "bfloat16"),
        ("train.adamw", "fused"),
        ("train.compile", True),
    ],
)
def test_any_changed_knob_changes_the_run_id(path, value):
    assert run_id(parse_run_config(with_change(path, value))) != run_id(parse_run_config(minimal()))


def test_a_tolerance_replay_needs_a_loss_tolerance_and_a_codec_chunk_must_divide_a_piece():
    with pytest.raises(RunConfigError, match="loss_tolerance must be above 0 when replay_tolerance is"):
        parse_run_config(with_change("verification", {"replay_tolerance": 0.02}))
    loose = parse_run_config(with_change("verification", {"replay_tolerance": 0.02, "loss_tolerance": 0.01}))
    assert loose.verification.loss_tolerance == 0.01
    with pytest.raises(RunConfigError, match=r"options.chunk \(3000\) must divide 1048576"):
        parse_run_config(with_change("codec", {"name": "topk", "options": {"chunk": 3000, "k": 8}}))
    with pytest.raises(RunConfigError, match="trajectory_fraction"):
        parse_run_config(with_change("verification", {"trajectory_fraction": 0.0}))


KNOBS = st.fixed_dictionaries(
    {
        "train.segment_steps": st.sampled_from([1, 2, 3, 4, 6, 12]),
        "train.lr": st.floats(min_value=1e-6, max_value=1.0),
        "outer.momentum": st.floats(min_value=0.0, max_value=0.99),
        "codec.name": st.sampled_from(["none", "int8", "topk"]),
        "windows.blocks_per_window": st.integers(min_value=17, max_value=40),
        "scoring.ema_alpha": st.floats(min_value=0.01, max_value=1.0),
        "verification.challenge_miners": st.one_of(st.integers(1, 5), st.floats(0.01, 1.0)),
    }
)


def build(knobs: dict) -> RunConfig:
    doc = minimal()
    for path, value in knobs.items():
        section, key = path.split(".")
        doc.setdefault(section, {})[key] = value
    return parse_run_config(doc)


@given(KNOBS, KNOBS, st.data())
@settings(max_examples=150, deadline=None)
def test_run_ids_agree_exactly_when_the_knobs_do(a, other, data):
    redrawn = data.draw(st.sets(st.sampled_from(sorted(other))))
    b = {**a, **{path: other[path] for path in redrawn}}
    same_knobs = json.dumps(a, sort_keys=True) == json.dumps(b, sort_keys=True)
    assert (run_id(build(a)) == run_id(build(b))) == same_knobs


# --- the owner's commitment ---------------------------------------------------------------------


def test_commitment_fits_on_chain_and_reads_back():
    config = load_run_config(shipped_config_path("gpu-subnet"))
    commitment = run_commitment(config)
    assert len(commitment.encode()) <= MAX_COMMITMENT_BYTES
    assert parse_run_commitment(commitment) == run_id(config)
    check_run_matches(config, commitment)
    check_run_matches(config, f"  {commitment}\n")


def test_a_node_with_another_config_refuses_and_names_both_ids():
    mine = parse_run_config(minimal())
    owners = parse_run_config(with_change("train.lr", 1e-3))
    with pytest.raises(RunMismatch) as refused:
        check_run_matches(mine, run_commitment(owners))
    assert run_id(mine) in str(refused.value) and run_id(owners) in str(refused.value)


@pytest.mark.parametrize("published", [None, "", "   "])
def test_a_node_refuses_when_nothing_is_published(published):
    with pytest.raises(RunMismatch, match="no run commitment"):
        check_run_matches(parse_run_config(minimal()), published)


@pytest.mark.parametrize(
    ("published", "wrong"),
    [
        ("hello", "does not start with 'distrai-run:'"),
        ("s3://bucket", "does not start with 'distrai-run:'"),
        ("distrai-run:1234", "is not a run id"),
        ("distrai-run:" + "A" * 64, "is not a run id"),
        ("distrai-run:" + "a" * 64 + "0", "is not a run id"),
        ("distrai-run: " + "a" * 64, "is not a run id"),
    ],
)
def test_a_node_refuses_a_commitment_that_is_not_a_run_saying_what_is_wrong(published, wrong):
    with pytest.raises(RunMismatch, match="not a run commitment") as refused:
        check_run_matches(parse_run_config(minimal()), published)
    assert wrong in str(refused.value)


@given(st.text("0123456789abcdef", min_size=64, max_size=64))
@settings(max_examples=50, deadline=None)
def test_a_run_commitment_round_trips_through_its_string_on_chain(run):
    commitment = RunCommitment(run_id=run)
    assert commitment.encode() == f"distrai-run:{run}"
    assert parse_run_commitment(commitment.encode()) == run
    with pytest.raises(ValidationError, match="run_id"):
        RunCommitment(run_id=run.upper() + "G")


# --- challenge inputs ---------------------------------------------------------------------------


def test_challenge_inputs_follow_the_run():
    config = load_run_config(shipped_config_path("cpu-localnet"))
    inputs = challenge_inputs(config, "0x" + "12" * 32, 4, ["5c", "5a", "5b", "5a"])
    assert inputs.run_id == run_id(config)
    assert inputs.miner_hotkeys == ("5a", "5b", "5c")
    challenge = challenged(inputs)
    assert len(challenge) == challenge_count(config.verification.challenge_miners, 3)
    assert inputs.replicas == config.verification.replicas
    n = config.train.n_segments
    assert all(len(miner_segments(inputs, m, n)) == config.verification.challenge_segments for m in challenge)
