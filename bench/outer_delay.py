"""The outer step under a one-window delay, in one process: three miners' H inner steps on
`distrai/configs/cpu-localnet.toml`'s model and data (H = 240 by default), the run's codec with each
miner's error feedback, and the project's own `outer_step`, either sequential (window w trains from
the model the last outer step produced) or pipelined (window w trains from the model before it, as
`pipelined = true` does). Prints the held-out loss after every window and, last, the whole curve.
Single-threaded, about 5.5 minutes for 7 windows on one core; docs/protocol.md ("The outer step
under delay") compares the curves it printed.

    python bench/outer_delay.py MODE LR MOMENTUM [NESTEROV] [H] [WINDOWS]
    python bench/outer_delay.py seq 0.7 0.9          # DiLoCo's outer step, sequential windows
    python bench/outer_delay.py pipe 0.7 0.3         # pipelined, momentum 0.3
"""

import dataclasses
import json
import sys
import tempfile
import time
from pathlib import Path

import torch

from distrai.localnet.network import local_runtime
from distrai.protocol.run import load_run_config, shipped_config_path
from distrai.train.assignment import batch_indices
from distrai.train.evaluate import evaluate
from distrai.train.inner import inner_loop
from distrai.train.outer import Contribution, OuterConfig, OuterState, outer_step

mode, lr, mom = sys.argv[1], float(sys.argv[2]), float(sys.argv[3])
nesterov = sys.argv[4] == "1" if len(sys.argv) > 4 else True
H = int(sys.argv[5]) if len(sys.argv) > 5 else 240
W = int(sys.argv[6]) if len(sys.argv) > 6 else 7
torch.set_num_threads(1)
cfg = load_run_config(shipped_config_path("cpu-localnet"))
cfg = cfg.model_copy(update={"train": cfg.train.model_copy(update={"inner_steps": H})})
data_folder = tempfile.TemporaryDirectory(prefix="outer-delay-data-")  # removed when the run ends
rt = local_runtime(cfg, Path(data_folder.name))
rt = dataclasses.replace(rt, inner=dataclasses.replace(rt.inner, inner_steps=H))
miners = ["5miner0" + "x" * 40, "5miner1" + "x" * 40, "5miner2" + "x" * 40]
outer_cfg = OuterConfig(lr=lr, momentum=mom, nesterov=nesterov, clip_to_median_norm=True)
M = rt.initial_params()
prev = M
state = OuterState(momentum={})
residual = {m: None for m in miners}


def heldout(params):
    rt.load_params(params)
    return evaluate(rt.model, rt.data.heldout, loss_fn=rt.loss_fn)


curve = [heldout(M)]
t0 = time.time()
for w in range(1, W + 1):
    base = M if mode == "seq" else prev
    contributions = []
    for m in miners:
        rt.load_params(base)

        def batch(t, m=m, w=w):
            return rt.data.batch(
                batch_indices(rt.run_id, w, m, t, cfg.train.batch_size, rt.data.n_train, miners, rt.data.unit)
            )

        res = inner_loop(rt.model, batch, rt.loss_fn, rt.inner, keep_states=False)
        enc = rt.codec.encode(res.pseudo_gradient, residual[m])
        residual[m] = enc.residual
        dec = rt.codec.decode(enc.payload, enc.metadata, rt.shapes())
        contributions.append(Contribution(m, dec, 1.0 / len(miners)))
    out = outer_step(M, contributions, state, outer_cfg)
    prev, M, state = M, out.params, out.state
    curve.append(heldout(M))
    print(json.dumps({"w": w, "loss": curve[-1], "s": round(time.time() - t0)}), flush=True)
print(json.dumps({"mode": mode, "lr": lr, "mom": mom, "nesterov": nesterov, "H": H, "curve": curve}))
