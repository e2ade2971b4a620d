"""The subnet owner on the command line: `distrai chain init` with an owner and settings it keeps, and
`distrai run publish`, whose commitment the nodes' own check accepts."""

from __future__ import annotations

import shlex
from dataclasses import asdict
from typing import Any

import pytest
from support.local_harness import make_local_harness
from support.subtensor_harness import make_subtensor_harness

from distrai.chain.base import Hyperparameters
from distrai.chain.local import LocalChain
from distrai.cli import main
from distrai.node.build import published_run
from distrai.node.registration import register_command
from distrai.node.settings import HotkeySettings
from distrai.node.wallets import DEFAULT_WALLET_PATH, create_dev_wallet
from distrai.protocol.run import RunMismatch, check_run_matches, load_run_config, run_id, shipped_config_path
from distrai.run_cmd import publish_run

CPU = shipped_config_path("cpu-localnet")


def said(capsys) -> str:
    return " ".join(capsys.readouterr().out.split())


SUBNET_FLAGS = {
    "block_time": "--block-time",
    "emission_per_block": "--emission-per-block",
    "owner_cut": "--owner-cut",
    "tempo": "--tempo",
    "max_uids": "--max-uids",
    "max_validators": "--max-validators",
    "immunity_period": "--immunity-period",
    "min_allowed_weights": "--min-allowed-weights",
    "max_weight_limit": "--max-weight-limit",
    "weights_rate_limit": "--weights-rate-limit",
    "activity_cutoff": "--activity-cutoff",
    "kappa": "--kappa",
    "bonds_moving_avg": "--bonds-moving-avg",
    "yuma3": "--yuma3",
    "commit_reveal_weights": "--commit-reveal",
    "commit_reveal_period": "--reveal-period",
    "stake_threshold": "--stake-threshold",
    "commitment_max_bytes": "--commitment-max-bytes",
    "commitment_rate_limit": "--commitment-rate-limit",
    "max_registrations_per_block": "--max-registrations-per-block",
}
"""`chain init`'s flag of each setting of the subnet it creates, written out: the flags operators type."""
DEFAULTS = {"block_time": 12.0, "emission_per_block": 1.0, "owner_cut": 0.18, **asdict(Hyperparameters())}


def subnet_flags(values: dict[str, Any]) -> list[str]:
    """`chain init`'s flags asking for `values` (commit-reveal's flag only when it is True)."""
    argv = []
    for name, value in values.items():
        if name == "commit_reveal_weights":
            argv += [SUBNET_FLAGS[name]] if value else []
        else:
            argv += [SUBNET_FLAGS[name], str(value).lower() if isinstance(value, bool) else str(value)]
    return argv


def others() -> dict[str, Any]:
    """A value for every setting of the subnet, none its default and no two numbers alike."""
    values: dict[str, Any] = {}
    for i, (name, default) in enumerate(DEFAULTS.items(), start=1):
        if isinstance(default, bool):
            values[name] = not default
        elif isinstance(default, int):
            values[name] = default + i
        else:
            values[name] = i / 32  # exact in binary; in [0, 1] as the fractions must be
        assert values[name] != default, name
    numbers = [v for v in values.values() if not isinstance(v, bool)]
    assert len(set(numbers)) == len(numbers)
    return values


def test_a_flag_is_written_out_here_for_every_hyperparameter():
    """A hyperparameter added to `Hyperparameters` needs its `chain init` flag, here and in the command."""
    assert SUBNET_FLAGS.keys() == DEFAULTS.keys()


@pytest.fixture
def wallets(tmp_path):
    path = str(tmp_path / "wallets")
    return {name: create_dev_wallet(name, "default", path)[0] for name in ("owner", "stranger")}, path


def test_a_refused_chain_init_names_the_settings_it_was_not_given_as_defaults(tmp_path, capsys, wallets):
    (_, path), db = wallets, str(tmp_path / "chain.db")
    owner = ["--wallet.name", "owner", "--wallet.path", path]
    first = ["chain", "init", "--chain", db, "--block-time", "1", "--tempo", "10", "--commit-reveal", *owner]
    assert main(first) == 0
    said(capsys)
    assert main(["chain", "init", "--chain", db, "--block-time", "2", *owner]) == 1
    out = said(capsys)
    assert "block_time 1.0 (asked 2.0)" in out
    assert "tempo 10 (360 by default, not given)" in out
    assert "commit_reveal_weights True (False by default, not given)" in out
    assert main(first) == 0  # the same flags again: nothing to refuse


