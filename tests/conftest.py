"""Fixtures shared by several test files."""

from __future__ import annotations

import pytest
from support.findings_net import FinishedNet, run_findings_net
from support.leader_net import run_leader_net


@pytest.fixture(scope="session")
def findings_net(tmp_path_factory) -> FinishedNet:
    """The local network of `support.findings_net`, run to its end once for the whole session."""
    return run_findings_net(tmp_path_factory.mktemp("findings") / "net")


@pytest.fixture(scope="session")
def leader_net(tmp_path_factory) -> FinishedNet:
    """The local network of `support.leader_net`, run to its end once for the whole session."""
    return run_leader_net(tmp_path_factory.mktemp("leaders") / "net")
