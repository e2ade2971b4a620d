"""The `distrai` command as a newcomer runs it: wallets, then the embedded chain."""

from __future__ import annotations

import os
import subprocess
import sys

import bittensor as bt

from distrai.node.wallets import create_dev_wallet


def distrai(tmp_path, *args: str, columns: str | None = "200") -> subprocess.CompletedProcess:
    env = {**os.environ, "HOME": str(tmp_path), "DISTRAI_CHAIN": str(tmp_path / "chain.db")}
    env.pop("COLUMNS", None)
    if columns is not None:
        env["COLUMNS"] = columns
    return subprocess.run(
        [sys.executable, "-m", "distrai.cli", *args], capture_output=True, text=True, env=env, timeout=120
    )


def test_wallet_chain_register_stake_metagraph(tmp_path):
    wallets = str(tmp_path / "wallets")
    made = distrai(
        tmp_path,
        "wallet",
        "create",
        "--wallet.name",
        "alice",
        "--wallet.hotkey",
        "h0",
        "--wallet.path",
        wallets,
    )
    assert made.returncode == 0, made.stdout + made.stderr
    wallet = bt.Wallet("alice", "h0", path=wallets)
    assert wallet.hotkey.ss58_address in made.stdout.replace("\n", "")
    again = distrai(
        tmp_path,
        "wallet",
        "create",
        "--wallet.name",
        "alice",
        "--wallet.hotkey",
        "h0",
        "--wallet.path",
        wallets,
    )
    assert (
        "exists" in again.stdout
        and bt.Wallet("alice", "h0", path=wallets).hotkey.ss58_address == wallet.hotkey.ss58_address
    )

    owner = ("--wallet.name", "alice", "--wallet.hotkey", "h0", "--wallet.path", wallets)
    init = distrai(tmp_path, "chain", "init", "--block-time", "0.2", "--tempo", "5", *owner)
    assert init.returncode == 0, init.stderr
    assert wallet.coldkeypub.ss58_address in " ".join(init.stdout.split())
    reg = distrai(
        tmp_path,
        "chain",
        "register",
        "--wallet.name",
        "alice",
        "--wallet.hotkey",
        "h0",
        "--wallet.path",
        wallets,
    )
    assert reg.returncode == 0 and "is uid 0" in reg.stdout, reg.stdout + reg.stderr
    stake = distrai(
        tmp_path,
        "chain",
        "stake",
        "--amount",
        "42",
        "--wallet.name",
        "alice",
        "--wallet.hotkey",
        "h0",
        "--wallet.path",
        wallets,
    )
    assert stake.returncode == 0 and "stake now 42" in stake.stdout, stake.stdout + stake.stderr
    status = distrai(tmp_path, "chain", "status")
    assert status.returncode == 0 and "1 / 256" in status.stdout
    mg = distrai(tmp_path, "chain", "metagraph")
    assert mg.returncode == 0 and wallet.hotkey.ss58_address[:10] in mg.stdout and "42.00" in mg.stdout


def test_errors_are_one_clear_line(tmp_path):
    missing_chain = distrai(tmp_path, "chain", "status")
    assert missing_chain.returncode == 1
    assert missing_chain.stdout.strip().count("\n") == 0
    assert "no embedded chain" in missing_chain.stdout and "distrai chain init" in missing_chain.stdout
    owner, _ = create_dev_wallet("owner", "default", str(tmp_path / "w"))
    distrai(tmp_path, "chain", "init", "--owner-coldkey", owner.coldkeypub.ss58_address)
    missing_wallet = distrai(
        tmp_path, "chain", "register", "--wallet.name", "ghost", "--wallet.path", str(tmp_path / "w")
    )
    assert missing_wallet.returncode == 1
    assert "ghost" in missing_wallet.stdout and "distrai wallet create" in missing_wallet.stdout


