"""A miner's reveal outlives the process that committed it: staged on disk before the commitment,
resumed after a restart while still due, and carried with the codec residual it committed to
(miners/reveal_job.py, miners/uploader.py, Miner.recover). Also the start-up link check, a store
outage met by a reveal or a commit, the windows a miner skips, and a challenged state the window
did not keep, rebuilt to the hash its manifest committed to (miners/kept_states.py, miners/rebuild.py)."""

from __future__ import annotations

import contextlib
import hashlib
import logging
import math
import threading
from pathlib import Path

import pytest
from support.local_harness import make_local_harness

from distrai.chain.local import LocalChain
from distrai.node.metrics import Metrics, read_metrics
from distrai.node.metrics_records import LinkRecord, RevealRecord, TrainRecord
from distrai.node.seat import Seat
from distrai.protocol.layout import manifest_key, state_key, trajectory_key
from distrai.protocol.run import load_run_config
from distrai.protocol.runtime import build_runtime
from distrai.protocol.update import residual_hash
from distrai.protocol.windows import commit_deadline, reveal_deadline, window_start
from distrai.store import FileStore
from distrai.store.base import blob_key
from distrai.train.train_state import load_state, state_hash
from distrai.wire.signed import open_document
from distrai.wire.window_documents import UpdateManifest, parse_body
from miners.miner import Miner, MinerOptions
from miners.rebuild import TRAINED_FILE, RebuildError, read_record, rebuild
from miners.reveal_job import JOB_FILE, sealed_jobs
from miners.uploader import Uploader, give_up_block

CONFIG = Path(__file__).parent / "support" / "adversary-localnet.toml"
WINDOW = 3


@pytest.fixture(scope="module")
def config():
    return load_run_config(CONFIG)


@pytest.fixture
def net(tmp_path, config):
    harness = make_local_harness(tmp_path)
    validator = harness.new_wallet("validator")
    harness.chain.register(validator)
    harness.add_stake(validator, 1000.0)
    miner = harness.new_wallet("miner")
    harness.chain.register(miner)
    harness.advance(harness.chain.hyperparameters().tempo + 2)
    harness.advance(window_start(config.windows, WINDOW) - harness.local.block())
    store = FileStore(tmp_path / "store")
    return harness, miner, store, tmp_path / "miner"


def new_miner(net, config, metrics: Metrics | None = None) -> Miner:
    """A miner process as it starts: its state comes only from its work dir and the chain."""
    harness, wallet, store, work = net
    miner = Miner(
        Seat(build_runtime(config), harness.chain, wallet, store, store.url, metrics), MinerOptions(work)
    )
    miner.uploader = Uploader(miner, harness.chain.connect_again())
    return miner


def committed_window(net, config) -> tuple[Miner, dict]:
    """A miner that trained WINDOW, committed it, and left its reveal queued (then is killed)."""
    miner = new_miner(net, config)
    residual_before = miner.residual
    miner.run_window(WINDOW, stop=None)
    jobs, _ = sealed_jobs(net[3])
    assert [j.window for j in jobs] == [WINDOW]
    return miner, {"job": jobs[0], "residual_before": residual_before}


def test_a_miners_train_and_reveal_records_are_written_through_their_models(net, config, tmp_path):
    harness = net[0]
    path = tmp_path / "metrics.jsonl"
    miner = new_miner(net, config, Metrics(path, role="miner", hotkey=net[1].hotkey.ss58_address, run_id="r"))
    miner.run_window(WINDOW, stop=None)
    harness.advance(commit_deadline(config.windows, WINDOW) + 1 - harness.local.block())
    result = miner.uploader.upload(miner.uploader.jobs.get())
    assert miner.metrics is not None
    miner.metrics.close()
    trained, revealed = read_metrics(path)
    assert (trained.window, revealed.window) == (WINDOW, WINDOW)
    assert isinstance(trained.record, TrainRecord) and isinstance(revealed.record, RevealRecord)
    assert trained.record.steps_trained == config.train.inner_steps and trained.record.behaviour == "honest"
    assert result is not None and revealed.record.uploaded_bytes == result.bytes_sent > 0
    assert not revealed.record.reveal_late


