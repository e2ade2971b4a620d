"""The harness of bench/chaos.py: runs the local network, kills and restarts its nodes, and puts
the outages in place."""

from __future__ import annotations

import json
import os
import re
import signal
import sqlite3
import subprocess
import time
from collections.abc import Callable, Mapping
from pathlib import Path

from _chaos_plan import S3_BUCKET, ChaosOptions, Planned, phase_label, plan_for_seed
from _chaos_records import Crash, Disruption, Kill, log_records
from rich.markup import escape

from distrai.localnet.network import Localnet, LocalnetOptions
from distrai.localnet.s3server import (
    FAKE_ACCESS_KEY_ID,
    FAKE_SECRET_ACCESS_KEY,
    free_port,
    make_bucket,
    pause,
    resume,
    start_server,
    stop_server,
)
from distrai.localnet.tcp_gate import TcpGate
from distrai.node.wallets import open_wallet
from distrai.protocol.run import run_id
from distrai.protocol.windows import activities, commit_deadline, reveal_deadline, window_end, window_of
from distrai.store import Store
from validators.validator_state import ValidatorState
from validators.validator_state import load_state as load_validator_state

LOCK_SAMPLE_S = 0.25
"""How often a chain stall samples which nodes wait on its lock."""


def sqlite_waiting(pid: int) -> bool:
    """Whether a thread of `pid` sleeps in a relative CLOCK_REALTIME nanosleep: sqlite's busy
    handler (usleep) while another connection holds the lock. Python's own sleeps use
    CLOCK_MONOTONIC with TIMER_ABSTIME, and waits on events are futexes, so neither counts."""
    try:
        tasks = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return False
    for tid in tasks:
        try:
            call = Path(f"/proc/{pid}/task/{tid}/syscall").read_text().split()
        except OSError:
            continue
        if call[:3] == ["230", "0x0", "0x0"] or call[:1] == ["35"]:
            return True
    return False