def test_chain_init_takes_commit_reveal_stake_threshold_and_owner_hotkey(tmp_path):
    from distrai.chain.local import LocalChain

    owner = bt.Wallet("owner", "default", path=str(tmp_path / "wallets"))
    made = distrai(
        tmp_path, "wallet", "create", "--wallet.name", "owner", "--wallet.path", str(tmp_path / "wallets")
    )
    assert made.returncode == 0, made.stdout + made.stderr
    init = distrai(
        tmp_path,
        "chain",
        "init",
        "--commit-reveal",
        "--reveal-period",
        "3",
        "--stake-threshold",
        "2.5",
        "--owner-coldkey",
        owner.coldkeypub.ss58_address,
        "--owner-hotkey",
        owner.hotkey.ss58_address,
    )
    assert init.returncode == 0, init.stdout + init.stderr
    chain = LocalChain(tmp_path / "chain.db")
    hp = chain.hyperparameters()
    assert (hp.commit_reveal_weights, hp.commit_reveal_period, hp.stake_threshold) == (True, 3, 2.5)
    assert chain.subnet_owner_hotkey() == owner.hotkey.ss58_address
    status = distrai(tmp_path, "chain", "status")
    assert (
        "commit-reveal, revealed after 3 epoch(s)" in status.stdout
        and owner.hotkey.ss58_address in status.stdout
    )
    owned = ("--owner-coldkey", owner.coldkeypub.ss58_address)
    plain = distrai(tmp_path, "chain", "init", "--chain", str(tmp_path / "plain.db"), *owned)
    assert (
        plain.returncode == 0
        and not LocalChain(tmp_path / "plain.db").hyperparameters().commit_reveal_weights
    )
    too_long = distrai(
        tmp_path,
        "chain",
        "init",
        "--chain",
        str(tmp_path / "bad.db"),
        "--commit-reveal",
        "--reveal-period",
        "101",
        "--owner-coldkey",
        owner.coldkeypub.ss58_address,
    )
    assert too_long.returncode == 1 and "RevealPeriodTooLarge" in too_long.stdout


def test_output_to_a_pipe_keeps_whole_addresses_on_their_lines(tmp_path):
    """Without a terminal or COLUMNS, the metagraph and `chain init`'s message are not cut at 80 columns."""
    wallets = str(tmp_path / "wallets")
    owner = ("--wallet.name", "alice", "--wallet.path", wallets)
    assert distrai(tmp_path, "wallet", "create", *owner).returncode == 0
    wallet = bt.Wallet("alice", "default", path=wallets)
    init = distrai(tmp_path, "chain", "init", "--block-time", "0.2", *owner, columns=None)
    assert init.returncode == 0, init.stderr
    assert any(
        wallet.coldkeypub.ss58_address in line and "owner hotkey" in line for line in init.stdout.splitlines()
    )
    assert distrai(tmp_path, "chain", "register", *owner).returncode == 0
    mg = distrai(tmp_path, "chain", "metagraph", columns=None)
    shown = wallet.hotkey.ss58_address[:10] + "…"
    assert mg.returncode == 0 and shown in mg.stdout and "dividends" in mg.stdout, mg.stdout


def test_wallet_list_shows_every_hotkey_with_its_addresses(tmp_path):
    wallets = str(tmp_path / "wallets")
    empty = distrai(tmp_path, "wallet", "list", "--wallet.path", wallets)
    assert empty.returncode == 1 and "distrai wallet create" in empty.stdout
    for name, hotkey in (("alice", "default"), ("alice", "h1"), ("bob", "default")):
        made = distrai(
            tmp_path,
            "wallet",
            "create",
            "--wallet.name",
            name,
            "--wallet.hotkey",
            hotkey,
            "--wallet.path",
            wallets,
        )
        assert made.returncode == 0, made.stderr
    listed = distrai(tmp_path, "wallet", "list", "--wallet.path", wallets)
    assert listed.returncode == 0, listed.stderr
    for name, hotkey in (("alice", "default"), ("alice", "h1"), ("bob", "default")):
        wallet = bt.Wallet(name, hotkey, path=wallets)
        assert any(
            name in line
            and hotkey in line
            and wallet.hotkey.ss58_address in line
            and wallet.coldkeypub.ss58_address in line
            for line in listed.stdout.splitlines()
        ), listed.stdout
