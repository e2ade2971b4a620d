"""The entry points as operators run them: flags with environment variables, and clear refusals to
start on a wrong run config, an unregistered hotkey, or a run the owner never published."""

from __future__ import annotations

import os
import shlex
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest

from distrai.chain.base import Hyperparameters
from distrai.chain.local import LocalChain
from distrai.cli import main as distrai_main
from distrai.data.byte_tokenizer import byte_tokenizer
from distrai.localnet.network import publish_builtin_data
from distrai.node.settings import NodeSettings
from distrai.node.wallets import create_dev_wallet, open_wallet
from distrai.protocol.run import load_run_config, run_commitment, shipped_config_path
from distrai.protocol.runtime import model_spec
from distrai.store import open_store
from distrai.train.memory import GIB, ModelShape
from distrai.train.model import load_model

pytestmark = pytest.mark.e2e  # starts the neurons as processes

REPO = Path(__file__).resolve().parents[1]
CPU = shipped_config_path("cpu-localnet")


def neuron(role: str, *args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, str(REPO / "neurons" / f"{role}.py"), *args],
        capture_output=True,
        text=True,
        timeout=180,
        env={**os.environ, "COLUMNS": "200", **(env or {})},
    )


@pytest.mark.parametrize("role", ["miner", "validator"])
def test_help_lists_every_flag_with_its_environment_variable(role):
    out = neuron(role, "--help")
    assert out.returncode == 0
    text = " ".join(out.stdout.split())
    for flag in NodeSettings.flags():
        assert flag.flag in text and f"env {flag.env}" in text
    assert ("--miner.idle" in text) == (role == "miner")
    assert ("--miner.adversary" in text and "env DISTRAI_MINER_ADVERSARY" in text) == (role == "miner")


def open_files(pid: int) -> set[str]:
    """The paths a process has open now."""
    paths = set()
    for fd in Path(f"/proc/{pid}/fd").iterdir():
        try:
            paths.add(os.readlink(fd))
        except FileNotFoundError:  # closed while listed
            continue
    return paths


@pytest.fixture
def subnet(tmp_path):
    wallets = str(tmp_path / "wallets")
    owner, _ = create_dev_wallet("owner", "default", wallets)
    miner, _ = create_dev_wallet("miner", "default", wallets)
    chain = LocalChain.create(
        tmp_path / "chain.db",
        block_time=1000.0,
        hyperparameters=Hyperparameters(max_registrations_per_block=8),
        owner_coldkey=owner.coldkeypub.ss58_address,
    )
    chain.register(owner)
    chain.register(miner)
    publish_builtin_data(load_run_config(CPU), open_store(f"file://{tmp_path / 'store'}"))
    return chain, owner, wallets, tmp_path


def common(chain, wallets, tmp_path, config, name="miner"):
    return [
        "--run.config",
        str(config),
        "--wallet.name",
        name,
        "--wallet.path",
        wallets,
        "--subtensor.network",
        "embedded",
        "--chain.path",
        str(chain.path),
        "--store.url",
        f"file://{tmp_path / 'store'}",
        "--work.dir",
        str(tmp_path / "work"),
        "--max.windows",
        "0",
    ]


def test_a_node_refuses_a_run_the_owner_did_not_publish(subnet):
    chain, owner, wallets, tmp_path = subnet
    out = neuron("miner", *common(chain, wallets, tmp_path, CPU))
    assert out.returncode == 2 and "published no run commitment" in out.stderr

    chain.commit(owner, run_commitment(load_run_config(CPU)))
    changed = tmp_path / "changed.toml"
    changed.write_text(CPU.read_text().replace("lr = 1e-3", "lr = 2e-3"))
    out = neuron("validator", *common(chain, wallets, tmp_path, changed))
    assert out.returncode == 2 and "published run id" in out.stderr

    out = neuron("miner", *common(chain, wallets, tmp_path, CPU))
    assert out.returncode == 0, out.stderr


def test_a_node_refuses_an_unregistered_hotkey(subnet):
    chain, owner, wallets, tmp_path = subnet
    create_dev_wallet("stranger", "default", wallets)
    out = neuron("miner", *common(chain, wallets, tmp_path, CPU, name="stranger"))
    assert out.returncode == 2 and "is not registered on subnet 1; register it with: " in out.stderr
    command = out.stderr.split("register it with: ")[1].strip()
    assert command == (
        f"distrai chain register --chain.path {chain.path} --netuid 1 --wallet.name stranger "
        f"--wallet.hotkey default --wallet.path {wallets}"
    )
    assert distrai_main(shlex.split(command)[1:]) == 0
    assert (
        chain.metagraph().uid_of(open_wallet("stranger", "default", wallets).hotkey.ss58_address) is not None
    )


@pytest.mark.parametrize("role", ["miner", "validator"])
def test_a_ctrl_c_while_a_node_starts_up_is_a_clean_exit(subnet, role):
    chain, owner, wallets, tmp_path = subnet
    chain.commit(owner, run_commitment(load_run_config(CPU)))
    create_dev_wallet("validator", "default", wallets)
    chain.register(open_wallet("validator", "default", wallets))
    name = "miner" if role == "miner" else "validator"
    # the chain's write lock held here keeps the node in its start-up, at its first write to the chain
    lock = sqlite3.connect(str(chain.path), isolation_level=None)
    lock.execute("BEGIN EXCLUSIVE")
    process = subprocess.Popen(
        [sys.executable, str(REPO / "neurons" / f"{role}.py"), *common(chain, wallets, tmp_path, CPU, name)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "COLUMNS": "200"},
    )
    try:
        while process.poll() is None and str(chain.path.resolve()) not in open_files(process.pid):
            time.sleep(0.01)  # until the node has opened the chain
        process.send_signal(signal.SIGINT)
    finally:
        lock.execute("ROLLBACK")
        lock.close()
    out, err = process.communicate(timeout=180)
    assert process.returncode == 0, err
    assert "KeyboardInterrupt" not in err