class Harness:
    def __init__(
        self,
        options: ChaosOptions,
        say: Callable[[str], None] = print,
        base_env: Mapping[str, str] | None = None,
    ):
        self.options = options
        self.say = say
        self.base_env = base_env
        """the environment the nodes start from (this process's when None)"""
        self.s3_gate = TcpGate(free_port(), free_port()) if options.on_s3 else None
        """the TCP gate of the run's S3 server (`start_s3`), which holds the nodes' store: the nodes
        reach the server through it; None: a file store"""
        self.s3_endpoint = None if self.s3_gate is None else f"http://127.0.0.1:{self.s3_gate.port}"
        self.s3_server: subprocess.Popen[bytes] | None = None
        self.net = Localnet(
            LocalnetOptions(
                work=options.work,
                miners=options.miners,
                validators=options.validators,
                windows=options.windows,
                block_time=options.block_time,
                warm_start=options.warm_start,
                run_config=options.run_config,
                store_url=(
                    None
                    if self.s3_endpoint is None
                    else f"s3://{S3_BUCKET}/net?endpoint={self.s3_endpoint}&path_style=true"
                ),
                store_credentials=(
                    None if self.s3_endpoint is None else (FAKE_ACCESS_KEY_ID, FAKE_SECRET_ACCESS_KEY)
                ),
            )
        )
        self.cfg = self.net.config.windows
        self.run_id = run_id(self.net.config)
        self.kills: list[Kill] = []
        self.disruptions: list[Disruption] = []
        self.crashes: list[Crash] = []
        self.problems: list[str] = []
        """what went wrong with the run itself (a timeout, a node that would not stop)"""
        self.started_log: dict[str, int] = {}
        self.restarted: set[str] = set()
        self.finished: set[str] = set()
        self.skipped: list[str] = []
        """planned kills that found no node of their role running"""
        self.finished_early: dict[str, int] = {}
        """node → block at which it exited 0 by itself before the run's windows were done"""
        self.stopped_by_harness: list[str] = []
        self.started_at = 0.0
        self._hotkeys: dict[str, str] = {}

    # -- helpers --------------------------------------------------------------------------------

    @property
    def chain(self):
        return self.net.chain

    def store(self) -> Store:
        """The nodes' store, opened to read (a file store is not swept of its temp files)."""
        return self.net.open_store(create=False)

    def hotkey(self, name: str) -> str:
        if name not in self._hotkeys:
            self._hotkeys[name] = open_wallet(name, "default", str(self.net.wallet_path)).hotkey.ss58_address
        return self._hotkeys[name]

    def state_path(self, name: str) -> Path:
        return self.net.neuron(name).work_dir / "validator_state.json"

    def saved_state(self, name: str) -> ValidatorState:
        return load_validator_state(self.state_path(name), self.run_id)

    def elapsed(self) -> float:
        return time.monotonic() - self.started_at

    def block_time_of(self, block: float) -> float:
        whole = int(block)
        return self.chain.block_timestamp(whole) + (block - whole) * self.options.block_time

    @property
    def first_window(self) -> int:
        """The miners' first window: they skip the current one when too little of it is left."""
        return window_of(self.cfg, self.net.started_block) + 1

    @property
    def last_miner_window(self) -> int:
        return self.first_window + self.options.windows - 1

    @property
    def last_validated_window(self) -> int:
        """Validators start checking at the window they start in, so their last is one earlier."""
        return window_of(self.cfg, self.net.started_block) + self.options.windows - 1

    # -- the run --------------------------------------------------------------------------------

    def run(self, progress: Callable[[int, int], None] | None = None) -> None:
        net = self.net
        if self.s3_endpoint is not None:
            self.start_s3()
        net.setup()
        events = plan_for_seed(
            self.cfg, self.options, {n.name: n.role for n in net.neurons}, self.first_window
        )
        net.start(self.base_env)
        self.started_at = time.monotonic()
        end_block = reveal_deadline(self.cfg, self.last_miner_window) + 2
        timeout = self.options.timeout_s or 180 + (self.options.windows + 4) * (
            self.cfg.blocks_per_window * self.options.block_time
        )
        tick = (lambda: progress(self.chain.block(), end_block)) if progress else (lambda: None)
        self.say(
            f"{len(net.neurons)} processes started in {net.work}; "
            f"{sum(e.kind == 'kill' for e in events)} kills planned, windows {self.first_window}–{self.last_miner_window}"
        )
        for event in events:
            self.wait_until(self.block_time_of(event.block), tick)
            if event.kind == "kill":
                self.kill(event)
            elif event.kind == "store outage":
                self.store_outage(event, tick)
            elif event.kind == "S3 server paused":
                self.s3_pause(event, tick)
            else:
                self.chain_stall(event, tick)
        self.finish(timeout, tick)

    def start_s3(self) -> None:
        """Start the run's S3 server at `s3_endpoint` (its log beside the network's folder) and make
        the nodes' bucket on it."""
        assert self.s3_gate is not None, "only a run with an s3 outage has an S3 server"
        log = self.net.work.parent / f"{self.net.work.name}-s3server.log"
        log.parent.mkdir(parents=True, exist_ok=True)
        server_url, self.s3_server = start_server(log, self.s3_gate.upstream_port)
        self.s3_gate.open()
        make_bucket(self.s3_endpoint, S3_BUCKET)
        self.say(f"S3 server (moto) at {server_url}, reached through {self.s3_endpoint}; its log in {log}")

    def stop_s3(self) -> None:
        """End the run's S3 server, if it started (once the checks have read the store)."""
        if self.s3_gate is not None:
            self.s3_gate.shut()
        if self.s3_server is not None:
            stop_server(self.s3_server)
            self.s3_server = None

    def wait_until(self, when: float, tick: Callable[[], None]) -> None:
        while time.time() < when:
            self.watch()
            tick()
            time.sleep(min(0.25, max(0.0, when - time.time())))

    def watch(self) -> None:
        """Notice a process that ended without being killed: exit 0 is a finished node; anything
        else is a crash, recorded with the traceback it left in its log and restarted so the run
        goes on."""
        for neuron in self.net.neurons:
            if neuron.process is None or neuron.running() or neuron.name in self.finished:
                continue
            code = neuron.process.returncode
            if code == 0:
                self.finished.add(neuron.name)
                block = self.chain.block()
                early = (
                    self.saved_state(neuron.name).window < self.last_validated_window
                    if neuron.role == "validator"
                    else block < window_end(self.cfg, self.last_miner_window)
                )
                if early:
                    self.finished_early[neuron.name] = block
                self.say(f"{neuron.name} finished its windows (exit 0) at block {block}")
                continue
            records = log_records(neuron.log_path, self.started_log.get(neuron.name, 0))
            # a traceback is a RAW record "Traceback … File …" (its indented lines joined) and the
            # RAW record of the exception after it
            raw = [r.message for r in records if r.level == "RAW"]
            last = max((i for i, line in enumerate(raw) if line.startswith("Traceback")), default=None)
            trace = raw[last:] if last is not None else raw[-2:]
            frames = [
                f"{Path(f).name}:{line} {func}"
                for f, line, func in re.findall(r'File "([^"]+)", line (\d+), in (\S+)', " ".join(trace))
            ]
            error = trace[-1] if trace else "no traceback in the log"
            self.crashes.append(Crash(neuron.name, code, self.chain.block(), time.time(), error, frames[-5:]))
            self.say(f"[red]{neuron.name} crashed (exit {code}): {escape(error)}; restarting it[/]")
            self.restarted.add(neuron.name)
            self.start(neuron.name)

    def start(self, name: str) -> None:
        """(Re)start a node with its command (`Localnet.restart`), noting where its log goes on."""
        neuron = self.net.neuron(name)
        self.started_log[name] = neuron.log_path.stat().st_size if neuron.log_path.exists() else 0
        self.net.restart(name)

    def kill(self, event: Planned) -> None:
        neuron = self.net.neuron(event.node)
        if not neuron.running():
            alive = [n for n in self.net.neurons if n.role == neuron.role and n.running()]
            if not alive:
                self.skipped.append(
                    f"{event.kind} of {event.node} at block {int(event.block)}: no {neuron.role} running"
                )
                self.say(f"[yellow]kill skipped: no {neuron.role} running at block {self.chain.block()}[/]")
                return
            neuron = alive[0]
        block = self.chain.block()
        under_way = activities(self.cfg, block)
        doing = self.doing(neuron.name)
        in_flight = self.sealed_jobs(neuron.name) if neuron.role == "miner" else []
        before = self.saved_state(neuron.name).model_dump() if neuron.role == "validator" else None
        wall = time.time()
        neuron.kill()
        after = self.saved_state(neuron.name).model_dump() if neuron.role == "validator" else None
        self.start(neuron.name)
        offset = self.started_log[neuron.name]
        self.restarted.add(neuron.name)
        self.finished.discard(neuron.name)
        kill = Kill(
            index=len(self.kills) + 1,
            node=neuron.name,
            role=neuron.role,
            aimed_at=event.phase,
            block=block,
            seconds=self.elapsed(),
            wall=wall,
            activities=", ".join(f"w{w} {p.value}" for w, p in under_way),
            phase=phase_label(under_way),
            doing=doing,
            log_offset=offset,
            in_flight=in_flight,
            state_before=before,
            state_after=after,
        )
        self.kills.append(kill)
        self.say(
            f"kill {kill.index}: {kill.node} at block {block} ({kill.activities}); it was {escape(doing)}; restarted"
        )

    def sealed_jobs(self, name: str) -> list[int]:
        root = self.net.neuron(name).work_dir / "reveals"
        if not root.exists():
            return []
        return sorted(
            int(f.name[1:]) for f in root.iterdir() if (f / "job.json").exists() and f.name[1:].isdigit()
        )

    def doing(self, name: str) -> str:
        """What the node was busy with, from its work dir and its latest log record."""
        neuron = self.net.neuron(name)
        parts = []
        if neuron.role == "miner":
            root = neuron.work_dir / "reveals"
            for folder in sorted(root.iterdir()) if root.exists() else []:
                if (folder / "job.json").exists():
                    w = int(folder.name[1:]) if folder.name[1:].isdigit() else -1
                    due = commit_deadline(self.cfg, w) + 1
                    parts.append(
                        f"{'uploading' if self.chain.block() >= due else 'holding'} the reveal of {folder.name}"
                    )
                else:
                    states = len(list((folder / "states").glob("*.safetensors")))
                    parts.append(f"training {folder.name} ({states} boundaries saved)")
        else:
            state = self.saved_state(name)
            pending = []
            for path in sorted((neuron.work_dir / "pending").glob("w*.json")):
                try:
                    listed = json.loads(path.read_text()).get("inventory_block") is not None
                except (OSError, ValueError):
                    listed = False
                pending.append(f"{path.stem}{' listed' if listed else ''}")
            parts.append(f"state at w{state.window}")
            if pending:
                parts.append("pending " + ", ".join(pending))
        records = log_records(neuron.log_path)
        if records:
            parts.append(f'last log: "{records[-1].message[:90]}"')
        return "; ".join(parts) or "starting"

    def offsets(self) -> dict[str, int]:
        return {n.name: n.log_path.stat().st_size if n.log_path.exists() else 0 for n in self.net.neurons}

    def store_outage(self, event: Planned, tick: Callable[[], None]) -> None:
        if self.s3_gate is not None:
            self.outage(
                event,
                tick,
                self.s3_gate.shut,
                self.s3_gate.open,
                "the TCP gate to the S3 server shut: connections refused, open ones reset (the server ran on)",
                ("S3 endpoint unreachable", "S3 endpoint back"),
            )
            return
        store = self.net.work / "store"
        aside = self.net.work / "store.unreachable"

        def cut() -> None:
            os.rename(store, aside)
            os.symlink(store.name, store)

        def mend() -> None:
            os.unlink(store)
            os.rename(aside, store)

        self.outage(
            event,
            tick,
            cut,
            mend,
            "store dir moved aside, a self-referencing symlink in its place (ELOOP on every path)",
            ("store unreachable", "store back"),
        )

    def s3_pause(self, event: Planned, tick: Callable[[], None]) -> None:
        server = self.s3_server
        assert server is not None, "a run with an s3 outage starts its S3 server (`start_s3`)"
        self.outage(
            event,
            tick,
            lambda: pause(server),
            lambda: resume(server),
            "moto server stopped with SIGSTOP, then SIGCONT (requests hang: the kernel still accepts connections)",
            ("S3 server paused (SIGSTOP)", "S3 server continued (SIGCONT)"),
        )

    def outage(
        self,
        event: Planned,
        tick: Callable[[], None],
        cut: Callable[[], None],
        mend: Callable[[], None],
        how: str,
        said: tuple[str, str],
    ) -> None:
        """A store outage of `event.seconds`: `cut` it, wait (watching the nodes), `mend` it, and
        record it as a `Disruption` of `event.kind` made `how`; `said` begins the two lines told."""
        block, wall, offsets = self.chain.block(), time.time(), self.offsets()
        present = frozenset(n.name for n in self.net.neurons if n.running())
        cut()
        self.say(f"{said[0]} from block {block} for {event.seconds:.0f} s")
        try:
            self.wait_until(wall + event.seconds, tick)
        finally:
            mend()
        self.record(event, block, wall, how, offsets, present)
        self.say(f"{said[1]} at block {self.chain.block()}")

    def chain_stall(self, event: Planned, tick: Callable[[], None]) -> None:
        conn = sqlite3.connect(str(self.net.work / "chain.db"), timeout=60.0, isolation_level=None)
        asked = time.time()
        conn.execute("BEGIN EXCLUSIVE")
        wall, block, offsets = time.time(), self.chain.block(), self.offsets()
        present = frozenset(n.name for n in self.net.neurons if n.running())
        self.say(f"chain locked (BEGIN EXCLUSIVE) at block {block} for {event.seconds:.1f} s")
        waited: dict[str, float] = {n.name: 0.0 for n in self.net.neurons}
        step = LOCK_SAMPLE_S
        try:
            while time.time() < wall + event.seconds:
                self.watch()
                tick()
                for neuron in self.net.neurons:
                    if neuron.running() and sqlite_waiting(neuron.process.pid):
                        waited[neuron.name] += step
                time.sleep(step)
        finally:
            conn.execute("COMMIT")
            conn.close()
        blocked = ", ".join(f"{name} {s:.1f} s" for name, s in waited.items() if s > 0) or "none"
        self.say(f"chain released at block {self.chain.block()}; waiting on its lock: {blocked}")
        how = f"BEGIN EXCLUSIVE on chain.db for {event.seconds:.1f} s (lock taken after {wall - asked:.2f} s)"
        self.record(event, block, wall, how, offsets, present, waited)

    def record(
        self,
        event: Planned,
        block: int,
        wall: float,
        how: str,
        offsets: dict[str, int],
        present: frozenset[str],
        waited: dict[str, float] | None = None,
    ) -> None:
        """Keep the disruption `event` that began at `block` (`wall` seconds) and just ended, made
        `how`, with the nodes' log sizes and the nodes running when it began."""
        self.disruptions.append(
            Disruption(
                event.kind,
                event.phase,
                block,
                self.chain.block(),
                self.elapsed(),
                wall,
                time.time(),
                how,
                log_offsets=offsets,
                running=present,
                alive_after={n.name: n.running() or n.name in self.finished for n in self.net.neurons},
                waited=waited or {},
            )
        )

    def finish(self, timeout: float, tick: Callable[[], None]) -> None:
        """Wait for the run's windows to be done; nodes that were never restarted end by themselves,
        restarted ones (whose --max.windows counts from their restart) are stopped with SIGINT."""
        deadline = self.started_at + timeout
        end_block = reveal_deadline(self.cfg, self.last_miner_window) + 1
        while time.monotonic() < deadline:
            self.watch()
            tick()
            if self.run_done(end_block):
                break
            time.sleep(0.5)
        else:
            self.problems.append(f"the run did not finish its windows within {timeout:.0f} s")
        for neuron in self.net.neurons:
            if neuron.running():
                self.stopped_by_harness.append(neuron.name)
                neuron.process.send_signal(signal.SIGINT)
        for neuron in self.net.neurons:
            if neuron.running():
                try:
                    neuron.process.wait(60)
                except subprocess.TimeoutExpired:
                    self.problems.append(f"{neuron.name} did not stop within 60 s of SIGINT; killed")
                    neuron.kill()
        if self.stopped_by_harness:
            self.say(f"stopped with SIGINT after the run's windows: {', '.join(self.stopped_by_harness)}")

    def run_done(self, end_block: int) -> bool:
        for neuron in self.net.neurons:
            if not neuron.running():
                continue
            if neuron.name not in self.restarted:
                return False
            if (
                neuron.role == "validator"
                and self.saved_state(neuron.name).window < self.last_validated_window
            ):
                return False
            if neuron.role == "miner" and (
                self.chain.block() < end_block
                or any(w <= self.last_miner_window for w in self.sealed_jobs(neuron.name))
            ):
                return False
        return True