def test_a_restarted_miner_resumes_a_reveal_still_due_and_uploads_it_in_time(net, config):
    harness, _, store, work = net
    first, seen = committed_window(net, config)
    job = seen["job"]
    assert first.uploader.pending == 1

    restarted = new_miner(net, config)
    restarted.recover()
    assert restarted.uploader.pending == 1, "the committed window's reveal was not resumed"
    assert restarted.last_window == WINDOW
    assert residual_hash(restarted.residual) == job.residual_out_hash

    harness.advance(commit_deadline(config.windows, WINDOW) + 1 - harness.local.block())
    result = restarted.uploader.upload(restarted.uploader.jobs.get())
    assert result is not None and not result.late
    # the validator challenges every segment: one run from segment 0, whose start is the base, so the
    # reveal is the update and the trajectory reveal, and no state
    assert result.states == 0
    assert store.exists(blob_key(job_blob_sha(job)))
    assert store.exists(trajectory_key(restarted.rt.run_id, WINDOW, restarted.hotkey))
    for step in range(0, config.train.inner_steps + 1, config.train.segment_steps):
        assert not store.exists(state_key(restarted.rt.run_id, WINDOW, restarted.hotkey, step)), step
    # once the challenge is drawn, only what a reveal can need stays on disk: the base and the last state
    kept = sorted(int(p.stem) for p in job.states.glob("*.safetensors"))
    assert kept == [0, config.train.inner_steps], kept


def job_blob_sha(job) -> str:
    return hashlib.sha256(job.blob_path.read_bytes()).hexdigest()


def test_a_residual_committed_but_not_yet_saved_is_carried_on_after_a_restart(net, config):
    _, seen = committed_window(net, config)
    job = seen["job"]
    residual_file = net[3] / "codec_residual.safetensors"
    residual_file.unlink()  # killed after the chain commit, before the residual was saved

    restarted = new_miner(net, config)
    assert restarted.residual is None
    restarted.recover()
    assert restarted.residual is not None
    assert residual_hash(restarted.residual) == job.residual_out_hash
    assert residual_file.exists()


def test_after_the_reveal_deadline_a_job_is_dropped_and_unsealed_folders_are_removed(net, config):
    harness, _, store, work = net
    committed_window(net, config)
    unsealed = work / "reveals" / "w99"
    (unsealed / "states").mkdir(parents=True)
    harness.advance(reveal_deadline(config.windows, WINDOW) - harness.local.block())

    restarted = new_miner(net, config)
    restarted.recover()
    assert restarted.uploader.pending == 0
    assert not (work / "reveals" / f"w{WINDOW}").exists()
    assert not unsealed.exists()
    assert restarted.last_window == WINDOW


def test_a_job_whose_manifest_never_reached_the_chain_is_removed(net, config):
    _, seen = committed_window(net, config)
    job = seen["job"]
    (job.folder / JOB_FILE).write_text(
        (job.folder / JOB_FILE).read_text().replace(job.manifest_sha256, "0" * 64)
    )

    restarted = new_miner(net, config)
    restarted.recover()
    assert restarted.uploader.pending == 0
    assert not job.folder.exists()
    assert restarted.last_window == -1


