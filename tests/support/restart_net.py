"""The whole subnet on one machine, with a validator killed and restarted mid-run, run once per test
session while other tests do (`support.background`); tests/test_localnet_e2e.py reads it.

The owner first prepares the run's data from local files with `distrai data prepare` into a data
store of its own, which the shipped CPU run config then names, with the micro model in place of tiny.
3 honest miners, 1 idle miner and 2 validators run as separate processes through the real entry
points, on the embedded chain and a file store, for `WINDOWS` windows at 1 s per block (the pace the
config's offsets assume). On `tiny` a validator checked a window in 6-12 s of the validate phase's
12 s alone, and beside the suite both validators missed every aggregate deadline once (the global
model never moved: the project's CI run of c6368b7); on `micro`, beside three busy loops on the 2
cores, 4-7 s.

A driver thread (`Restarter`) waits for validator1's first scored window, kills it, copies the state
it saved to `BEFORE` in the network's folder and starts it again with the same command and
environment; it writes what happened, or why it could not, to `DRIVER_LOG`."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
import threading
import time
from collections.abc import Mapping
from pathlib import Path

from distrai.data.corpus import offline_documents
from distrai.localnet.network import Localnet, LocalnetOptions
from distrai.node.metrics import read_metrics
from distrai.protocol.run import shipped_config_path
from support.background import start
from support.tiny_models import with_micro_model, write_corpus_files

REPO = Path(__file__).resolve().parents[2]
WINDOWS = 4
"""A window's score is paid a window later (cpu-localnet's maturity_windows = 1), so the first weights
that pay the honest miners are window 2's; window 3 leaves an epoch's room for them to be emitted on a
busy machine (in a fresh-clone CI run of 3 windows, validator0 had set none by window 2 and nobody had
been paid)."""
RESTARTED = "validator1"
BEFORE = "validator1-before.json"
"""validator1's saved state just before the kill"""
DRIVER_LOG = "driver.log"
INNER_STEPS = 30
"""The most a window trains: the shipped config's 90 buys progress, this network tests the protocol
(and still halves the held-out loss in its windows) while other tests run beside it."""


def prepared_run_config(folder: Path, env: Mapping[str, str]) -> Path:
    """`distrai data prepare` on local files, then the shipped CPU run config naming what it printed,
    with `INNER_STEPS` steps a window and the micro model (`with_micro_model`)."""
    files = write_corpus_files(folder / "text", offline_documents(1000, seed=5))
    data_store = f"file://{folder / 'data'}"
    argv = ["data", "prepare", "--files", str(files["json"]), "--tokenizer", "byte", "--shard-tokens", "2048"]
    command = [
        sys.executable,
        "-m",
        "distrai.cli",
        *argv,
        "--heldout-fraction",
        "0.1",
        "--store.url",
        data_store,
    ]
    out = subprocess.run(command, cwd=REPO, env=env, capture_output=True, text=True, timeout=300)
    if out.returncode != 0:
        raise RuntimeError(f"distrai data prepare failed on the test corpus: {out.stderr[-2000:]}")
    shipped = shipped_config_path("cpu-localnet").read_text()
    builtin = re.search(r'^manifest = "[0-9a-f]{64}"', shipped, re.MULTILINE).group(0)
    ours = f'manifest = "{out.stdout.split()[-1]}"\nstore = "{data_store}"'
    steps = re.search(r"^inner_steps = 90 ", shipped, re.MULTILINE).group(0)
    path = folder / "run.toml"
    path.write_text(
        with_micro_model(shipped.replace(builtin, ours).replace(steps, f"inner_steps = {INNER_STEPS} "))
    )
    return path


def start_restart_net(work: Path, env: Mapping[str, str]) -> Localnet:
    net = start(
        Localnet(
            LocalnetOptions(
                work=work,
                miners=4,
                validators=2,
                windows=WINDOWS,
                block_time=1.0,
                idle_miners=1,
                run_config=prepared_run_config(work.parent, env),
                warm_start=True,
            )
        ),
        env,
    )
    Restarter(net).start()
    return net


class Restarter(threading.Thread):
    """Kills `RESTARTED` once it has scored a window, and starts it again."""

    def __init__(self, net: Localnet):
        super().__init__(name="restart-net driver", daemon=True)
        self.net = net

    def run(self) -> None:
        log = self.net.work / DRIVER_LOG
        node = self.net.neuron(RESTARTED)
        metrics = node.work_dir / "metrics.jsonl"
        while not (metrics.exists() and read_metrics(metrics)):
            if not any(n.running() for n in self.net.neurons):
                log.write_text(f"{RESTARTED} scored no window before the network ended\n")
                return
            time.sleep(0.3)
        node.kill()  # then its saved state is the one it restarts from
        shutil.copyfile(node.work_dir / "validator_state.json", self.net.work / BEFORE)
        self.net.restart(RESTARTED)
        log.write_text(f"{RESTARTED} killed and restarted at block {self.net.chain.block()}\n")
