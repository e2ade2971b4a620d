"""The `distrai localnet` command: set up, run with a live view, stop cleanly, print the results."""

from __future__ import annotations

import argparse
import signal
import sys
import time
from pathlib import Path

from rich.console import Console
from rich.live import Live

from distrai.localnet.network import Localnet, LocalnetOptions, Neuron
from distrai.localnet.preflight import DASHBOARD_HOST, Checked
from distrai.localnet.report import REPORT
from distrai.localnet.view import (
    accepted_note,
    live_table,
    miner_results,
    network_report,
    processed_windows,
    results_table,
    summarize,
    trained_windows,
)
from distrai.protocol.run import shipped_config_path

STARTUP_SECONDS = 120


def _interrupt(signum, frame) -> None:
    raise KeyboardInterrupt


def stop_on_signals() -> None:
    """SIGINT and SIGTERM stop the network as Ctrl-C does, whatever this process started with: a job
    a script starts in the background may start with SIGINT ignored, and `timeout` sends SIGTERM."""
    signal.signal(signal.SIGINT, signal.default_int_handler)
    signal.signal(signal.SIGTERM, _interrupt)


def run_localnet(args: argparse.Namespace, console: Console, checked: Checked | None) -> None:
    """The command, its flags and work folder `checked` by `preflight` (None with `--report`)."""
    if args.report:
        sys.stdout.write(network_report(Localnet.reopen(Path(args.report))))
        return
    assert checked is not None, "preflight checked every flag of a network to run"
    options = LocalnetOptions(
        work=Path(args.work),
        miners=args.miners,
        validators=args.validators,
        windows=args.windows,
        block_time=args.block_time,
        idle_miners=args.idle_miners,
        miner_ranks=args.miner_ranks,
        sharded_miner_ranks=args.sharded_miner_ranks,
        adversaries=checked.adversaries,
        leader_adversaries=checked.leader_adversaries,
        run_config=Path(args.run_config) if args.run_config else shipped_config_path("cpu-localnet"),
        device=args.device,
        data_files=tuple(args.data_files),
    )
    stop_on_signals()
    net = Localnet(options)
    console.print(f"setting up in {net.work}: {options.miners} miners, {options.validators} validators")
    net.setup()
    window_seconds = net.config.windows.blocks_per_window * options.block_time
    timeout = STARTUP_SECONDS + (options.windows + 2) * window_seconds
    net.start()
    console.print(f"started {len(net.neurons)} processes; logs in {net.work / 'logs'}; Ctrl-C stops them all")
    dashboard = start_dashboard(net, args.dashboard_port) if args.dashboard else None
    if dashboard is not None:
        console.print(f"dashboard: {dashboard_url(args.dashboard_port)} (its log: {dashboard.log_path})")
    try:
        if watch(net, options, console, timeout) and dashboard is not None:
            keep_serving(dashboard, args.dashboard_port, console)
    finally:
        if dashboard is not None:
            dashboard.stop()


def watch(net: Localnet, options: LocalnetOptions, console: Console, timeout: float) -> bool:
    """The live table until the network ends, then the results; False when stopped with Ctrl-C."""
    try:
        with Live(live_table(net), console=console, refresh_per_second=2) as live:
            finished = net.wait(timeout, poll=lambda: live.update(live_table(net)))
    except KeyboardInterrupt:
        console.print("stopping every process…")
        return False
    finally:
        net.stop()
    assert net.chain is not None, "the localnet made or opened its chain"
    stopped = net.chain.metagraph()  # at once: the embedded chain goes on paying on the last weights
    console.print()
    console.print(f"the network stopped at block {stopped.block}")
    if not finished:
        console.print(
            f"[yellow]the network did not finish {options.windows} windows in {timeout:.0f}s; stopped it[/]"
        )
    windows = processed_windows(net)
    if not windows:
        console.print("no window was validated; see the logs")
        return True
    note = accepted_note(windows, trained_windows(net), options.windows)
    console.print(results_table(miner_results(net, windows, stopped), stopped.block, note))
    losses = summarize(net, windows).losses
    console.print(
        f"held-out loss of the global model: {losses[0]:.3f} at window {windows[0]} → {losses[-1]:.3f} after "
        f"window {windows[-1]}"
    )
    network_report(net)
    console.print(
        f"the run in numbers: {net.work / REPORT} (again with `distrai localnet --report {net.work}`)"
    )
    return True


def dashboard_url(port: int) -> str:
    return f"http://{DASHBOARD_HOST}:{port}/"


def start_dashboard(net: Localnet, port: int) -> Neuron:
    """`distrai dashboard` over the network's chain, store, nodes and wallets, as its own process."""
    args = [
        "-m", "distrai.cli", "dashboard", "--host", DASHBOARD_HOST, "--port", str(port),
        "--run.config", str(net.run_config), "--netuid", str(net.config.netuid),
        "--subtensor.network", "embedded", "--chain.path", str(net.work / "chain.db"),
        "--store.url", net.store_url, "--metrics", str(net.work / "nodes"), "--wallet.path", str(net.wallet_path),
        "--work.dir", str(net.work / "dashboard"),
    ]  # fmt: skip
    dashboard = Neuron(
        "dashboard", "dashboard", "", net.work / "dashboard", net.work / "logs" / "dashboard.log", args
    )
    dashboard.start(net.env())
    return dashboard


def keep_serving(dashboard: Neuron, port: int, console: Console) -> None:
    """After the network stops, the dashboard stays up for a look at the finished run, until Ctrl-C."""
    console.print(
        f"the network has stopped; the dashboard still serves {dashboard_url(port)} (Ctrl-C stops it)"
    )
    try:
        while dashboard.running():
            time.sleep(0.5)
    except KeyboardInterrupt:
        console.print("stopping the dashboard…")
    if not dashboard.running() and (process := dashboard.process) is not None and process.returncode:
        console.print(f"[red]the dashboard exited ({process.returncode}); see {dashboard.log_path}[/]")
