"""A subtensor node that stops answering: the adapter's reads wait through it (distrai/chain/subtensor.py).

The node is the in-memory substrate behind the SDK's own code, made to refuse its reads for a while
with the error the SDK raises once its reconnects and fallback endpoints are spent
(`bt.RpcConnectionError`). Outages are counted in refused reads, not seconds, so nothing here waits
on the clock except the patience test, which is about the clock."""

from __future__ import annotations

import logging
import threading
import time
from pathlib import Path

import bittensor as bt
import pytest
from support.memory_substrate import MemorySubstrate
from support.subtensor_harness import make_subtensor_harness

from distrai.chain import subtensor
from distrai.chain.base import ChainError
from distrai.chain.local import LocalChain
from distrai.chain.subtensor import READ_PATIENCE_S, SubtensorChain
from distrai.node.build import open_chain
from distrai.node.seat import Seat
from distrai.node.settings import ChainSettings
from distrai.node.stopping import chain_lost
from distrai.protocol.run import load_run_config
from distrai.protocol.runtime import build_runtime
from distrai.protocol.windows import commit_deadline, committed_in_time, window_start
from distrai.store import FileStore
from distrai.store.outage import OutageLog
from miners.miner import Miner, MinerOptions
from miners.uploader import Uploader

WINDOW = 3
REFUSAL = "could not connect to any endpoint: [Errno 111] Connection refused"


class UnreachableNode(MemorySubstrate):
    """Answers until `go_down`, then refuses that many reads (None: every read until `reachable`)."""

    def __init__(self, local: LocalChain):
        super().__init__(local)
        self.left: int | None = 0
        self.refused = 0
        self.first_refusal = threading.Event()
        self._down = False

    def go_down(self, refusals: int | None) -> None:
        self.left, self._down = refusals, True

    def reachable(self) -> None:
        self._down = False

    def _refuse(self) -> None:
        if not self._down or self.left == 0:
            return
        if self.left is not None:
            self.left -= 1
        self.refused += 1
        self.first_refusal.set()
        raise bt.RpcConnectionError(REFUSAL)

    async def block_number(self) -> int:
        self._refuse()
        return await super().block_number()

    async def block_hash(self, block: int | None = None) -> str:
        self._refuse()
        return await super().block_hash(block)

    async def query(self, *args, **kwargs):
        self._refuse()
        return await super().query(*args, **kwargs)

    async def query_map(self, *args, **kwargs):
        self._refuse()
        return await super().query_map(*args, **kwargs)

    async def runtime_call(self, *args, **kwargs):
        self._refuse()
        return await super().runtime_call(*args, **kwargs)


@pytest.fixture
def harness(tmp_path, monkeypatch):
    monkeypatch.setattr(subtensor, "RETRY_PAUSE_S", 0.01)
    h = make_subtensor_harness(tmp_path)
    miner = h.new_wallet("miner")
    h.chain.register(miner)
    h.chain.commit(miner, "s3://bucket/miner")
    h.advance(3)
    return h


def outage_log() -> OutageLog:
    return OutageLog(logging.getLogger("distrai.chain"))


def outage_lines(caplog) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == "distrai.chain"]


def test_a_read_waits_through_an_outage_and_logs_its_start_and_end_once(harness, caplog):
    node = UnreachableNode(harness.local)
    chain = SubtensorChain("local", netuid=1, substrate=node, patience_s=3600.0, outages=outage_log())
    caplog.set_level(logging.WARNING, logger="distrai.chain")
    chain.block()
    node.go_down(12)

    assert chain.block() == harness.local.block()
    assert node.refused == 12
    lines = outage_lines(caplog)
    assert len(lines) == 2, lines
    assert "out of reach" in lines[0] and "Connection refused" in lines[0]
    assert "answered again after" in lines[1] and "(12 failed tries)" in lines[1]

    node.go_down(3)
    assert chain.commitments() == harness.local.commitments()
    assert chain.metagraph().hotkeys == harness.local.metagraph().hotkeys
    assert node.refused == 15 and len(outage_lines(caplog)) == 4


def test_a_pinned_read_waits_too_and_a_refusal_that_is_not_an_outage_is_not_retried(harness):
    node = UnreachableNode(harness.local)
    chain = SubtensorChain("local", netuid=1, substrate=node, patience_s=3600.0, outages=outage_log())
    head = chain.block()
    node.go_down(4)
    assert chain.registrations(head - 1) == harness.local.registrations(head - 1)
    assert node.refused == 4

    lite = MemorySubstrate(harness.local, state_pruning=1)
    pruned = SubtensorChain("local", netuid=1, substrate=lite, patience_s=3600.0, outages=outage_log())
    with pytest.raises(ChainError) as old:
        pruned.commitments(head - 3)
    assert old.value.reason == "BlockUnavailable"