@pytest.mark.parametrize("bandwidth", [250_000.0, None])
def test_the_link_check_says_when_the_store_is_too_slow_for_the_run(tmp_path, config, caplog, bandwidth):
    chain = LocalChain.create(tmp_path / "chain.db", netuid=1, block_time=0.05)
    harness = make_local_harness(tmp_path / "h")
    wallet = harness.new_wallet("miner")
    store = FileStore(tmp_path / "store", bandwidth_bytes_per_s=bandwidth)
    metrics = Metrics(tmp_path / "metrics.jsonl", role="miner", hotkey="5miner", run_id="r")
    miner = Miner(
        Seat(build_runtime(config), chain, wallet, store, store.url, metrics), MinerOptions(tmp_path / "m")
    )
    with caplog.at_level(logging.INFO, logger="distrai.miner"):
        verdict = miner.check_link()
    record = read_metrics(tmp_path / "metrics.jsonl")[-1].record
    assert isinstance(record, LinkRecord)
    assert record.link_margin == pytest.approx(verdict.margin)
    # 0.05 s blocks leave (46 - 20 - 1) x 0.05 = 1.25 s for a reveal of ~3 MB (one fp32 state of the
    # micro model and a sample): about 12 s at 0.25 MB/s
    if bandwidth is not None:
        assert not verdict.ok and verdict.margin < 0.2
        assert "a challenged window would be missed" in caplog.text
        assert any(r.levelno == logging.WARNING for r in caplog.records)
    else:
        # an unthrottled store's rate depends on the machine: the record and the log follow the verdict
        assert 0 < verdict.measured_rate < math.inf
        assert record.upload_rate_measured == pytest.approx(verdict.measured_rate)
        assert record.upload_rate_needed == pytest.approx(verdict.required_rate)
        level = logging.INFO if verdict.ok else logging.WARNING
        assert [r.levelno for r in caplog.records if "link check" in r.getMessage()] == [level]
    assert store.list("linkcheck/") == []


def test_reveals_past_their_retention_are_deleted_and_nothing_else(net, config):
    miner = new_miner(net, config)
    store, run_id, me = net[2], miner.rt.run_id, miner.hotkey
    other = "5" + "O" * 47
    kept = [
        state_key(run_id, WINDOW, me, 4),
        trajectory_key(run_id, WINDOW, me),
        state_key(run_id, WINDOW - 1, other, 4),
        f"runs/{run_id[:16]}/w{WINDOW - 1:08d}/manifests/{me}.json",
    ]
    swept = [state_key(run_id, WINDOW - 1, me, 4), state_key(run_id, WINDOW - 1, me, 8)]
    swept.append(trajectory_key(run_id, WINDOW - 1, me))
    for key in kept + swept:
        store.put(key, b"revealed")
    miner.uploader.sweep(WINDOW - 1)
    assert [key for key in kept + swept if store.exists(key)] == kept
    miner.uploader.sweep(-1)  # before the run's first window: nothing to do


class Said(logging.Handler):
    """The miner's log lines, and an event set when one holds `words`."""

    def __init__(self, words: str):
        super().__init__()
        self.words = words
        self.lines: list[str] = []
        self.seen = threading.Event()

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(record.getMessage())
        if self.words in record.getMessage():
            self.seen.set()


@contextlib.contextmanager
def listening(words: str):
    said = Said(words)
    logger = logging.getLogger("distrai.miner")
    logger.addHandler(said)
    try:
        yield said
    finally:
        logger.removeHandler(said)


def cut(store: FileStore) -> Path:
    """Make the store's root unreachable (ELOOP on every path); returns where it was moved."""
    away = store.root.with_name(store.root.name + ".away")
    store.root.rename(away)
    store.root.symlink_to(store.root)
    return away


def restore(store: FileStore, away: Path) -> None:
    store.root.unlink()
    away.rename(store.root)


def uploading(miner: Miner) -> tuple[threading.Thread, list]:
    results = []
    thread = threading.Thread(target=lambda: results.append(miner.uploader.upload(miner.uploader.jobs.get())))
    thread.start()
    return thread, results


