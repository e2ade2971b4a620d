"""`distrai localnet`: a whole subnet on one machine — wallets, an embedded chain, a file store,
the owner's run commitment, and miners and validators as separate processes started through the
real entry points (`neurons/miner.py`, `neurons/validator.py`).
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from distrai.chain.base import Hyperparameters
from distrai.chain.local import LocalChain
from distrai.data.access import DataAccess, open_data_access
from distrai.data.byte_tokenizer import byte_tokenizer
from distrai.data.prepare import PrepareOptions, prepare
from distrai.data.texts import TextSource, read_texts
from distrai.localnet.local_data import needs_local_data, prepare_local_data
from distrai.localnet.preflight import COLLUDING_LEADER, COLLUDING_MINER, MARKER, prepare_work_dir
from distrai.localnet.warm_start import WarmProcess, WarmStarter, cold_start
from distrai.node.wallets import create_dev_wallet
from distrai.protocol.run import RunConfig, load_run_config, run_commitment, shipped_config_path
from distrai.protocol.runtime import Runtime, build_runtime
from distrai.store import Store, open_store
from distrai.store.base import blob_key

RUN_CONFIG = "run.toml"
"""The run config the network ran, in its folder: the one given, or the template given with the
manifest of the data the network prepared from local files (`local_data.py`)."""
REPO = Path(__file__).resolve().parents[2]
BUILTIN_TEXT = TextSource("builtin", builtin_documents=1000)
BUILTIN_PREPARE = PrepareOptions(shard_tokens=2048, heldout_fraction=0.1)
"""The local network's data: the built-in corpus in shards of 32 sequences of 64 tokens, prepared into
the network's store at setup (`distrai data prepare --builtin 1000 --tokenizer byte --shard-tokens 2048
--heldout-fraction 0.1`); `cpu-localnet.toml` names its manifest."""


def publish_builtin_data(config: RunConfig, store: Store) -> None:
    """Put the built-in corpus, prepared, in `store` when the run config names it there (a run
    config whose data is elsewhere, or not the built-in corpus, is prepared beforehand)."""
    data = config.data
    if data.source != "prepared" or data.store is not None or data.manifest is None:
        return
    if store.exists(blob_key(data.manifest)):
        return
    made = prepare(
        read_texts(BUILTIN_TEXT), byte_tokenizer(), "byte", BUILTIN_TEXT.describe(), store, BUILTIN_PREPARE
    )
    if made.sha256() != data.manifest:
        raise ValueError(
            f"the run config names data manifest {data.manifest}, which is not the local network's built-in "
            f"corpus ({made.sha256()}): prepare it with `distrai data prepare … --store.url` into a store of "
            "its own and name that store as data.store"
        )


def local_runtime(
    config: RunConfig,
    folder: Path,
    device: str = "cpu",
    data_store: str | None = None,
    endpoint: str | None = None,
) -> Runtime:
    """A runtime of `config` outside a node (benchmarks, tests): its prepared data read from
    `data_store` (else the run config's `data.store`, else `folder`/store, where the built-in corpus is
    prepared when the run config names it) and cached in `folder`/cache."""
    own = f"file://{folder / 'store'}"
    if config.data.store is None and data_store is None:
        publish_builtin_data(config, open_store(own))
    access = None
    if config.data.source == "prepared":
        access = open_data_access(
            config.data, folder / "cache", own, mirror_url=data_store, mirror_endpoint=endpoint
        )
    return build_runtime(config, device, access)


@dataclass(frozen=True)
class LocalnetOptions:
    work: Path
    miners: int = 3
    validators: int = 2
    windows: int = 5
    block_time: float = 1.0
    idle_miners: int = 0
    miner_ranks: int = 1
    """Processes of miner0 (torchrun, data parallel over gloo); the other miners run as one."""
    sharded_miner_ranks: int = 1
    """Processes of miner1 when above 1 (torchrun, `--miner.shard`: the model, gradients and optimizer
    state sharded over them, FSDP2 over gloo)."""
    adversaries: tuple[str, ...] = ()
    """One extra miner per entry, cheating in that way (`miners.adversaries.ADVERSARIES`), each with a
    store of its own under `stores/` (as each miner has its own bucket on a real subnet), reading the
    run's data from the network's store."""
    leader_adversaries: tuple[str, ...] = ()
    """The i-th entry makes the validator with the i-th most stake try to steer the global model
    in that way (`validators.leader_adversaries.LEADER_ADVERSARIES`); followers must refuse it. A `collude`
    leader colludes with the `poison` adversary among `adversaries` (it is given that miner's hotkey)."""
    run_config: Path = field(default_factory=lambda: shipped_config_path("cpu-localnet"))
    miner_bandwidth: float | None = None
    """Bytes per second each miner's store traffic is limited to (`--store.bandwidth`): a link."""
    device: str = "cpu"
    """Every node's torch device (`--device`): on "cuda" the miners and validators share the GPU."""
    data_files: tuple[str, ...] = ()
    """Local text the network prepares its data from, when the run config's data is a template."""
    warm_start: bool = False
    """Fork each node that runs as one process from a warm interpreter that imported torch and
    transformers once (`warm_start.py`), instead of a fresh `python` that imports them again (~4 CPU-s
    a start); its script, flags, environment, folder and log are the same."""
    store_url: str | None = None
    """Where every honest node publishes (`--store.url`) and the network puts the run's data; None:
    a file store in `work`/store. An `s3://bucket/prefix` URL names its endpoint and addressing in
    its query (`?endpoint=http://127.0.0.1:9000&path_style=true`, `distrai.store.open_store`), so that
    the URL the nodes announce reaches it; its bucket must exist. The adversaries keep file stores
    of their own under `stores/` and read the run's data from this one."""
    store_credentials: tuple[str, str] | None = field(default=None, repr=False)
    """(access key id, secret access key) of an s3:// `store_url`: the network opens its store with
    them and gives them to the nodes as AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY. None: boto3's
    own chain (the environment, a profile)."""


