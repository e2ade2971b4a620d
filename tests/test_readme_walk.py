"""The README walks: its embedded-chain walk, run as written (`support.readme_net`) on the embedded
chain and a moto S3 server, creates the wallets and the chain, registers and stakes, prepares the
data, publishes the run, checks the miner's link, and runs one miner for 2 windows and one validator
for 4; the miner is paid. (With 3 windows each, a miner that started a window after the validator,
on a busy machine, was scored in the validator's last window, whose scores no weights took in.)"""

from __future__ import annotations

import re
import shlex

from support.readme_net import README, commands, walk_lines

from distrai.chain.local import LocalChain
from distrai.node.wallets import open_wallet
from distrai.protocol.run import load_run_config

STEPS = (
    ["distrai", "wallet", "create"],
    ["distrai", "chain", "init"],
    ["distrai", "chain", "register"],
    ["distrai", "chain", "stake"],
    ["distrai", "data", "prepare"],
    ["distrai", "run", "publish"],
    ["distrai", "doctor"],
    ["python", "neurons/miner.py"],
    ["python", "neurons/validator.py"],
)


def test_the_readme_walk_holds_every_step_in_order():
    argvs = [argv for line in walk_lines(README.read_text()) for argv in commands(line)]
    firsts = [next(i for i, argv in enumerate(argvs) if argv[: len(step)] == step) for step in STEPS]
    assert firsts == sorted(firsts), [" ".join(argv[:3]) for argv in argvs]
    nodes = [argv for argv in argvs if argv[0] == "python"]
    windows = [argv[argv.index("--max.windows") + 1] if "--max.windows" in argv else None for argv in nodes]
    assert [argv[1] for argv in nodes] == ["neurons/miner.py", "neurons/validator.py"]
    # the validator outlasts the miner: a miner that joins a window late is still scored and paid
    assert windows == ["2", "4"], nodes


def test_the_readme_walk_pays_its_miner(readme_net):
    net = readme_net.net
    assert net.error is None, repr(net.error)
    walk = [argv for line in walk_lines(README.read_text()) for argv in commands(line)]
    for ran in net.ran:
        assert ran.returncode == 0, f"{shlex.join(ran.argv)} exited {ran.returncode}: {ran.output[-3000:]}"
    assert len(net.ran) == sum(argv[0] != "python" for argv in walk)
    doctor = next(ran.output for ran in net.ran if ran.argv[1] == "doctor")
    assert re.search(r"verdict\W+OK\b", doctor), doctor

    logs = {n.name: n.log_path.read_text()[-3000:] for n in net.nodes}
    assert [n.name for n in net.nodes] == ["miner", "validator"]
    assert readme_net.finished, f"the nodes did not finish their windows: {logs}"
    for node in net.nodes:
        assert node.process.returncode == 0, logs[node.name]

    wallets = str(net.home / ".bittensor" / "wallets")
    miner = open_wallet("miner", "default", wallets).hotkey.ss58_address
    chain = LocalChain(net.chain_path, load_run_config(net.run_config).netuid)
    neuron = chain.metagraph().neuron(miner)
    assert neuron.incentive > 0 and neuron.total_emission > 0, (neuron, logs)
