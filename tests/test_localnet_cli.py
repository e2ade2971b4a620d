"""`distrai localnet` as a newcomer runs it, stopped with Ctrl-C: every process it started exits, the
dashboard beside the network included."""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
import urllib.request

import pytest
from support.metrics_lines import line as metrics_line
from support.metrics_lines import reveal_record, train_record, validator_record, write_lines

from distrai.cli import main as distrai_main
from distrai.localnet.network import Localnet, LocalnetOptions, Neuron
from distrai.localnet.preflight import parse_adversaries, prepare_work_dir
from distrai.localnet.view import (
    MinerResult,
    accepted_note,
    processed_windows,
    results_table,
    trained_windows,
)
from distrai.node.wallets import open_wallet

pytestmark = pytest.mark.e2e  # starts local networks and their nodes as processes


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


def answers(url: str) -> dict:
    try:
        with urllib.request.urlopen(url, timeout=5) as answer:
            return json.loads(answer.read())
    except (OSError, ValueError):
        return {}


@pytest.mark.localnet
def test_ctrl_c_stops_every_process_and_the_dashboard_beside_them(tmp_path):
    work = tmp_path / "net"
    env = {**os.environ, "COLUMNS": "160"}
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
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
            "--dashboard",
            "--dashboard-port",
            str(port),
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        env=env,
        text=True,
        # Ctrl-C as a terminal sends it, even when this session runs with SIGINT ignored (started by
        # `pytest &` from a script): a process that starts with SIGINT ignored keeps ignoring it
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )
    deadline = time.monotonic() + 180
    while time.monotonic() < deadline and (
        len(processes_mentioning(str(work / "wallets"))) < 3
        or "run" not in answers(f"http://127.0.0.1:{port}/api/run")
    ):
        time.sleep(0.5)
    started = processes_mentioning(str(work / "wallets"))
    assert len(started) == 3, cli.stdout.read() if cli.poll() is not None else "neurons did not start"
    assert answers(f"http://127.0.0.1:{port}/api/run")["run"]["name"] == "cpu-localnet"
    logs = [work / "logs" / "miner0.log", work / "logs" / "validator0.log"]

    def looping() -> bool:
        return all(log.exists() and "started on run" in log.read_text() for log in logs)

    deadline = time.monotonic() + 180
    while time.monotonic() < deadline and cli.poll() is None and not looping():
        time.sleep(0.5)
    assert looping(), "the miner and the validator never said they started"
    cli.send_signal(signal.SIGINT)
    out, _ = cli.communicate(timeout=120)
    assert "stopping every process" in out
    assert f"dashboard: http://127.0.0.1:{port}/" in out
    assert processes_mentioning(str(work / "wallets")) == []
    assert (work / "logs" / "miner0.log").exists() and (work / "logs" / "validator0.log").exists()
    assert (work / "logs" / "dashboard.log").exists()


