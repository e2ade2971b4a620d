"""The miner's inner loop: up to H steps from the global model, with a committed state every k steps.

Every window starts from (θ_global, a fresh AdamW with no state, step 0), so anyone holding the
global model can compute boundary 0's hash (`window_start_state`). Boundaries sit at inner steps
0, k, 2k, …, h (h/k + 1 of them), where h ≤ H is the whole segments the miner had time for (a miner
trains until its commit deadline, `go_on`); segment s runs from boundary s to boundary s+1. Each boundary
carries the canonical hash of (parameters, optimizer state, step), a linear sketch of the
parameters, and, when asked, the state itself so the miner can reveal it later. The
pseudo-gradient is θ_global − θ_local in float32 on the CPU: the direction an outer SGD step
subtracts, as DiLoCo defines it.

`run_steps` is the shared core of training and replay: it sets the scheduled learning rate of
each inner step and calls the one `train_step`, anchored to the window's base when the run sets
`base_anchor` (see `step.py`). A miner on several processes (`parallel.py`) runs `inner_loop` on
its leader (rank 0), which sends each window's start and each step's batch to the followers; they
run the same steps in `train_rank_zero_steps`. Sharded ranks also gather every boundary state
together (STATE), so the leader's states, hashes and update are those of one process holding the
whole model.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field

import torch

from distrai.train.boundaries import BoundaryState, BoundaryWorker
from distrai.train.loss import LossFn
from distrai.train.optimizer import (
    BOUNDARY_MOMENTS,
    InnerOptimizerConfig,
    make_inner_optimizer,
    round_moments,
    set_lr,
)
from distrai.train.parallel import LOAD, SHUTDOWN, STATE, STEP, WINDOW, DataParallel
from distrai.train.step import Anchor, StepConfig, StepResult, anchor_to, step_with
from distrai.train.train_state import TrainState, capture_state


class TimeUp(Exception):
    """Raised by a `batch_for_step` when the window's training time ran out in the middle of a
    segment (its data was out of reach, say): `inner_loop` ends the window at the last boundary."""


@dataclass(frozen=True)
class InnerConfig:
    """At most H inner steps in segments of k, the inner optimizer, how each step runs, and the sketch."""

    inner_steps: int
    segment_steps: int
    optimizer: InnerOptimizerConfig = field(default_factory=InnerOptimizerConfig)
    step: StepConfig = field(default_factory=StepConfig)
    sketch_seed: str = ""
    sketch_size: int = 64
    base_anchor: float = 0.0
    """How far each step pulls toward the window's base, per unit of learning rate (0: not at all)."""
    base_on_host: bool = False
    """Keep that base in host memory, copied in at each step, when the device has no room for it
    (`memory.py`; the same bits, so a replay need not follow the miner's choice)."""
    boundary_moments: str = "float32"
    """"bfloat16": the last step of every segment rounds AdamW's moments to bfloat16
    (`optimizer.round_moments`) and training goes on from the rounded values, on every rank and in
    every replay alike; a boundary state then codes its moments in about half the bytes."""

    def __post_init__(self) -> None:
        if self.boundary_moments not in BOUNDARY_MOMENTS:
            raise ValueError(
                f"boundary_moments must be one of {', '.join(BOUNDARY_MOMENTS)}, got {self.boundary_moments!r}"
            )
        if self.base_on_host and self.step.sharded:
            raise ValueError(
                "sharded ranks keep their shard of the window's base on the device, not in host memory"
            )
        if self.inner_steps < 1 or self.segment_steps < 1:
            raise ValueError(
                f"inner_steps and segment_steps must be positive, got {self.inner_steps} and {self.segment_steps}"
            )
        if self.inner_steps % self.segment_steps:
            raise ValueError(
                f"inner_steps={self.inner_steps} is not a whole number of segments of {self.segment_steps}"
            )

    @property
    def n_segments(self) -> int:
        return self.inner_steps // self.segment_steps


@dataclass(frozen=True)
class InnerResult:
    """What a window's inner loop produced: the update, per-step losses and step results, and
    the h/k + 1 boundaries of the h steps trained."""

    pseudo_gradient: dict[str, torch.Tensor]
    losses: list[float]
    boundaries: list[BoundaryState]
    steps: list[StepResult]