def test_a_node_away_longer_than_the_patience_fails_the_read_as_before(harness, caplog):
    node = UnreachableNode(harness.local)
    chain = SubtensorChain("local", netuid=1, substrate=node, patience_s=0.2, outages=outage_log())
    chain.block()
    node.go_down(None)
    caplog.set_level(logging.WARNING, logger="distrai.chain")
    started = time.monotonic()
    with pytest.raises(ChainError) as gone:
        chain.block()
    assert gone.value.reason == "ConnectionFailed" and "Connection refused" in gone.value.detail
    assert time.monotonic() - started >= 0.2
    lines = outage_lines(caplog)
    assert len(lines) == 2 and "not tried any more (a read waited its 0 s)" in lines[1], lines

    node.reachable()
    assert chain.block() == harness.local.block(), "the next read reaches the node again"


def test_the_nodes_stop_signal_ends_a_read_waiting_through_an_outage(harness, caplog):
    node = UnreachableNode(harness.local)
    stop = threading.Event()
    chain = SubtensorChain(
        "local", netuid=1, substrate=node, stop=stop, patience_s=3600.0, outages=outage_log()
    )
    assert not chain.connect_again().reached
    chain.block()
    again = chain.connect_again()
    assert (again.stop, again.patience_s, again.outages, again.reached) == (stop, 3600.0, chain.outages, True)
    node.go_down(None)
    caplog.set_level(logging.WARNING, logger="distrai.chain")
    failed: list[ChainError] = []

    def read() -> None:
        try:
            chain.block()
        except ChainError as exc:
            failed.append(exc)

    reader = threading.Thread(target=read)
    reader.start()
    assert node.first_refusal.wait(30), "the read never reached the node"
    stop.set()
    reader.join(30)
    assert not reader.is_alive(), "the read went on waiting after the stop signal"
    assert [e.reason for e in failed] == ["ConnectionFailed"]
    assert "not tried any more (the node is stopping)" in outage_lines(caplog)[-1]


def test_without_patience_a_read_fails_at_once_and_says_nothing(harness, caplog):
    """One-shot commands and the dashboard: the failure is theirs to report."""
    node = UnreachableNode(harness.local)
    chain = SubtensorChain("local", netuid=1, substrate=node)
    chain.block()
    node.go_down(None)
    caplog.set_level(logging.WARNING, logger="distrai.chain")
    with pytest.raises(ChainError) as failed:
        chain.block()
    assert failed.value.reason == "ConnectionFailed" and node.refused == 1
    assert outage_lines(caplog) == []


def test_a_node_that_never_reached_its_chain_fails_at_once(harness, caplog):
    """A wrong `--subtensor.network` at start-up: the node says it cannot start, not ten minutes later."""
    node = UnreachableNode(harness.local)
    node.go_down(None)
    chain = SubtensorChain("local", netuid=1, substrate=node, patience_s=3600.0, outages=outage_log())
    caplog.set_level(logging.WARNING, logger="distrai.chain")
    with pytest.raises(ChainError) as failed:
        chain.hyperparameters()
    assert failed.value.reason == "ConnectionFailed" and node.refused == 1
    assert outage_lines(caplog) == []


class DroppedSubmission(MemorySubstrate):
    """Answers every read; the connection fails under each extrinsic sent."""

    sends = 0

    async def submit(self, call, keypair, **options):
        self.sends += 1
        raise bt.RpcConnectionError(REFUSAL)


def test_a_write_whose_connection_failed_is_not_sent_again(harness):
    """It may have landed: the caller (a commit, a weight set) decides what to do next."""
    node = DroppedSubmission(harness.local)
    chain = SubtensorChain("local", netuid=1, substrate=node, patience_s=3600.0, outages=outage_log())
    miner = harness.new_wallet("miner")
    with pytest.raises(ChainError) as dropped:
        chain.commit(miner, "s3://bucket/again")
    assert dropped.value.reason == "ConnectionFailed"
    assert node.sends == 1


