"""Starting a local network's nodes: when one cannot start, the nodes started before it are stopped
and the error is raised, so that nothing is left running that no caller holds (`Localnet.start`)."""

from __future__ import annotations

import pytest

from distrai.localnet.network import Localnet, LocalnetOptions


def test_a_node_that_cannot_start_stops_those_that_did(tmp_path):
    net = Localnet(LocalnetOptions(work=tmp_path / "net", miners=1, validators=1, windows=1))
    net.setup()
    first, last = net.neurons[0], net.neurons[-1]
    first.args = ["-c", "import time; time.sleep(600)"]  # a process that starts at once and costs nothing
    last.log_path = tmp_path / "no such folder" / "node.log"
    with pytest.raises(FileNotFoundError, match="no such folder"):
        net.start()
    assert first.process is not None and first.process.poll() is not None, "the started node was stopped"
    assert last.process is None
    assert not any(n.running() for n in net.neurons)