@dataclass
class Neuron:
    name: str
    role: str
    wallet_name: str
    work_dir: Path
    log_path: Path
    args: list[str]
    process: subprocess.Popen | WarmProcess | None = None

    def start(self, env: dict[str, str], warm: WarmStarter | None = None) -> None:
        """`python *args` in `env`, appending to the node's log; forked by `warm` when given."""
        self.process = (warm.start if warm is not None else cold_start)(self.args, env, REPO, self.log_path)

    def running(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def stop(self, timeout: float = 20.0) -> None:
        """SIGINT first (the node finishes its step and saves), then SIGKILL if it does not exit."""
        if not self.running():
            return
        process = self.process
        assert process is not None, "running() says it was started"
        process.send_signal(signal.SIGINT)
        try:
            process.wait(timeout)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()

    def kill(self) -> None:
        if self.running():
            assert self.process is not None, "running() says it was started"
            self.process.kill()
            self.process.wait()


def _setup_order(name: str) -> tuple[int, int, str]:
    """Where `setup` adds node `name`: validators, then miners, then adversaries, each by number."""
    kind = 0 if name.startswith("validator") else 2 if name.startswith("adversary-") else 1
    digits = name.removeprefix("validator").removeprefix("miner")
    return kind, int(digits) if digits.isdigit() else 0, name


def chain_hyperparameters(config: RunConfig, neurons: int = 0) -> Hyperparameters:
    """A development subnet whose epochs and weight limits fit the run's windows, with room for
    `neurons` registrations at once (at least 64)."""
    bpw = config.windows.blocks_per_window
    uids = max(64, neurons)
    return Hyperparameters(
        tempo=max(2, bpw // 3),
        max_uids=uids,
        max_validators=16,
        immunity_period=10_000,
        min_allowed_weights=1,
        weights_rate_limit=max(1, bpw // 2),
        activity_cutoff=10_000,
        commitment_max_bytes=1024,
        commitment_rate_limit=1,
        max_registrations_per_block=uids,
    )


class Localnet:
    def __init__(self, options: LocalnetOptions):
        self.options = options
        self.work = options.work.resolve()
        self.config = load_run_config(options.run_config)
        self.neurons: list[Neuron] = []
        self.chain: LocalChain | None = None
        self.started_block = 0
        self.started_env: dict[str, str] | None = None
        self.warm: WarmStarter | None = None
        """the environment the nodes started in; a restarted node gets it again"""

    @classmethod
    def reopen(cls, work: Path) -> Localnet:
        """The network that ran in folder `work`, for reading what it left: the run config it ran,
        its chain and its nodes (none started), validators first, in the order `setup` adds them."""
        work = work.resolve()
        if not (work / MARKER).exists() or not (work / RUN_CONFIG).exists():
            raise ValueError(
                f"{work} holds no network run by `distrai localnet` (no {MARKER} or {RUN_CONFIG})"
            )
        net = cls(LocalnetOptions(work=work, run_config=work / RUN_CONFIG))
        net.chain = LocalChain(work / "chain.db", net.config.netuid)
        folders = [p for p in (work / "nodes").iterdir() if p.is_dir()]
        for folder in sorted(folders, key=lambda p: _setup_order(p.name)):
            role = "validator" if folder.name.startswith("validator") else "miner"
            log = work / "logs" / f"{folder.name}.log"
            net.neurons.append(Neuron(folder.name, role, folder.name, folder, log, []))
        return net

    @property
    def wallet_path(self) -> Path:
        return self.work / "wallets"

    @property
    def store_url(self) -> str:
        """The honest nodes' store (`LocalnetOptions.store_url`; by default the file store in `work`/store)."""
        return self.options.store_url or f"file://{self.work / 'store'}"

    def open_store(self, create: bool = True) -> Store:
        """The honest nodes' store, opened with the network's credentials; `create=False` to read it
        (a file store's folder is then neither made nor swept of temp files, `FileStore`)."""
        keys = self.options.store_credentials
        if keys is None:
            return open_store(self.store_url, create=create)
        return open_store(self.store_url, access_key_id=keys[0], secret_access_key=keys[1], create=create)

    def setup(self) -> None:
        """Wallets, chain, registrations, stake, permits and the owner's run commitment."""
        if not (REPO / "neurons" / "miner.py").exists():
            raise ValueError(
                f"neurons/miner.py is not beside the installed package ({REPO}); "
                "run from a checkout installed with `pip install -e .`"
            )
        prepare_work_dir(self.work)
        self._settle_run_config()
        o = self.options
        owner, _ = create_dev_wallet("owner", "default", str(self.wallet_path))
        chain = LocalChain.create(
            self.work / "chain.db",
            netuid=self.config.netuid,
            block_time=o.block_time,
            hyperparameters=chain_hyperparameters(
                self.config, 1 + o.validators + o.miners + len(o.adversaries)
            ),
            owner_coldkey=owner.coldkeypub.ss58_address,
            owner_hotkey=owner.hotkey.ss58_address,
        )
        self.chain = chain
        chain.register(owner)
        chain.commit(owner, run_commitment(self.config))
        for i in range(o.validators):
            wallet, _ = create_dev_wallet(f"validator{i}", "default", str(self.wallet_path))
            chain.register(wallet)
            chain.add_stake(wallet, 1000.0 * (o.validators - i))
            steer = o.leader_adversaries[i] if i < len(o.leader_adversaries) else None
            self._add("validator", f"validator{i}", self._leader_args(steer))
        for i in range(o.miners):
            wallet, _ = create_dev_wallet(f"miner{i}", "default", str(self.wallet_path))
            chain.register(wallet)
            idle = ["--miner.idle"] if i >= o.miners - o.idle_miners else []
            ranks = {0: o.miner_ranks, 1: o.sharded_miner_ranks}.get(i, 1)
            shard = ["--miner.shard"] if i == 1 and ranks > 1 else []
            self._add("miner", f"miner{i}", idle + shard + self._link(), ranks)
        for name in o.adversaries:
            wallet, _ = create_dev_wallet(f"adversary-{name}", "default", str(self.wallet_path))
            chain.register(wallet)
            self._add(
                "miner",
                f"adversary-{name}",
                ["--miner.adversary", name, "--data.store", self.store_url, *self._link()],
                store_url=f"file://{self.work / 'stores' / name}",
            )
        chain.advance(chain.hyperparameters().tempo + 2)
        self.started_block = chain.block()

    @property
    def run_config(self) -> Path:
        """The run config the nodes run (in the network's folder once set up)."""
        return self.work / RUN_CONFIG

    def _settle_run_config(self) -> None:
        """Put the run's data in the store (the built-in corpus, or the local files a template's data
        is prepared from) and the run config the nodes run in the network's folder."""
        o = self.options
        if needs_local_data(self.config):
            self.config = prepare_local_data(o.run_config, o.data_files, self.open_store(), self.run_config)
            return
        if o.data_files:
            raise ValueError(f"{o.run_config} names its data already; --data.files applies to a template")
        publish_builtin_data(self.config, self.open_store())
        shutil.copyfile(o.run_config, self.run_config)

    def _leader_args(self, steer: str | None) -> list[str]:
        """A validator's flags for the leader adversary `steer` (None: honest); a colluding leader is
        told the hotkey of the `poison` adversary, its colluding miner."""
        if steer is None:
            return []
        if steer != COLLUDING_LEADER:
            return ["--validator.adversary", steer]
        if COLLUDING_MINER not in self.options.adversaries:
            raise ValueError(
                f"--leader-adversary {COLLUDING_LEADER} needs --adversary {COLLUDING_MINER} (its miner)"
            )
        miner, _ = create_dev_wallet(f"adversary-{COLLUDING_MINER}", "default", str(self.wallet_path))
        return ["--validator.adversary", steer, "--validator.colluder", miner.hotkey.ss58_address]

    def data_access(self) -> DataAccess | None:
        """Where the network's nodes read prepared data (None for built-in data)."""
        if self.config.data.source != "prepared":
            return None
        if self.config.data.store is None:
            return DataAccess(self.open_store(), self.work / "data")
        return open_data_access(self.config.data, self.work / "data", own_url=self.store_url)

    def _link(self) -> list[str]:
        bandwidth = self.options.miner_bandwidth
        return [] if bandwidth is None else ["--store.bandwidth", repr(float(bandwidth))]

    def _add(
        self, role: str, name: str, extra: list[str], ranks: int = 1, store_url: str | None = None
    ) -> None:
        work_dir = self.work / "nodes" / name
        work_dir.mkdir(parents=True, exist_ok=True)
        script = str(REPO / "neurons" / f"{role}.py")
        launcher = (
            [] if ranks == 1 else ["-m", "torch.distributed.run", "--standalone", f"--nproc-per-node={ranks}"]
        )
        args = [
            *launcher,
            script,
            "--run.config",
            str(self.run_config),
            "--netuid",
            str(self.config.netuid),
            "--wallet.name",
            name,
            "--wallet.hotkey",
            "default",
            "--wallet.path",
            str(self.wallet_path),
            "--subtensor.network",
            "embedded",
            "--chain.path",
            str(self.work / "chain.db"),
            "--store.url",
            store_url or self.store_url,
            "--work.dir",
            str(work_dir),
            "--max.windows",
            str(self.options.windows),
            "--device",
            self.options.device,
            *extra,
        ]
        self.neurons.append(Neuron(name, role, name, work_dir, self.work / "logs" / f"{name}.log", args))

    def env(self, base: Mapping[str, str] | None = None) -> dict[str, str]:
        """The nodes' environment: `base` (this process's environment if None) with the network's settings."""
        env = dict(os.environ if base is None else base)
        env.update(
            PYTHONUNBUFFERED="1",
            OMP_NUM_THREADS="1",
            MKL_NUM_THREADS="1",
            TOKENIZERS_PARALLELISM="false",
            HF_HUB_OFFLINE="1",
            HF_DATASETS_OFFLINE="1",
            WANDB_MODE="offline",
            WANDB_SILENT="true",
            COLUMNS="160",
        )
        keys = self.options.store_credentials
        if keys is not None:
            env.update(AWS_ACCESS_KEY_ID=keys[0], AWS_SECRET_ACCESS_KEY=keys[1])
        return env

    def start(self, base_env: Mapping[str, str] | None = None) -> None:
        """Start every node, in `env(base_env)`; if one cannot start, stop those that did and raise."""
        (self.work / "logs").mkdir(exist_ok=True)
        self.started_env = self.env(base_env)
        try:
            if self.options.warm_start:
                self.warm = WarmStarter(self.started_env, REPO, self.work / "logs" / "warm-start.log")
            for neuron in self.neurons:
                neuron.start(self.started_env, self.warm)
        except BaseException:
            self.stop()
            raise

    def neuron(self, name: str) -> Neuron:
        return next(n for n in self.neurons if n.name == name)

    def failed(self) -> list[str]:
        """The nodes that have exited with an error (a nonzero status), by name."""
        return [n.name for n in self.neurons if n.process is not None and n.process.poll() not in (None, 0)]

    def restart(self, name: str) -> None:
        """Kill node `name` and start it with the same command, in the environment the network
        started in (not the caller's now, which a test may have changed)."""
        neuron = self.neuron(name)
        neuron.kill()
        neuron.start(self.started_env if self.started_env is not None else self.env(), self.warm)

    def wait(self, timeout: float, poll=None) -> bool:
        """Until every neuron has exited (True) or `timeout` seconds pass (False)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if poll is not None:
                poll()
            if not any(n.running() for n in self.neurons):
                return True
            time.sleep(0.5)
        return False

    def stop(self) -> None:
        for neuron in self.neurons:
            if neuron.running():
                assert neuron.process is not None, "running() says it was started"
                neuron.process.send_signal(signal.SIGINT)
        for neuron in self.neurons:
            neuron.stop()
        if self.warm is not None:
            self.warm.stop()