def test_a_reveal_is_tried_again_through_a_store_outage_that_ends_before_its_deadline(net, config):
    harness, _, store, _ = net
    _, seen = committed_window(net, config)
    miner = new_miner(net, config)
    miner.recover()
    harness.advance(commit_deadline(config.windows, WINDOW) + 1 - harness.local.block())
    away = cut(store)
    with listening("out of reach") as said:
        thread, results = uploading(miner)
        assert said.seen.wait(60), said.lines
        restore(store, away)
        thread.join(60)
    assert results and results[0] is not None and not results[0].late, said.lines
    assert store.exists(blob_key(job_blob_sha(seen["job"])))
    outage = [line for line in said.lines if "out of reach" in line]
    assert len(outage) == 2, said.lines
    assert outage[0].startswith(f"the store {store.url} (window {WINDOW}'s reveal) is out of reach")
    assert "answered again after" in outage[1]


def test_a_reveal_cut_by_an_outage_under_way_at_its_deadline_is_tried_until_the_next_reveal_deadline(
    net, config
):
    harness, _, store, _ = net
    committed_window(net, config)
    miner = new_miner(net, config)
    miner.recover()
    harness.advance(commit_deadline(config.windows, WINDOW) + 1 - harness.local.block())
    cut(store)
    with listening("out of reach") as said:
        thread, results = uploading(miner)
        assert said.seen.wait(60), said.lines
        harness.advance(reveal_deadline(config.windows, WINDOW) + 1 - harness.local.block())
        thread.join(1.0)
        assert thread.is_alive(), "the reveal gave up at its deadline through an outage under way then"
        harness.advance(reveal_deadline(config.windows, WINDOW + 1) - harness.local.block())
        thread.join(60)
    assert results and results[0].late and results[0].bytes_sent == 0
    outage = [line for line in said.lines if "out of reach" in line]
    assert len(outage) == 2, said.lines
    assert "not tried any more" in outage[1]


def test_a_reveal_stops_trying_at_its_deadline_unless_the_outage_was_under_way_then(config):
    w = WINDOW
    deadline, next_deadline = reveal_deadline(config.windows, w), reveal_deadline(config.windows, w + 1)
    assert give_up_block(config.windows, w, deadline - 5) == next_deadline
    assert give_up_block(config.windows, w, deadline - 1) == next_deadline
    assert give_up_block(config.windows, w, deadline) == deadline
    assert give_up_block(config.windows, w, deadline + 3) == deadline


def test_a_commit_puts_its_manifest_through_a_store_outage_that_ends_in_time(net, config):
    harness, _, store, _ = net
    miner = new_miner(net, config)
    manifest_key_of = manifest_key(miner.rt.run_id, WINDOW, miner.hotkey)
    away = cut(store)
    with listening("out of reach") as said:
        results = []
        thread = threading.Thread(target=lambda: results.append(miner.put_manifest(WINDOW, b"{}")))
        thread.start()
        assert said.seen.wait(60), said.lines
        restore(store, away)
        thread.join(60)
    assert results == [True]
    assert store.get(manifest_key_of, 10) == b"{}"
    assert [line for line in said.lines if "out of reach" in line][1].startswith(
        f"the store {store.url} (window {WINDOW}'s manifest) answered again after"
    )


def test_a_miner_says_which_windows_it_skips_and_why(net, config):
    harness, _, _, _ = net
    miner = new_miner(net, config)
    with listening("skipped") as said:
        miner.say_skipped(WINDOW)
        miner.say_skipped(WINDOW + 2)
    assert said.lines == [
        f"window {WINDOW + 1}: skipped: at block {harness.local.block()}, too little of its train phase was "
        f"left for a segment and the commit (commit deadline: block {commit_deadline(config.windows, WINDOW + 1)})"
    ]


def test_a_restarted_miner_says_which_windows_after_its_last_commit_it_skips(net, config):
    committed_window(net, config)
    restarted = new_miner(net, config)
    restarted.recover()
    with listening("skipped") as said:
        restarted.say_skipped(WINDOW + 2)
    assert [line.split(":")[0] for line in said.lines] == [f"window {WINDOW + 1}"]


