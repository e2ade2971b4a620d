"""A node starts fast: its flags are parsed, and the refusals that need no model are made, before it
imports torch and transformers (docs/startup.md)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from test_neurons import CPU, common, subnet  # noqa: F401 (subnet: the fixture)

from distrai.node.wallets import create_dev_wallet

REPO = Path(__file__).resolve().parents[1]
MODEL_PACKAGES = {"torch", "transformers", "datasets", "safetensors"}
HELP_PACKAGES = MODEL_PACKAGES | {"boto3", "botocore", "bittensor"}
"""What `--help` must not import: the model's packages, the S3 client, and the `bittensor` package
(`bittensor_core`, its compiled keys, is another, small package)."""


def imported(role: str, *args: str) -> tuple[subprocess.CompletedProcess, set[str]]:
    """Run a neuron under `python -X importtime`; its result and the top-level packages it imported."""
    out = subprocess.run(
        [sys.executable, "-X", "importtime", str(REPO / "neurons" / f"{role}.py"), *args],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "COLUMNS": "200"},
    )
    packages = {
        line.rpartition("|")[2].strip().split(".")[0]
        for line in out.stderr.splitlines()
        if line.startswith("import time:") and not line.endswith("| imported package")
    }
    return out, packages


@pytest.mark.parametrize("role", ["miner", "validator"])
def test_help_imports_neither_torch_nor_transformers_nor_bittensor(role):
    out, packages = imported(role, "--help")
    assert out.returncode == 0 and "--wallet.name" in out.stdout
    assert "distrai" in packages  # the import times were read
    assert not packages & HELP_PACKAGES, sorted(packages & HELP_PACKAGES)


@pytest.mark.parametrize("role", ["miner", "validator"])
def test_refusals_that_need_no_model_come_before_torch(subnet, role):  # noqa: F811
    chain, owner, wallets, tmp_path = subnet
    create_dev_wallet("stranger", "default", wallets)
    refusals = {
        "no run config": (["--work.dir", str(tmp_path / "w")], "no run config: pass --run.config"),
        "work folder": (
            ["--run.config", str(CPU), "--work.dir", str(tmp_path / "chain.db" / "work")],
            "cannot write in the work folder",
        ),
        "missing wallet": (common(chain, wallets, tmp_path, CPU, name="nobody"), "no key file at"),
        "unregistered": (
            common(chain, wallets, tmp_path, CPU, name="stranger"),
            "is not registered on subnet 1; register it with: distrai chain register",
        ),
        "not published": (common(chain, wallets, tmp_path, CPU), "published no run commitment"),
    }
    for what, (args, says) in refusals.items():
        out, packages = imported(role, *args)
        assert out.returncode == 2 and says in out.stderr, (what, out.stderr[-2000:])
        assert not packages & MODEL_PACKAGES, (what, sorted(packages & MODEL_PACKAGES))


def test_the_keypair_is_the_sdks_and_its_signatures_verify_either_way(tmp_path):
    import bittensor_core
    from bittensor.keyfiles import Keypair as SdkKeypair

    from distrai.chain.signing import Keypair

    assert Keypair is bittensor_core.Keypair is SdkKeypair
    wallet, _ = create_dev_wallet("signer", "default", str(tmp_path))
    message = b"distrai/v1\nstart-up"
    ours = Keypair.create_from_mnemonic(Keypair.generate_mnemonic())
    assert SdkKeypair(ss58_address=ours.ss58_address).verify(message, bytes(ours.sign(message)))
    hotkey = wallet.hotkey  # the SDK's wallet: a key read from its key file
    assert Keypair(ss58_address=hotkey.ss58_address).verify(message, bytes(hotkey.sign(message)))
    assert not Keypair(ss58_address=ours.ss58_address).verify(message, bytes(hotkey.sign(message)))


def test_the_light_adversary_names_are_the_behaviour_classes():
    from miners.adversaries import ADVERSARIES
    from miners.adversary_names import ADVERSARY_NAMES
    from validators.leader_adversaries import LEADER_ADVERSARIES
    from validators.leader_adversary_names import LEADER_ADVERSARY_NAMES

    assert tuple(ADVERSARIES) == ADVERSARY_NAMES
    assert all(ADVERSARIES[name].name == name for name in ADVERSARY_NAMES)
    assert tuple(LEADER_ADVERSARIES) == LEADER_ADVERSARY_NAMES


def test_the_codecs_written_out_float32_max_is_torchs():
    import torch

    from distrai.codec.base import FLOAT32_MAX

    assert torch.finfo(torch.float32).max == FLOAT32_MAX
