"""A node's settings, typed and read once (distrai/node/settings.py): a flag, else its environment
variable, else the default; an empty value is unset; a value that does not fit is refused by its flag;
the environment is read only through the variables the flags name."""

from __future__ import annotations

import subprocess
import sys

import pytest

from distrai.chain_cmd import ChainFileSettings, ChainInitSettings
from distrai.dashboard.cli import DashboardSettings
from distrai.node.settings import ChainSettings, NodeSettings, SettingsError
from distrai.run_cmd import PublishSettings
from miners.settings import MinerSettings
from validators.settings import ValidatorSettings

MODELS = (
    NodeSettings,
    MinerSettings,
    ValidatorSettings,
    ChainSettings,
    PublishSettings,
    DashboardSettings,
    ChainFileSettings,
)


def read(model, *argv: str):
    return model.from_args(model.parser("test").parse_args(list(argv)))


@pytest.fixture(autouse=True)
def no_settings_in_the_environment(monkeypatch):
    for model in MODELS:
        for flag in model.flags():
            monkeypatch.delenv(flag.env, raising=False)


def test_a_flag_wins_over_its_variable_which_wins_over_the_default(monkeypatch):
    assert read(NodeSettings).netuid == 1
    monkeypatch.setenv("BT_NETUID", "5")
    monkeypatch.setenv("DISTRAI_MAX_WINDOWS", "3")
    settings = read(NodeSettings, "--netuid", "7")
    assert (settings.netuid, settings.max_windows, settings.wallet_name) == (7, 3, "default")


def test_an_empty_value_leaves_the_default(monkeypatch):
    monkeypatch.setenv("DISTRAI_WORK_DIR", "")
    monkeypatch.setenv("DISTRAI_DEVICE_MEMORY_GIB", "")
    settings = read(NodeSettings, "--store.url", "", "--max.windows", "")
    assert (settings.work_dir, settings.device_memory_gib, settings.store_url, settings.max_windows) == (
        None,
        None,
        None,
        None,
    )
    assert read(NodeSettings, "--max.windows", "0").max_windows == 0  # zero windows is a setting


def test_only_the_flags_variables_are_read(monkeypatch):
    monkeypatch.setenv("netuid", "9")
    monkeypatch.setenv("bt_netuid", "9")
    monkeypatch.setenv("wallet_name", "someone")
    settings = read(NodeSettings)
    assert (settings.netuid, settings.wallet_name) == (1, "default")


def test_a_value_that_does_not_fit_is_refused_by_its_flag(monkeypatch):
    with pytest.raises(SettingsError, match=r"--netuid \[env BT_NETUID\]: .*integer.*got 'x'"):
        read(NodeSettings, "--netuid", "x")
    with pytest.raises(SettingsError, match="--device.memory_gib must be a number of GiB, got 'lots'"):
        read(NodeSettings, "--device.memory_gib", "lots")
    with pytest.raises(SettingsError, match="--device.memory_gib must be positive, got '0'"):
        read(NodeSettings, "--device.memory_gib", "0")
    monkeypatch.setenv("DISTRAI_STORE_BANDWIDTH", "fast")
    with pytest.raises(SettingsError, match=r"--store.bandwidth \[env DISTRAI_STORE_BANDWIDTH\]"):
        read(NodeSettings)


def test_the_miners_own_settings(monkeypatch):
    assert (read(MinerSettings).miner_shard, read(MinerSettings, "--miner.shard").miner_shard) == (
        False,
        True,
    )
    for value, shards in (("0", False), ("1", True), ("yes", True)):
        monkeypatch.setenv("DISTRAI_MINER_SHARD", value)
        assert read(MinerSettings).miner_shard is shards
    assert read(MinerSettings, "--miner.idle").miner_adversary == "idle"
    monkeypatch.setenv("DISTRAI_MINER_ADVERSARY", "sneaky")
    with pytest.raises(SettingsError, match="--miner.adversary: unknown adversary 'sneaky'"):
        read(MinerSettings)
    monkeypatch.setenv("DISTRAI_MINER_ADVERSARY", "noise")
    assert read(MinerSettings).miner_adversary == "noise"
    with pytest.raises(SettingsError, match="--miner.kept-states must be 0"):
        read(MinerSettings, "--miner.kept-states", "1")
    assert read(MinerSettings, "--miner.kept-states", "0").miner_kept_states == 0


