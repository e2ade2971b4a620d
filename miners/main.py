"""A DisTrAI miner: trains its share of the global model every window and publishes the update.

    distrai-miner --run.config RUN.toml --wallet.name NAME --wallet.hotkey HOTKEY \
        --subtensor.network finney --store.url s3://bucket/prefix --store.endpoint URL --device cuda

(`python neurons/miner.py …` runs the same.) On N GPUs, one miner (one hotkey, one manifest, one
upload) over data-parallel ranks:

    torchrun --standalone --nproc-per-node N neurons/miner.py … --device cuda

Rank 0 is the miner; the other ranks train the steps it sends them (`distrai.train.parallel`). The
ranks shard the model, its gradients and AdamW's state (FSDP2) when its training state does not fit
one GPU, or with --miner.shard.

Torch and the model code load after the flags are read (`miners.settings.MinerSettings`) and the
checks that need no model have passed (`distrai.node.build`): `--help` and those refusals answer in
well under a second. The honest miner loads none of the cheats (`miners.adversaries`).
"""

from __future__ import annotations

import logging
import sys
import threading
from typing import TYPE_CHECKING

from distrai.chain.base import ChainError
from distrai.node.build import build_node, configure_logging, memory_budget, prepare_runtime, run_node
from distrai.node.settings import SettingsError
from distrai.node.stopping import stop_on_signals
from distrai.protocol.run import load_run_config
from distrai.train.launch import Launch, launched
from miners.settings import MinerSettings

if TYPE_CHECKING:
    from miners.miner import Behaviour


def main(argv: list[str] | None = None, stop: threading.Event | None = None) -> int:
    """Run a miner until `stop` (by default, set by SIGINT or SIGTERM from here on). Ranks other than
    0 stop when rank 0 does."""
    stop = stop or stop_on_signals()
    args = MinerSettings.parser(description=__doc__).parse_args(argv)
    try:
        settings = MinerSettings.from_args(args)
    except SettingsError as exc:
        print(f"miner cannot start: {exc}", file=sys.stderr)
        return 2
    launch = launched()
    if launch is None:
        return run_miner(settings, stop)
    from distrai.train import parallel

    device = launch.device(settings.device)
    settings = settings.model_copy(update={"device": str(device)})
    own = memory_budget(settings)
    parallel.join(launch, device)
    try:
        budget = parallel.smallest(own, device)
        if launch.rank == 0:
            return run_miner(settings, stop, launch, budget)
        return run_other_rank(settings, launch, budget)
    finally:
        parallel.leave()


def miner_behaviour(name: str) -> Behaviour:
    """The honest miner's behaviour, or the cheat called `name` (`miners.adversaries`, loaded only
    for one)."""
    from miners.miner import Behaviour  # imports torch

    if name == "honest":
        return Behaviour()
    from miners.adversaries import behaviour

    return behaviour(name)


def run_miner(
    settings: MinerSettings,
    stop: threading.Event,
    launch: Launch | None = None,
    budget: int | None = None,
) -> int:
    """The miner (on rank 0 when torchrun started several processes, whose ranks agreed on the
    memory `budget`)."""
    adversary = settings.miner_adversary
    try:
        node = build_node(settings, "miner", launch, budget, stop, shard=settings.miner_shard)
        if adversary != "honest" and node.runtime.parallel is not None and node.runtime.parallel.sharded:
            raise ValueError(
                f"--miner.adversary {adversary} runs on a miner whose ranks do not shard the model "
                "(the adversaries read and write the whole model, which sharded ranks hold in pieces)"
            )
    except (ValueError, FileNotFoundError, ChainError) as exc:
        print(f"miner cannot start: {exc}", file=sys.stderr)
        if launch is not None:
            from distrai.train import parallel

            parallel.all_started(False, settings.device)
        return 2
    from distrai.train import parallel

    if launch is not None and not parallel.all_started(True, settings.device):
        print("miner cannot start: another of its ranks could not (its error is above)", file=sys.stderr)
        node.metrics.close()
        return 2
    from miners.miner import Miner, MinerOptions

    options = MinerOptions(node.work_dir, miner_behaviour(adversary), settings.miner_kept_states)
    miner = Miner(node, options)
    miner.announce()
    logging.getLogger("distrai.miner").info(
        "miner %s (%s) started on run %s…",
        node.wallet.hotkey.ss58_address,
        adversary,
        node.runtime.run_id[:12],
    )
    return run_node("miner", node, lambda: miner.run(stop, node.max_windows), stop)


def run_other_rank(settings: MinerSettings, launch: Launch, budget: int | None) -> int:
    """A rank other than 0: build the same model and train the steps rank 0 sends, until it stops."""
    from distrai.train import parallel
    from distrai.train.determinism import configure_determinism
    from distrai.train.inner import train_rank_zero_steps

    configure_logging(settings.logging_level)
    log = logging.getLogger("distrai.miner")
    configure_determinism(settings.device)
    try:
        if not settings.run_config:
            raise ValueError("no run config: pass --run.config PATH (the subnet owner's TOML)")
        config = load_run_config(settings.run_config)
        runtime = prepare_runtime(settings, config, "miner", budget, launch, shard=settings.miner_shard)
    except (ValueError, FileNotFoundError) as exc:
        print(f"rank {launch.rank} cannot start: {exc}", file=sys.stderr)
        parallel.all_started(False, settings.device)
        return 2
    if not parallel.all_started(True, settings.device):
        return 2
    log.info("rank %d of %d: following rank 0's steps on %s", launch.rank, launch.world, settings.device)
    assert runtime.parallel is not None, "prepare_runtime sets the ranks up under torchrun"
    steps = train_rank_zero_steps(runtime.parallel, runtime.loss_fn, runtime.inner)
    log.info("rank %d of %d: rank 0 stopped after %d steps here", launch.rank, launch.world, steps)
    return 0


if __name__ == "__main__":
    sys.exit(main())