def test_unknown_adversary_types_are_refused_naming_the_known_ones(tmp_path):
    out = subprocess.run(
        [
            sys.executable,
            "-X",
            "importtime",
            "-m",
            "distrai.cli",
            "localnet",
            "--work",
            str(tmp_path / "net"),
            "--adversary",
            "lazy,bogus",
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode != 0
    assert "unknown --adversary bogus" in out.stdout + out.stderr
    assert "copycat" in out.stdout + out.stderr
    assert not (tmp_path / "net").exists()
    imported = {
        line.split("|")[-1].strip() for line in out.stderr.splitlines() if line.startswith("import time:")
    }
    assert "distrai.localnet.preflight" in imported
    assert not {"torch", "transformers"} & imported, "refused before the model code's imports"


def test_adversaries_join_the_network_as_extra_miners(tmp_path):
    assert parse_adversaries(" lazy, scaled ,") == ("lazy", "scaled")
    net = Localnet(
        LocalnetOptions(work=tmp_path / "net", miners=2, validators=1, adversaries=("lazy", "scaled"))
    )
    net.setup()
    miners = [n for n in net.neurons if n.role == "miner"]
    assert [n.name for n in miners] == ["miner0", "miner1", "adversary-lazy", "adversary-scaled"]
    own_store = f"file://{net.work / 'stores' / 'lazy'}"
    assert miners[2].args[-4:] == ["--miner.adversary", "lazy", "--data.store", net.store_url]
    assert miners[2].args[miners[2].args.index("--store.url") + 1] == own_store  # a store of its own
    assert all(net.chain.metagraph().uid_of(net_hotkey(net, n.name)) is not None for n in miners)


def net_hotkey(net, name: str) -> str:
    return open_wallet(name, "default", str(net.wallet_path)).hotkey.ss58_address


def test_steering_leaders_need_known_types_and_an_honest_validator_to_follow(tmp_path):
    for flags, words in (
        (
            ["--leader-adversary", "bogus"],
            "unknown --leader-adversary bogus; known: poison, reweight, collude, censor, invent, skipper",
        ),
        (["--validators", "1", "--leader-adversary", "poison"], "needs an honest validator left to follow"),
        (["--leader-adversary", "collude"], "collude needs --adversary poison (its miner)"),
    ):
        out = subprocess.run(
            [sys.executable, "-m", "distrai.cli", "localnet", "--work", str(tmp_path / "net"), *flags],
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert out.returncode != 0 and words in out.stdout + out.stderr, out.stdout + out.stderr
    assert not (tmp_path / "net").exists()
    net = Localnet(LocalnetOptions(work=tmp_path / "net", validators=2, leader_adversaries=("reweight",)))
    net.setup()
    validators = [n for n in net.neurons if n.role == "validator"]
    assert validators[0].args[-2:] == ["--validator.adversary", "reweight"]
    assert "--validator.adversary" not in validators[1].args


def test_a_colluding_leader_is_given_the_poison_miners_hotkey(tmp_path):
    net = Localnet(
        LocalnetOptions(
            work=tmp_path / "net", validators=2, adversaries=("poison",), leader_adversaries=("collude",)
        )
    )
    net.setup()
    leader = net.neuron("validator0").args
    colluder = net_hotkey(net, "adversary-poison")
    assert leader[-4:] == ["--validator.adversary", "collude", "--validator.colluder", colluder]
    assert net.chain.metagraph().uid_of(colluder) is not None
    miner = net.neuron("adversary-poison").args
    assert miner[miner.index("--miner.adversary") + 1] == "poison"


def test_a_sharded_miner_runs_as_miner1_under_torchrun_and_needs_a_second_miner(tmp_path):
    out = subprocess.run(
        [sys.executable, "-m", "distrai.cli", "localnet", "--work", str(tmp_path / "net")]
        + ["--miners", "1", "--sharded-miner-ranks", "2"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode != 0
    assert "--sharded-miner-ranks runs miner1: it needs --miners 2 or more" in out.stdout + out.stderr
    assert not (tmp_path / "net").exists()
    net = Localnet(LocalnetOptions(work=tmp_path / "net", miners=3, validators=1, sharded_miner_ranks=2))
    net.setup()
    assert net.neuron("miner1").args[:4] == [
        "-m",
        "torch.distributed.run",
        "--standalone",
        "--nproc-per-node=2",
    ]
    assert "--miner.shard" in net.neuron("miner1").args
    assert all("--miner.shard" not in net.neuron(name).args for name in ("miner0", "miner2"))
    assert all(net.neuron(name).args[0] != "-m" for name in ("miner0", "miner2"))


def test_a_restarted_node_gets_the_environment_the_network_started_in(tmp_path, monkeypatch):
    monkeypatch.setenv("DISTRAI_TEST_MARK", "started")
    net = Localnet(LocalnetOptions(work=tmp_path / "net", miners=1, validators=1))
    net.work.mkdir()
    seen = tmp_path / "seen"
    script = f"import os, pathlib; pathlib.Path({str(seen)!r}).write_text(os.environ['DISTRAI_TEST_MARK'])"
    net.neurons.append(Neuron("probe", "miner", "probe", tmp_path, tmp_path / "probe.log", ["-c", script]))
    net.start()
    net.neuron("probe").process.wait(30)
    assert seen.read_text() == "started"

    monkeypatch.setenv("DISTRAI_TEST_MARK", "changed by the caller")
    net.restart("probe")
    net.neuron("probe").process.wait(30)
    assert seen.read_text() == "started"


def test_a_work_folder_that_cannot_be_written_is_refused_naming_the_flag(tmp_path):
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    for work in (blocker / "net", blocker):  # cannot be made; is not a folder to clear
        with pytest.raises(
            ValueError,
            match=f"cannot write in the work folder {re.escape(str(work))} .*choose another with --work$",
        ):
            prepare_work_dir(work)
    out = subprocess.run(
        [sys.executable, "-m", "distrai.cli", "localnet", "--work", str(blocker / "net")],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "COLUMNS": "200"},
    )
    assert out.returncode == 1, out.stdout + out.stderr
    assert (
        f"error: cannot write in the work folder {blocker / 'net'}" in out.stdout
        and "Traceback" not in out.stderr
    )


def test_help_gives_every_flag_its_default(capsys):
    with pytest.raises(SystemExit) as done:
        distrai_main(["localnet", "--help"])
    assert done.value.code == 0
    flags: list[str] = []
    for line in capsys.readouterr().out.split("options:")[1].splitlines():
        if line.startswith("  --"):
            flags.append(line.strip())
        elif line.startswith("   ") and flags:
            flags[-1] += " " + line.strip()
    assert len(flags) == 16, flags
    for text in flags:
        assert "(default" in text, text
    assert any(text.startswith("--windows WINDOWS") and text.endswith("(default 5)") for text in flags)


def test_the_results_say_why_windows_accepted_falls_short_of_windows(tmp_path):
    # as a network of --windows 5 runs: the validators check window 0, which started before the miners
    # could train it, and stop after window 4, before checking the miners' last window, 5
    net = Localnet(LocalnetOptions(work=tmp_path))
    for name, role, records in (
        ("validator0", "validator", [metrics_line(w, validator_record()) for w in range(5)]),
        (
            "miner0",
            "miner",
            [metrics_line(w, r) for w in range(1, 6) for r in (train_record(), reveal_record())],
        ),
    ):
        write_lines(tmp_path / name / "metrics.jsonl", records)
        net.neurons.append(Neuron(name, role, name, tmp_path / name, tmp_path / f"{name}.log", []))
    assert (processed_windows(net), trained_windows(net)) == ([0, 1, 2, 3, 4], [1, 2, 3, 4, 5])
    note = accepted_note(processed_windows(net), trained_windows(net), 5)
    assert note.splitlines() == [
        "windows accepted: of the 5 windows the validators checked, as the honest one with the most stake "
        "reported",
        "window 0: checked, but trained by no miner: the miners started too late in it to train it "
        "before its commit deadline, and began with window 1",
        "window 5: trained, but not checked: each validator stops after its 5 windows (--windows), and "
        "theirs ended with window 4",
    ]
    gaps = accepted_note([1, 2, 3, 4], [1, 3, 4, 6], 4).splitlines()
    assert gaps[1:] == [
        "window 2: checked, but trained by no miner",
        "window 6: trained, but not checked: each "
        "validator stops after its 4 windows (--windows), and theirs ended with window 4",
    ]
    assert accepted_note([1, 2], [1, 2], 2).count("\n") == 0
    result = MinerResult("miner0", 1, 4, 1.0, 0.5, 0.5, 1.0, None, 0, "")
    table = results_table([result], 412, note)
    assert table.caption == note and "earned (block 412)" in [c.header for c in table.columns]
