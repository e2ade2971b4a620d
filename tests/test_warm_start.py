"""The local network's warm starts (`distrai.localnet.warm_start`): a node forked from the warm server
runs its script as `python SCRIPT ARGS...` would, in its folder, environment and log, with torch
already imported, and its exit status, signal included, reaches the one who started it."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import textwrap

import pytest

from distrai.localnet.warm_start import WarmProcess, WarmStarter

pytestmark = pytest.mark.e2e  # starts the warm server and node scripts as processes

SCRIPT = textwrap.dedent(
    """
    import json, os, signal, sys, time
    warm = "torch" in sys.modules
    import torch
    mode = sys.argv[1]
    print(json.dumps({
        "name": __name__, "argv": sys.argv, "cwd": os.getcwd(), "path0": sys.path[0], "warm": warm,
        "marker": os.environ.get("WARM_TEST_MARKER"), "threads": torch.get_num_threads(),
        "sum": float(torch.ones(4, 4).sum()),
    }), flush=True)
    if mode == "exit":
        sys.exit(int(sys.argv[2]))
    if mode == "raise":
        raise RuntimeError("the node broke")
    if mode == "wait":
        def stop(*_):
            print("stopping on SIGINT", flush=True)
            sys.exit(0)
        signal.signal(signal.SIGINT, stop)
        open(sys.argv[2], "w").close()
        while True:
            time.sleep(0.05)
    """
)


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    path = tmp_path_factory.mktemp("warm")
    (path / "node.py").write_text(SCRIPT)
    (path / "work").mkdir()
    return path


@pytest.fixture(scope="module")
def env():
    return {**os.environ, "WARM_TEST_MARKER": "the network's", "OMP_NUM_THREADS": "1"}


@pytest.fixture(scope="module")
def starter(folder, env):
    warm = WarmStarter(env, cwd=folder, log_path=folder / "server.log")
    yield warm
    warm.stop()


def report(log):
    return json.loads(log.read_text().splitlines()[0])


def test_a_forked_node_runs_its_script_as_python_would(starter, folder, env):
    log = folder / "exit.log"
    process = starter.start([str(folder / "node.py"), "exit", "3"], env, folder / "work", log)
    assert isinstance(process, WarmProcess)
    assert process.wait(60) == 3 and process.returncode == 3 and process.poll() == 3
    seen = report(log)
    assert seen["name"] == "__main__"
    assert seen["argv"] == [str(folder / "node.py"), "exit", "3"]
    assert seen["cwd"] == str(folder / "work")
    assert seen["path0"] == str(folder)
    assert seen["marker"] == "the network's" and seen["threads"] == 1 and seen["sum"] == 16.0
    assert seen["warm"], "torch was imported by the server, not by the node"


def test_a_node_that_raises_leaves_its_traceback_and_exits_1(starter, folder, env):
    log = folder / "raise.log"
    process = starter.start([str(folder / "node.py"), "raise"], env, folder / "work", log)
    assert process.wait(60) == 1
    text = log.read_text()
    assert "Traceback (most recent call last)" in text and "RuntimeError: the node broke" in text


def test_a_running_node_is_signalled_and_killed_by_its_pid(starter, folder, env, tmp_path):
    for sig, status in ((signal.SIGINT, 0), (signal.SIGKILL, -signal.SIGKILL)):
        ready = tmp_path / f"ready-{sig}"
        log = folder / f"wait-{sig}.log"
        process = starter.start([str(folder / "node.py"), "wait", str(ready)], env, folder / "work", log)
        while not ready.exists():
            assert process.poll() is None, log.read_text()
            process_wait_briefly(process)
        with pytest.raises(subprocess.TimeoutExpired):
            process.wait(0.1)
        assert os.getsid(process.pid) == process.pid, "a session of its own, as start_new_session gives"
        process.send_signal(sig)
        assert process.wait(60) == status
        assert ("stopping on SIGINT" in log.read_text()) == (sig == signal.SIGINT)


def process_wait_briefly(process):
    with contextlib.suppress(subprocess.TimeoutExpired):
        process.wait(0.05)


def test_a_command_it_cannot_fork_starts_as_an_ordinary_process(starter, folder, env):
    other_env = {**env, "WARM_TEST_MARKER": "another"}
    log = folder / "cold.log"
    process = starter.start([str(folder / "node.py"), "exit", "0"], other_env, folder / "work", log)
    assert isinstance(process, subprocess.Popen)
    assert process.wait(120) == 0
    seen = report(log)
    assert seen["marker"] == "another" and not seen["warm"]
    module = starter.start(["-c", "import sys; sys.exit(5)"], env, folder / "work", folder / "c.log")
    assert isinstance(module, subprocess.Popen) and module.wait(60) == 5


def test_the_server_is_gone_after_stop(folder, env):
    warm = WarmStarter(env, cwd=folder, log_path=folder / "second.log")
    process = warm.start([str(folder / "node.py"), "exit", "0"], env, folder / "work", folder / "s.log")
    assert process.wait(60) == 0
    socket = warm.socket_path
    assert socket.exists()
    warm.stop()
    assert not socket.parent.exists()
