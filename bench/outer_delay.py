"""The outer step under a one-window delay, in one process: three miners' H inner steps on
`distrai/configs/cpu-localnet.toml`'s model and data (H = 240 by default), the run's codec with each
miner's error feedback, and the project's own `outer_step`, either sequential (window w trains from
the model the last outer step produced) or pipelined (window w trains from the model before it, as
`pipelined = true` does). Prints the held-out loss after every window and, last, the whole curve.
Single-threaded, about 5.5 minutes for 7 windows on one core; docs/protocol.md ("The outer step
under delay") compares the curves it printed. With `--output`, also writes the curve to a markdown
page (the notes below its marker are kept).

    python bench/outer_delay.py MODE LR MOMENTUM [--no-nesterov] [--inner-steps H] [--windows W]
    python bench/outer_delay.py seq 0.7 0.9          # DiLoCo's outer step, sequential windows
    python bench/outer_delay.py pipe 0.7 0.3         # pipelined, momentum 0.3
    python bench/outer_delay.py pipe 0.7 0.3 --quick --output FILE.md   # seconds: every code path
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import shlex
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from _report import NOTES_MARKER, Machine, kept_notes  # noqa: E402

from distrai.localnet.network import local_runtime  # noqa: E402
from distrai.protocol.run import load_run_config, shipped_config_path  # noqa: E402
from distrai.train.assignment import batch_indices  # noqa: E402
from distrai.train.evaluate import evaluate  # noqa: E402
from distrai.train.inner import inner_loop  # noqa: E402
from distrai.train.outer import Contribution, OuterConfig, OuterState, outer_step  # noqa: E402

MINERS = ["5miner0" + "x" * 40, "5miner1" + "x" * 40, "5miner2" + "x" * 40]
QUICK_INNER_STEPS, QUICK_WINDOWS = 15, 2
"""H a whole number of the CPU config's segments (15 steps)"""


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("mode", choices=("seq", "pipe"), help="sequential or pipelined windows")
    parser.add_argument("lr", type=float, help="the outer learning rate")
    parser.add_argument("momentum", type=float, help="the outer momentum")
    parser.add_argument(
        "--no-nesterov", dest="nesterov", action="store_false", help="plain momentum (default: Nesterov)"
    )
    parser.add_argument("--inner-steps", type=int, default=240, help="H, each miner's inner steps a window")
    parser.add_argument("--windows", type=int, default=7, help="outer steps")
    parser.add_argument(
        "--boundary-moments",
        choices=("float32", "bfloat16"),
        help="what a segment boundary keeps of AdamW's moments (default: the config's `train.boundary_moments`)",
    )
    parser.add_argument(
        "--quick",
        action="store_true",
        help=f"H = {QUICK_INNER_STEPS}, {QUICK_WINDOWS} windows: every code path, meaningless numbers",
    )
    parser.add_argument(
        "--output", type=Path, default=None, help="also write the curve to this markdown page"
    )
    args = parser.parse_args(argv)
    if args.quick:
        args.inner_steps, args.windows = QUICK_INNER_STEPS, QUICK_WINDOWS
    if args.boundary_moments is None:
        args.boundary_moments = load_run_config(shipped_config_path("cpu-localnet")).train.boundary_moments
    return args


def run(args: argparse.Namespace) -> list[dict]:
    """The held-out loss before the first window and after each, with the seconds since the start."""
    H = args.inner_steps
    cfg = load_run_config(shipped_config_path("cpu-localnet"))
    train = cfg.train.model_copy(update={"inner_steps": H, "boundary_moments": args.boundary_moments})
    cfg = cfg.model_copy(update={"train": train})
    with tempfile.TemporaryDirectory(prefix="outer-delay-data-") as data_folder:
        rt = local_runtime(cfg, Path(data_folder))
        rt = dataclasses.replace(rt, inner=dataclasses.replace(rt.inner, inner_steps=H))
        outer_cfg = OuterConfig(
            lr=args.lr, momentum=args.momentum, nesterov=args.nesterov, clip_to_median_norm=True
        )
        M = rt.initial_params()
        prev = M
        state = OuterState(momentum={})
        residual = {m: None for m in MINERS}

        def heldout(params):
            rt.load_params(params)
            return evaluate(rt.model, rt.data.heldout, loss_fn=rt.loss_fn)

        curve = [{"w": 0, "loss": heldout(M), "s": 0}]
        t0 = time.time()
        for w in range(1, args.windows + 1):
            base = M if args.mode == "seq" else prev
            contributions = []
            for m in MINERS:
                rt.load_params(base)

                def batch(t, m=m, w=w):
                    return rt.data.batch(
                        batch_indices(
                            rt.run_id, w, m, t, cfg.train.batch_size, rt.data.n_train, MINERS, rt.data.unit
                        )
                    )

                res = inner_loop(rt.model, batch, rt.loss_fn, rt.inner, keep_states=False)
                enc = rt.codec.encode(res.pseudo_gradient, residual[m])
                residual[m] = enc.residual
                dec = rt.codec.decode(enc.payload, enc.metadata, rt.shapes())
                contributions.append(Contribution(m, dec, 1.0 / len(MINERS)))
            out = outer_step(M, contributions, state, outer_cfg)
            prev, M, state = M, out.params, out.state
            curve.append({"w": w, "loss": heldout(M), "s": round(time.time() - t0)})
            print(json.dumps(curve[-1]), flush=True)
    return curve


def write_page(path: Path, args: argparse.Namespace, curve: list[dict], command: str) -> None:
    machine = Machine.here()
    mode = "sequential" if args.mode == "seq" else "pipelined (one-window delay)"
    lines = [
        "# The outer step under delay",
        "",
        "Written by `bench/outer_delay.py`. The command that produced these numbers:",
        "",
        f"```\n{command}\n```",
        "",
        f"- date: {datetime.now(UTC):%Y-%m-%d %H:%M} UTC; the windows' wall time: {curve[-1]['s']} s",
        f"- machine: {machine.cpu}, {machine.cores} cores (one thread); torch {machine.torch}; "
        f"Python {machine.python}",
        f"- run: `distrai/configs/cpu-localnet.toml`'s model, data and codec; {len(MINERS)} miners, "
        f"H = {args.inner_steps}, {args.windows} windows, {mode}; AdamW's moments at segment boundaries: "
        f"{args.boundary_moments}; outer lr {args.lr}, momentum "
        f"{args.momentum}, {'Nesterov' if args.nesterov else 'plain momentum'}",
        "",
        "| window | held-out loss | seconds |",
        "|---|---|---|",
        *(f"| {p['w']} | {p['loss']:.4f} | {p['s']} |" for p in curve),
        "",
        NOTES_MARKER,
    ]
    path.write_text("\n".join(lines) + "\n" + kept_notes(path))


def main(argv: list[str]) -> int:
    args = parse_args(argv)
    torch.set_num_threads(1)
    curve = run(args)
    print(
        json.dumps(
            {
                "mode": args.mode,
                "lr": args.lr,
                "mom": args.momentum,
                "nesterov": args.nesterov,
                "H": args.inner_steps,
                "moments": args.boundary_moments,
                "curve": [p["loss"] for p in curve],
            }
        )
    )
    if args.output is not None:
        write_page(args.output, args, curve, shlex.join(["python", "bench/outer_delay.py", *argv]))
        print(f"written to {args.output}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