def float_params(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    """A float32 CPU copy of the model's named parameters."""
    return {name: p.detach().to("cpu", torch.float32, copy=True) for name, p in model.named_parameters()}


def pseudo_gradient(
    global_params: Mapping[str, torch.Tensor], local_params: Mapping[str, torch.Tensor]
) -> dict[str, torch.Tensor]:
    """θ_global − θ_local per parameter, float32 on the CPU."""
    if global_params.keys() != local_params.keys():
        raise ValueError("global and local parameters have different names")
    return {
        name: global_params[name].to("cpu", torch.float32) - local_params[name].to("cpu", torch.float32)
        for name in global_params
    }


def window_start_state(model: torch.nn.Module) -> TrainState:
    """Boundary 0 of a window whose global parameters the model holds: no optimizer state, step 0."""
    return TrainState(
        params={n: p.detach().to("cpu", copy=True) for n, p in model.named_parameters()}, optimizer={}, step=0
    )


def run_steps(
    model: torch.nn.Module,
    optimizer: torch.optim.Optimizer,
    batches: Iterable[torch.Tensor],
    loss_fn: LossFn,
    config: InnerConfig,
    first_step: int,
    anchor: Anchor | None = None,
    parallel: DataParallel | None = None,
) -> list[StepResult]:
    """Inner steps first_step, first_step + 1, … on `batches` in order, each at its scheduled
    learning rate, pulled toward `anchor` (the window's base) when the config asks for it, a
    segment's last step rounding the moments when the config asks for that (`boundary_moments`).
    On a leader, each step's batch goes to the followers first."""
    if config.base_anchor > 0 and anchor is None:
        raise ValueError("the run anchors every step to the window's base, but no base was given")
    results = []
    for offset, batch in enumerate(batches):
        step = first_step + offset
        if parallel is not None and parallel.leader:
            parallel.start_step(step, batch)
        set_lr(optimizer, config.optimizer.lr_at(step))
        results.append(step_with(config.step, model, optimizer, batch, loss_fn, anchor, parallel))
        if config.boundary_moments == "bfloat16" and (step + 1) % config.segment_steps == 0:
            round_moments(optimizer)
    return results


def base_anchor(
    model: torch.nn.Module, base: Mapping[str, torch.Tensor], config: InnerConfig
) -> Anchor | None:
    """The anchor of a window whose base is `base`, or None when the run sets no pull."""
    if config.base_anchor == 0:
        return None
    return anchor_to(model, base, config.base_anchor, on_host=config.base_on_host)


def own_anchor(model: torch.nn.Module, config: InnerConfig) -> Anchor | None:
    """The anchor of a window whose base the model holds now, laid out as its parameters are (a
    rank's shards when they are sharded)."""
    return base_anchor(model, {name: p.detach() for name, p in model.named_parameters()}, config)


def _capture(
    model: torch.nn.Module,
    optimizer: torch.optim.Optimizer,
    step: int,
    parallel: DataParallel | None,
    into: TrainState | None,
) -> TrainState:
    if parallel is None:
        return capture_state(model, optimizer, step, into)
    state = parallel.capture(optimizer, step)
    if state is None:
        raise RuntimeError("only the leader of a miner's ranks captures its boundary states")
    return state


def inner_loop(
    model: torch.nn.Module,
    batch_for_step: Callable[[int], torch.Tensor],
    loss_fn: LossFn,
    config: InnerConfig,
    *,
    keep_states: bool = True,
    on_boundary: Callable[[BoundaryState], None] | None = None,
    go_on: Callable[[int], bool] | None = None,
    parallel: DataParallel | None = None,
) -> InnerResult:
    """Train up to `config.inner_steps` steps, in whole segments, from the model's current
    parameters (θ_global) with a fresh inner optimizer; the model ends holding θ_local.

    `batch_for_step(t)` gives the batch of inner step t. Each boundary is hashed and sketched off
    the training thread (`boundaries.BoundaryWorker`), and `on_boundary` sees it there, with its
    state, in boundary order (for example to write the state to disk); `keep_states=False` drops
    the states from the result, keeping hashes and sketches, and reuses their memory, so the
    window's host memory does not grow with its boundaries. `go_on(s)` is asked before every
    segment s after the first; False ends the window there (the miner's time is up). A `TimeUp`
    from `batch_for_step` in a segment after the first ends the window at the boundary before it:
    the result is that of the whole segments before (the model, and a follower rank, keep the steps
    of the cut segment until the next window loads its base); in the first segment it propagates.
    With `parallel` (the leader of a miner's ranks) every rank trains the window's steps with it."""
    if parallel is not None:
        parallel.start_window()
    optimizer = make_inner_optimizer(model, config.optimizer)
    anchor = own_anchor(model, config)
    results: list[StepResult] = []
    worker = BoundaryWorker(config.sketch_seed, config.sketch_size, on_boundary, keep_states)

    def add_boundary(step: int) -> dict[str, torch.Tensor]:
        state = _capture(model, optimizer, step, parallel, worker.buffer())
        worker.submit(state)
        return state.params

    try:
        # a copy: boundary 0's buffer is captured into again two boundaries on
        global_params = {name: p.to(torch.float32, copy=True) for name, p in add_boundary(0).items()}
        local_params = global_params
        for segment in range(config.n_segments):
            if segment > 0 and go_on is not None and not go_on(segment):
                break
            first = segment * config.segment_steps
            batches = (batch_for_step(t) for t in range(first, first + config.segment_steps))
            try:
                done = run_steps(model, optimizer, batches, loss_fn, config, first, anchor, parallel)
            except TimeUp:
                if segment == 0:
                    raise
                break
            results.extend(done)
            local_params = add_boundary(first + config.segment_steps)  # nothing is captured after the last
        boundaries = worker.finish()
    finally:
        worker.close()
    return InnerResult(
        pseudo_gradient=pseudo_gradient(global_params, local_params),
        losses=[r.loss for r in results],
        boundaries=boundaries,
        steps=results,
    )


def train_rank_zero_steps(parallel: DataParallel, loss_fn: LossFn, config: InnerConfig) -> int:
    """A follower's life: train the steps the leader sends, window after window, until it stops;
    returns the number of steps trained. A step whose loss is not finite ends the window on every
    rank alike (the loss is the mean of every rank's), and the follower waits for the next."""
    model = parallel.model
    optimizer: torch.optim.Optimizer | None = None
    anchor: Anchor | None = None
    trained = 0
    while (command := parallel.next_command()).kind != SHUTDOWN:
        if command.kind == WINDOW:
            parallel.join_window()
            optimizer = make_inner_optimizer(model, config.optimizer)
            anchor = own_anchor(model, config)
        elif command.kind == LOAD and parallel.sharded:
            parallel.load(None)
        elif command.kind == STATE and parallel.sharded and optimizer is not None:
            parallel.capture(optimizer, command.step)
        elif command.kind == STEP and optimizer is not None:
            batch = parallel.receive_batch(command)
            try:
                run_steps(model, optimizer, [batch], loss_fn, config, command.step, anchor, parallel)
                trained += 1
            except FloatingPointError:
                optimizer = None
        else:
            raise RuntimeError(f"unexpected command {command} from the miner's leader")
    return trained