def test_every_setting_given_to_chain_init_lands_in_the_subnet(tmp_path, wallets):
    (_, path), db = wallets, str(tmp_path / "chain.db")
    asked = others()
    init = ["chain", "init", "--chain", db, "--wallet.name", "owner", "--wallet.path", path]
    assert main([*init, *subnet_flags(asked)]) == 0
    chain = LocalChain(db)
    hp = {name: asked[name] for name in asdict(Hyperparameters())}
    assert asdict(chain.hyperparameters()) == hp
    info = chain.subnet_info()
    assert (chain.block_time(), info["emission_per_block"], info["owner_cut"]) == (
        asked["block_time"],
        asked["emission_per_block"],
        asked["owner_cut"],
    )
    plain_db = str(tmp_path / "plain.db")
    assert main(["chain", "init", "--chain", plain_db, "--wallet.name", "owner", "--wallet.path", path]) == 0
    plain = LocalChain(plain_db)
    assert asdict(plain.hyperparameters()) == asdict(Hyperparameters()) and plain.block_time() == 12.0


def test_a_refusal_tells_each_setting_given_from_each_left_at_its_default(tmp_path, capsys, wallets):
    """Given at its default value, a setting is asked for; not given, it is a default: told apart by
    the flag given, not by the value."""
    (_, path), db = wallets, str(tmp_path / "chain.db")
    init = ["chain", "init", "--chain", db, "--wallet.name", "owner", "--wallet.path", path]
    held = others()
    assert main([*init, *subnet_flags(held)]) == 0
    said(capsys)

    assert main(init) == 1
    out = said(capsys)
    for name, default in DEFAULTS.items():
        assert f"{name} {held[name]!r} ({default!r} by default, not given)" in out, name

    assert main([*init, *subnet_flags(DEFAULTS)]) == 1
    out = said(capsys)
    for name, default in DEFAULTS.items():
        # --commit-reveal gives True or nothing: its False can only be a default
        asked = (
            f"{default!r} by default, not given" if name == "commit_reveal_weights" else f"asked {default!r}"
        )
        assert f"{name} {held[name]!r} ({asked})" in out, name

    assert asdict(LocalChain(db).hyperparameters()) == {n: held[n] for n in asdict(Hyperparameters())}
    assert main([*init, *subnet_flags(held)]) == 0
    assert "with these settings; nothing changed" in said(capsys)


def test_chain_init_needs_an_owner_and_refuses_other_settings_for_a_subnet_it_holds(
    tmp_path, capsys, wallets
):
    (made, path), db = wallets, str(tmp_path / "chain.db")
    assert main(["chain", "init", "--chain", db]) == 1
    assert "a subnet needs an owner" in said(capsys)
    owner = ["--wallet.name", "owner", "--wallet.path", path]
    assert main(["chain", "init", "--chain", db, "--block-time", "1", *owner]) == 0
    assert made["owner"].coldkeypub.ss58_address in said(capsys)
    chain = LocalChain(db)
    assert chain.subnet_owner() == made["owner"].coldkeypub.ss58_address
    assert chain.subnet_owner_hotkey() == made["owner"].hotkey.ss58_address

    assert main(["chain", "init", "--chain", db, "--block-time", "1", *owner]) == 0
    assert "already holds subnet 1 with these settings; nothing changed" in said(capsys)
    stranger = made["stranger"].coldkeypub.ss58_address
    assert (
        main(
            [
                "chain",
                "init",
                "--chain",
                db,
                "--block-time",
                "12",
                "--tempo",
                "7",
                "--owner-coldkey",
                stranger,
            ]
        )
        == 1
    )
    out = said(capsys)
    assert "already holds subnet 1 with other settings, and nothing was changed" in out
    assert "block_time 1.0 (asked 12.0)" in out and "tempo 360 (asked 7)" in out
    assert f"owner_coldkey '{made['owner'].coldkeypub.ss58_address}' (asked '{stranger}')" in out
    assert (chain.block_time(), chain.hyperparameters().tempo) == (1.0, 360)
    assert chain.subnet_owner() == made["owner"].coldkeypub.ss58_address
    assert (
        main(["chain", "init", "--chain", db, "--block-time", "1", *owner, "--owner-coldkey", stranger]) == 1
    )
    assert "name the owner once" in said(capsys)
    assert main(["chain", "init", "--chain", db, "--netuid", "2", "--block-time", "2", *owner]) == 1
    assert "already holds a chain with other settings" in said(capsys)


