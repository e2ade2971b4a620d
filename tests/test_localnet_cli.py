"""`distrai localnet` as a newcomer runs it, stopped with Ctrl-C: every process it started exits."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time


def processes_mentioning(text: str) -> list[int]:
    pids = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/cmdline", "rb") as f:
                if text.encode() in f.read():
                    pids.append(int(entry))
        except OSError:
            continue
    return pids


def test_ctrl_c_stops_every_process(tmp_path):
    work = tmp_path / "net"
    env = {**os.environ, "COLUMNS": "160"}
    cli = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "distrai.cli",
            "localnet",
            "--miners",
            "1",
            "--validators",
            "1",
            "--windows",
            "50",
            "--work",
            str(work),
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        env=env,
        text=True,
    )
    deadline = time.monotonic() + 180
    while time.monotonic() < deadline and len(processes_mentioning(str(work / "wallets"))) < 2:
        time.sleep(0.5)
    neurons = processes_mentioning(str(work / "wallets"))
    assert len(neurons) == 2, cli.stdout.read() if cli.poll() is not None else "neurons did not start"
    time.sleep(15)
    cli.send_signal(signal.SIGINT)
    out, _ = cli.communicate(timeout=120)
    assert "stopping every process" in out
    assert processes_mentioning(str(work / "wallets")) == []
    assert (work / "logs" / "miner0.log").exists() and (work / "logs" / "validator0.log").exists()