@pytest.mark.parametrize("role", ["miner", "validator"])
def test_a_node_refuses_a_work_folder_it_cannot_write_in_naming_the_flag(tmp_path, role):
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    work = blocker / "work"  # cannot be made, whoever runs the test (root writes in read-only folders)
    out = neuron(role, "--run.config", str(CPU), "--work.dir", str(work))
    assert out.returncode == 2, out.stderr
    assert f"{role} cannot start: cannot write in the work folder {work}" in out.stderr
    assert "choose another with --work.dir" in out.stderr and "Traceback" not in out.stderr


def test_flags_come_from_the_environment(subnet):
    chain, owner, wallets, tmp_path = subnet
    chain.commit(owner, run_commitment(load_run_config(CPU)))
    env = {
        "DISTRAI_RUN_CONFIG": str(CPU),
        "BT_WALLET_NAME": "miner",
        "BT_WALLET_PATH": wallets,
        "BT_SUBTENSOR_NETWORK": "embedded",
        "DISTRAI_CHAIN": str(chain.path),
        "DISTRAI_STORE_URL": f"file://{tmp_path / 'store'}",
        "DISTRAI_WORK_DIR": str(tmp_path / "w"),
        "DISTRAI_MAX_WINDOWS": "0",
    }
    out = neuron("miner", env=env)
    assert out.returncode == 0, out.stderr
    assert "miner" in out.stdout + out.stderr and (tmp_path / "w" / "metrics.jsonl").exists()


def test_a_node_fits_its_step_in_the_memory_it_is_given_or_says_what_it_needs(subnet):
    chain, owner, wallets, tmp_path = subnet
    chain.commit(owner, run_commitment(load_run_config(CPU)))
    args = common(chain, wallets, tmp_path, CPU)
    # room for one sequence's activations beside the state only with the window's base in host memory
    # (the plan's other choices: tests/test_train_memory.py)
    config = load_run_config(CPU)
    model = load_model(model_spec(config.model), tokenizer=byte_tokenizer())
    shape = ModelShape.of(model, config.train.autocast)
    tight = (
        shape.state_bytes(base_on_host=True) + shape.activation_bytes(1, config.data.seq_len, False) + 1024
    )
    assert tight < shape.state_bytes() + shape.activation_bytes(1, config.data.seq_len, False)
    out = neuron("miner", *args, "--device.memory_gib", f"{tight / GIB:.12f}")
    assert out.returncode == 0, out.stderr
    assert (
        f"memory: {config.train.batch_size} micro-batch(es) without activation checkpointing, "
        "the window's base in host memory"
    ) in " ".join(out.stdout.split())
    for role in ("miner", "validator"):
        out = neuron(role, *args, "--device.memory_gib", "0.01")
        assert out.returncode == 2, out.stderr
        assert f"{role} cannot start: the step needs at least" in out.stderr
        assert "the budget is 0.0 GiB" in out.stderr
    out = neuron("miner", *args, "--device.memory_gib", "lots")
    assert out.returncode == 2 and "--device.memory_gib must be a number of GiB, got 'lots'" in out.stderr


def test_every_rank_of_a_miner_that_cannot_fit_says_so_and_exits(subnet):
    chain, owner, wallets, tmp_path = subnet
    chain.commit(owner, run_commitment(load_run_config(CPU)))
    out = subprocess.run(
        [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node=2"]
        + [str(REPO / "neurons" / "miner.py"), *common(chain, wallets, tmp_path, CPU)]
        + ["--device.memory_gib", "0.01"],
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert out.returncode != 0
    assert "miner cannot start: the step needs at least" in out.stderr
    assert "rank 1 cannot start: the step needs at least" in out.stderr
    assert "sharded over 2 ranks" in out.stderr, "a miner on ranks says what each would need sharded"


def test_a_miner_asked_to_shard_shards_its_state_over_its_ranks(subnet):
    # (the memory plan's own choice, when nothing else fits, is tests/test_train_memory.py's: the
    # local network's tiny model saves too little by sharding to make a budget that needs it)
    chain, owner, wallets, tmp_path = subnet
    chain.commit(owner, run_commitment(load_run_config(CPU)))
    out = subprocess.run(
        [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node=2"]
        + [str(REPO / "neurons" / "miner.py"), *common(chain, wallets, tmp_path, CPU)]
        + ["--device.memory_gib", "1", "--miner.shard"],
        capture_output=True,
        text=True,
        timeout=180,
        env={**os.environ, "COLUMNS": "200"},
    )
    assert out.returncode == 0, out.stderr[-3000:]
    log = " ".join((out.stdout + out.stderr).split())
    assert "without activation checkpointing, the state sharded over 2 ranks" in log
    assert "rank 1 of 2: following rank 0's steps" in log

    alone = neuron("miner", *common(chain, wallets, tmp_path, CPU), "--miner.shard")
    assert alone.returncode == 2
    assert "miner cannot start: sharding the model needs several ranks" in alone.stderr

    idle = subprocess.run(
        [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node=2"]
        + [str(REPO / "neurons" / "miner.py"), *common(chain, wallets, tmp_path, CPU)]
        + ["--miner.shard", "--miner.idle"],
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert idle.returncode != 0
    assert (
        "miner cannot start: --miner.adversary idle runs on a miner whose ranks do not shard" in idle.stderr
    )
