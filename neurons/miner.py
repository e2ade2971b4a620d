"""A DisTrAI miner: trains its share of the global model every window and publishes the update.

    python neurons/miner.py --run.config RUN.toml --wallet.name NAME --wallet.hotkey HOTKEY \
        --subtensor.network finney --store.url s3://bucket/prefix --store.endpoint URL --device cuda

On N GPUs, one miner (one hotkey, one manifest, one upload) over data-parallel ranks:

    torchrun --standalone --nproc-per-node N neurons/miner.py … --device cuda

Rank 0 is the miner; the other ranks train the steps it sends them (`distrai.train.parallel`). The
ranks shard the model, its gradients and AdamW's state (FSDP2) when its training state does not fit
one GPU, or with --miner.shard.

Torch and the model code load after the flags are parsed and the checks that need no model have
passed (`distrai.node.build`): `--help` and those refusals answer in well under a second.
"""

from __future__ import annotations

import logging
import os
import sys
import threading
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from distrai.node.stopping import chain_lost, stop_on_signals  # noqa: E402

if __name__ == "__main__":
    STOP = stop_on_signals()  # before the imports below: a Ctrl-C while they load stops cleanly too

from distrai.chain.base import ChainError  # noqa: E402
from distrai.node.build import (  # noqa: E402
    build_node,
    build_parser,
    configure_logging,
    memory_budget,
    prepare_runtime,
)
from distrai.protocol.run import load_run_config  # noqa: E402
from distrai.train.launch import Launch, launched  # noqa: E402
from miners.adversary_names import ADVERSARY_NAMES  # noqa: E402
from miners.kept_states import DEFAULT_MAX_KEPT, check_kept_states  # noqa: E402


def main(argv: list[str] | None = None, stop: threading.Event | None = None) -> int:
    """Run a miner until `stop` (by default, set by SIGINT or SIGTERM from here on). Ranks other than
    0 stop when rank 0 does."""
    stop = stop or stop_on_signals()
    parser = build_parser("neurons/miner.py", __doc__)
    parser.add_argument(
        "--miner.idle",
        action="store_true",
        default=False,
        help="publish a zero update every window without training (the same as --miner.adversary idle)",
    )
    parser.add_argument(
        "--miner.adversary",
        default=os.environ.get("DISTRAI_MINER_ADVERSARY", "honest"),
        choices=["honest", *ADVERSARY_NAMES],
        help="cheat in one of the ways validators must catch, for demonstrations and tests "
        "[env DISTRAI_MINER_ADVERSARY]",
    )
    parser.add_argument(
        "--miner.shard",
        action="store_true",
        default=os.environ.get("DISTRAI_MINER_SHARD", "") not in ("", "0"),
        help="shard the model, its gradients and AdamW's state over the miner's torchrun ranks (FSDP2) "
        "even when they fit one device; without it the ranks shard only when nothing else fits "
        "[env DISTRAI_MINER_SHARD]",
    )
    parser.add_argument(
        "--miner.kept-states",
        type=int,
        default=int(os.environ.get("DISTRAI_MINER_KEPT_STATES", DEFAULT_MAX_KEPT)),
        help="the most boundary states of a window kept on disk while it trains (0: every one); a "
        "challenged one not kept is rebuilt by replay after the draw (miners/kept_states.py) "
        "[env DISTRAI_MINER_KEPT_STATES]",
    )
    args = parser.parse_args(argv)
    try:
        check_kept_states(getattr(args, "miner.kept_states"))
    except ValueError as exc:
        print(f"miner cannot start: {exc}", file=sys.stderr)
        return 2
    adversary = "idle" if getattr(args, "miner.idle") else getattr(args, "miner.adversary")
    launch = launched()
    if launch is None:
        return run_miner(args, adversary, stop)
    from distrai.train import parallel

    device = launch.device(args.device)
    args.device = str(device)
    try:
        own = memory_budget(args)
    except ValueError as exc:
        print(f"miner cannot start: {exc}", file=sys.stderr)
        return 2
    parallel.join(launch, device)
    try:
        budget = parallel.smallest(own, device)
        if launch.rank == 0:
            return run_miner(args, adversary, stop, launch, budget)
        return run_other_rank(args, launch, budget)
    finally:
        parallel.leave()


def run_miner(
    args,
    adversary: str,
    stop: threading.Event,
    launch: Launch | None = None,
    budget: int | None = None,
) -> int:
    """The miner (on rank 0 when torchrun started several processes, whose ranks agreed on the
    memory `budget`)."""
    try:
        node = build_node(args, "miner", launch, budget, stop)
        if adversary != "honest" and node.runtime.parallel is not None and node.runtime.parallel.sharded:
            raise ValueError(
                f"--miner.adversary {adversary} runs on a miner whose ranks do not shard the model "
                "(the adversaries read and write the whole model, which sharded ranks hold in pieces)"
            )
    except (ValueError, FileNotFoundError, ChainError) as exc:
        print(f"miner cannot start: {exc}", file=sys.stderr)
        if launch is not None:
            from distrai.train import parallel

            parallel.all_started(False, args.device)
        return 2
    from distrai.train import parallel

    if launch is not None and not parallel.all_started(True, args.device):
        print("miner cannot start: another of its ranks could not (its error is above)", file=sys.stderr)
        node.metrics.close()
        return 2
    from distrai.data.cache import ShardError
    from miners.adversaries import behaviour
    from miners.miner import Miner

    miner = Miner.from_node(node, behaviour(adversary), getattr(args, "miner.kept_states"))
    miner.announce()
    logging.getLogger("distrai.miner").info(
        "miner %s (%s) started on run %s…",
        node.wallet.hotkey.ss58_address,
        adversary,
        node.runtime.run_id[:12],
    )
    try:
        miner.run(stop, node.max_windows)
    except ShardError as exc:
        print(f"miner stopped: the run's data cannot be read: {exc}", file=sys.stderr)
        return 1
    except ChainError as exc:
        return chain_lost("miner", exc, stop)
    finally:
        node.metrics.close()
        if node.runtime.parallel is not None:
            node.runtime.parallel.shutdown()
    return 0


def run_other_rank(args, launch: Launch, budget: int | None) -> int:
    """A rank other than 0: build the same model and train the steps rank 0 sends, until it stops."""
    from distrai.train import parallel
    from distrai.train.determinism import configure_determinism
    from distrai.train.inner import train_rank_zero_steps

    configure_logging(getattr(args, "logging.level"))
    log = logging.getLogger("distrai.miner")
    configure_determinism(args.device)
    try:
        runtime = prepare_runtime(args, load_run_config(getattr(args, "run.config")), "miner", budget, launch)
    except (ValueError, FileNotFoundError) as exc:
        print(f"rank {launch.rank} cannot start: {exc}", file=sys.stderr)
        parallel.all_started(False, args.device)
        return 2
    if not parallel.all_started(True, args.device):
        return 2
    log.info("rank %d of %d: following rank 0's steps on %s", launch.rank, launch.world, args.device)
    assert runtime.parallel is not None, "prepare_runtime sets the ranks up under torchrun"
    steps = train_rank_zero_steps(runtime.parallel, runtime.loss_fn, runtime.inner)
    log.info("rank %d of %d: rank 0 stopped after %d steps here", launch.rank, launch.world, steps)
    return 0


if __name__ == "__main__":
    sys.exit(main(stop=STOP))