def test_the_validators_own_settings(monkeypatch):
    with pytest.raises(SettingsError, match="the collude adversary needs the hotkey of its colluding miner"):
        read(ValidatorSettings, "--validator.adversary", "collude")
    monkeypatch.setenv("DISTRAI_VALIDATOR_COLLUDER", "5colluder")
    settings = read(ValidatorSettings, "--validator.adversary", "collude")
    assert (settings.validator_adversary, settings.validator_colluder) == ("collude", "5colluder")


def test_every_setting_has_one_flag_and_one_variable():
    for model in MODELS:
        flags = model.flags()
        assert len({f.flag for f in flags}) == len({f.env for f in flags}) == len(flags), model
        assert all(f.flag.startswith("--") and f.help for f in flags), model
    node = {f.name: f for f in NodeSettings.flags()}
    for model in (PublishSettings, DashboardSettings):  # a tool's field taken `like` a node's
        for flag in model.flags():
            assert (flag.flag, flag.env) == (node[flag.name].flag, node[flag.name].env)
    dashboard = {f.name: f for f in DashboardSettings.flags()}
    assert dashboard["work_dir"].default == "~/.distrai/dashboard" and "store_bandwidth" not in dashboard


def test_chain_inits_subnet_settings_are_flags_alone(monkeypatch):
    """`distrai chain init`'s subnet settings have no variables: no environment is read, not even by
    field name; `given` names the flags given, one given at its default too."""
    for name in ("tempo", "TEMPO", "block_time", "BLOCK_TIME", "yuma3"):
        monkeypatch.setenv(name, "7")
    assert all(f.env is None for f in ChainInitSettings.flags())
    settings = read(ChainInitSettings)
    assert (settings.tempo, settings.block_time, settings.yuma3, settings.given) == (360, 12.0, True, set())
    settings = read(ChainInitSettings, "--tempo", "360", "--commit-reveal", "--yuma3", "no")
    assert settings.given == {"tempo", "commit_reveal_weights", "yuma3"}
    assert (settings.tempo, settings.commit_reveal_weights, settings.yuma3) == (360, True, False)
    assert settings.defaulted() == ChainInitSettings.model_fields.keys() - {
        "tempo",
        "commit_reveal_weights",
        "yuma3",
        "owner_coldkey",
        "owner_hotkey",
    }


def test_a_program_parses_its_own_flags_beside_the_nodes_and_sets_each_miners_wallet():
    """bench/_miner_swarm.py parses its own flags beside the nodes' and sets each miner's wallet."""
    parser = NodeSettings.parser("swarm", "test")
    parser.add_argument("--work.root")
    args = parser.parse_args(["--work.root", "/w", "--netuid", "2"])
    settings = NodeSettings.from_args(args).model_copy(update={"wallet_name": "miner7"})
    assert (settings.wallet_name, settings.netuid, vars(args)["work.root"]) == ("miner7", 2, "/w")


HONEST_PICKS = {
    "the miner's": "from miners.main import miner_behaviour; miner_behaviour('honest')",
    "the validator's": "from validators.main import leader_behaviour; "
    "from validators.settings import ValidatorSettings; leader_behaviour(ValidatorSettings())",
}


def test_the_honest_behaviour_loads_no_cheats():
    """Each role's honest pick, one after the other in one fresh interpreter (one torch import, not
    two, at about 4.5 CPU-s each), checked after each: what the second loads is the second's."""
    checks = "".join(
        f"{pick}; assert not {{'miners.adversaries', 'validators.leader_adversaries'}} & set(sys.modules), "
        f"{role + ' honest pick loaded cheats'!r}\n"
        for role, pick in HONEST_PICKS.items()
    )
    done = subprocess.run(
        [sys.executable, "-c", "import sys\n" + checks], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr[-2000:]


def test_the_chain_commands_read_their_file_by_either_flag_or_its_variable(monkeypatch):
    monkeypatch.setenv("DISTRAI_CHAIN", "env.db")
    monkeypatch.setenv("DISTRAI_NETUID", "4")
    assert (read(ChainFileSettings).chain_path, read(ChainFileSettings).netuid) == ("env.db", 4)
    assert read(ChainFileSettings, "--chain", "a.db").chain_path == "a.db"
    assert read(ChainFileSettings, "--chain.path", "b.db").chain_path == "b.db"