def test_the_owner_publishes_the_run_that_the_nodes_check(tmp_path, capsys, wallets):
    (made, path), db = wallets, str(tmp_path / "chain.db")
    init = ["chain", "init", "--chain", db, "--block-time", "1000", "--max-registrations-per-block", "8"]
    assert main([*init, "--wallet.name", "owner", "--wallet.path", path]) == 0
    chain = LocalChain(db)
    flags = ["--subtensor.network", "embedded", "--chain.path", db, "--wallet.path", path]
    publish = ["run", "publish", "--run.config", str(CPU), *flags]
    capsys.readouterr()

    assert main([*publish, "--wallet.name", "owner"]) == 1
    out = capsys.readouterr().out
    assert "is not registered on subnet 1" in out
    command = out.split("register it with: ")[1].strip()
    assert command.startswith("distrai chain register ")
    assert main(shlex.split(command)[1:]) == 0
    assert chain.metagraph().uid_of(made["owner"].hotkey.ss58_address) is not None

    chain.register(made["stranger"])
    assert main([*publish, "--wallet.name", "stranger"]) == 1
    assert "does not own subnet 1" in said(capsys)
    assert published_run(chain) is None

    config = load_run_config(CPU)
    assert main([*publish, "--wallet.name", "owner"]) == 0
    assert f"published run {run_id(config)}" in said(capsys)
    check_run_matches(config, published_run(chain))  # what every node checks at start-up
    changed = tmp_path / "changed.toml"
    changed.write_text(CPU.read_text().replace("lr = 1e-3", "lr = 2e-3"))
    with pytest.raises(RunMismatch):
        check_run_matches(load_run_config(changed), published_run(chain))
    assert main([*publish, "--wallet.name", "owner"]) == 0
    assert "is published already; nothing changed" in said(capsys)


def test_the_register_command_fits_the_network():
    def flags(network: str, path: str) -> HotkeySettings:
        return HotkeySettings(
            netuid=7,
            wallet_name="cold",
            wallet_hotkey="hot",
            wallet_path=path,
            subtensor_network=network,
            chain_path="my chain.db",
        )

    assert register_command(flags("embedded", "/w")) == (
        "distrai chain register --chain.path 'my chain.db' --netuid 7 --wallet.name cold --wallet.hotkey hot "
        "--wallet.path /w"
    )
    assert register_command(flags("finney", DEFAULT_WALLET_PATH)) == (
        "btcli subnet register --netuid 7 --wallet.name cold --wallet.hotkey hot --network finney"
    )


@pytest.mark.parametrize("make", [make_local_harness, make_subtensor_harness], ids=["embedded", "subtensor"])
def test_the_published_run_reads_back_through_either_chain(tmp_path, make):
    # the publishing step of `distrai run publish`, over the embedded chain and over the SDK adapter
    h = make(tmp_path)
    owner, config = h.owner(), load_run_config(CPU)
    flags = HotkeySettings(
        netuid=1,
        subtensor_network="finney",
        wallet_name=owner.name,
        wallet_hotkey="default",
        wallet_path=DEFAULT_WALLET_PATH,
    )
    with pytest.raises(ValueError, match="register it with: btcli subnet register --netuid 1 --wallet.name"):
        publish_run(h.chain, owner, config, flags)
    h.chain.register(owner)
    assert publish_run(h.chain, owner, config, flags) is True
    check_run_matches(config, published_run(h.chain))
    assert publish_run(h.chain, owner, config, flags) is False