def test_a_reveal_queued_behind_one_that_tried_through_an_outage_still_tries_after_its_deadline(net, config):
    harness, _, store, _ = net
    first = new_miner(net, config)
    first.run_window(WINDOW, stop=None)
    harness.advance(window_start(config.windows, WINDOW + 1) - harness.local.block())
    first.run_window(WINDOW + 1, stop=None)
    miner = new_miner(net, config)
    miner.recover()
    assert miner.uploader.pending == 2
    away = cut(store)
    with listening(f"(window {WINDOW}'s reveal) is out of reach") as said:
        thread, _ = uploading(miner)
        assert said.seen.wait(60), said.lines
        harness.advance(reveal_deadline(config.windows, WINDOW + 1) - harness.local.block())
        thread.join(60)
    with listening(f"(window {WINDOW + 1}'s reveal) is out of reach") as said:
        thread, results = uploading(miner)  # its deadline passed while the one before it tried
        assert said.seen.wait(60), said.lines
        restore(store, away)
        thread.join(60)
    assert results[0].late and results[0].bytes_sent > 0, said.lines


# -- the states a window keeps, and a dropped one rebuilt (miners/kept_states.py, miners/rebuild.py) --


def kept_window(net, config, kept_states: int):
    """A miner that trained WINDOW keeping `kept_states` states, and its reveal job."""
    harness, wallet, store, work = net
    miner = new_miner(net, config)
    miner.options = MinerOptions(work, kept_states=kept_states)
    miner.run_window(WINDOW, stop=None)
    jobs, _ = sealed_jobs(work)
    return miner, jobs[0]


def committed_hashes(miner, store) -> dict[int, str]:
    """What the signed manifest on the store commits to, read as a validator reads it."""
    data = store.get(manifest_key(miner.rt.run_id, WINDOW, miner.hotkey), 1 << 24)
    document = open_document(data, max_bytes=1 << 24, is_registered=lambda _: True, signer=miner.hotkey)
    return {b.step: b.state_hash for b in parse_body(UpdateManifest, document.body).boundaries}


def test_a_dropped_state_is_rebuilt_to_the_hash_the_manifest_committed(net, config):
    _, _, store, _ = net
    miner, job = kept_window(net, config, kept_states=2)
    k, h = config.train.segment_steps, config.train.inner_steps
    on_disk = sorted(int(p.stem) for p in job.states.glob("*.safetensors"))
    assert on_disk == [0, h], on_disk  # 4 segments, 2 kept: the base and the last
    committed = committed_hashes(miner, store)
    assert sorted(committed) == list(range(0, h + 1, k))

    dropped = [s for s in committed if s not in on_disk]
    assert miner.uploader.rebuild_missing(job, dropped) == dropped
    for step in dropped:
        assert state_hash(load_state(job.state_path(step))) == committed[step], step


def test_a_rebuild_that_misses_the_committed_hash_leaves_the_state_out_and_says_why(net, config, caplog):
    miner, job = kept_window(net, config, kept_states=2)
    k = config.train.segment_steps
    record = read_record(job.states)
    wrong = record.model_copy(update={"hashes": {**record.hashes, 2 * k: "00" * 32}})
    (job.states / TRAINED_FILE).write_text(wrong.model_dump_json())
    with pytest.raises(RebuildError, match="does not hash to the committed one"):
        rebuild(miner.rt, miner.rt.replica(), WINDOW, job.states, 2 * k)
    assert not job.state_path(2 * k).exists(), "a state that is not the committed one stays off the disk"

    with caplog.at_level(logging.ERROR, logger="distrai.miner"):
        assert miner.uploader.rebuild_missing(job, [k, 2 * k]) == [k]
    assert f"the challenged state at step {2 * k} cannot be revealed" in caplog.text


def test_a_miner_keeping_every_state_keeps_every_state(net, config):
    _, job = kept_window(net, config, kept_states=0)
    k, h = config.train.segment_steps, config.train.inner_steps
    assert sorted(int(p.stem) for p in job.states.glob("*.safetensors")) == list(range(0, h + 1, k))