def test_a_node_opens_a_patient_chain_and_a_one_shot_command_does_not():
    args = ChainSettings(subtensor_network="ws://127.0.0.1:1", netuid=3)
    stop = threading.Event()
    node = open_chain(args, stop)
    assert isinstance(node, SubtensorChain)
    assert (node.patience_s, node.stop, node.netuid) == (READ_PATIENCE_S, stop, 3)
    assert isinstance(node.outages, OutageLog)
    command = open_chain(args)
    assert isinstance(command, SubtensorChain) and (command.patience_s, command.outages) == (0.0, None)
    with pytest.raises(ValueError, match="needs an outage log"):
        SubtensorChain("ws://127.0.0.1:1", 1, patience_s=1.0)


def test_a_miner_trains_commits_and_reveals_its_window_through_an_outage_of_its_chain_node(
    tmp_path, caplog, monkeypatch
):
    """The node's own path: `Miner.run_window` and its uploader, on the adapter, the node refusing
    the miner's reads for a while as the window starts and again as its reveal begins."""
    monkeypatch.setattr(subtensor, "RETRY_PAUSE_S", 0.01)
    config = load_run_config(Path(__file__).parent / "support" / "adversary-localnet.toml")
    h = make_subtensor_harness(tmp_path)
    validator, wallet = h.new_wallet("validator"), h.new_wallet("miner")
    h.chain.register(validator)
    h.add_stake(validator, 1000.0)
    h.chain.register(wallet)
    h.advance(h.local.hyperparameters().tempo + 2)
    h.advance(window_start(config.windows, WINDOW) - h.local.block())
    node = UnreachableNode(h.local)
    chain = SubtensorChain("local", netuid=1, substrate=node, patience_s=3600.0, outages=outage_log())
    chain.block()
    node.go_down(15)
    store = FileStore(tmp_path / "store")
    miner = Miner(
        Seat(build_runtime(config), chain, wallet, store, store.url), MinerOptions(tmp_path / "miner")
    )
    miner.uploader = Uploader(miner, chain.connect_again())
    caplog.set_level(logging.WARNING, logger="distrai.chain")

    miner.run_window(WINDOW, stop=None)
    assert node.refused == 15
    committed = h.local.commitment(wallet.hotkey.ss58_address)
    assert committed is not None and committed_in_time(config.windows, WINDOW, committed.block)

    node.go_down(10)
    h.advance(commit_deadline(config.windows, WINDOW) + 1 - h.local.block())
    result = miner.uploader.upload(miner.uploader.jobs.get())
    assert result is not None and not result.late
    assert node.refused == 25
    lines = outage_lines(caplog)
    assert len(lines) == 4 and sum("answered again after" in line for line in lines) == 2, lines


def test_a_node_stopped_in_an_outage_exits_cleanly_and_one_past_its_patience_says_why(tmp_path, capsys):
    """The loop of a node (here `Miner.run`) ends on the `ChainError` of a read that gave up; the
    neurons turn it into their exit status with `chain_lost`: 0 for a stop signal, 1 and one line
    naming the chain's error when the read waited its patience out."""
    config = load_run_config(Path(__file__).parent / "support" / "adversary-localnet.toml")
    h = make_subtensor_harness(tmp_path)
    wallet = h.new_wallet("miner")
    h.chain.register(wallet)
    h.advance(3)
    store = FileStore(tmp_path / "store")
    runtime = build_runtime(config)
    codes: list[int] = []

    def miner_on(chain: SubtensorChain, stop: threading.Event) -> None:
        miner = Miner(Seat(runtime, chain, wallet, store, store.url), MinerOptions(tmp_path / "miner"))
        try:
            miner.run(stop, max_windows=1)
        except ChainError as exc:
            codes.append(chain_lost("miner", exc, stop))

    node, stop = UnreachableNode(h.local), threading.Event()
    chain = SubtensorChain(
        "local", netuid=1, substrate=node, stop=stop, patience_s=3600.0, outages=outage_log()
    )
    chain.block()
    node.go_down(None)
    running = threading.Thread(target=miner_on, args=(chain, stop))
    running.start()
    assert node.first_refusal.wait(60), "the miner never read its chain"
    stop.set()
    running.join(60)
    assert not running.is_alive() and codes == [0]
    assert capsys.readouterr().err == ""

    node, stop = UnreachableNode(h.local), threading.Event()
    chain = SubtensorChain(
        "local", netuid=1, substrate=node, stop=stop, patience_s=0.05, outages=outage_log()
    )
    chain.block()
    node.go_down(None)
    miner_on(chain, stop)
    assert codes == [0, 1]
    said = capsys.readouterr().err.splitlines()
    assert said == [f"miner stopped: its chain could not be read: ConnectionFailed: {REFUSAL}"], said
