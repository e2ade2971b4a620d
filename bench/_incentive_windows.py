"""Windows of a run in one process, paid by the project's own scoring: each miner trains its own
number of steps on its assigned data with the project's inner loop (a data-parallel miner's step
split over its ranks, replayed in one process as `distrai/train/step.py` does), its update goes
through the run's codec with the miner's error feedback, the validator's `measure_updates` and
`score_window` score the window, and `outer_step` applies the accepted updates under one of the
aggregation rules. Windows are sequential: window w trains from the model the last outer step
produced (a pipelined run trains from the one before it; that moves every miner's base, not how
they are paid).

Besides honest miners, a window holds the cheats a claim invites: a miner that claims more steps
than it trains (it trains the last steps of its claim, so the sequences the validator measures are
ones it trained), a copier that trains nothing and publishes a blend of the updates the last
window's aggregate took, and a miner that trains honestly and publishes its update scaled far down. Nothing is challenged or replayed here: what a challenge would catch, and
what that costs a cheater, is `validators.deterrence`'s, at the GPU config (`bench/incentives.py`).
Training is deterministic on the CPU, so a miner whose base and residual are bit for bit those of
another run's window trains the same update: `Trainer` reuses it within the window.
"""

from __future__ import annotations

import dataclasses
import hashlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import torch
from bittensor.keyfiles import Keypair

from distrai.protocol.aggregation import Scored, accepted_by_rule
from distrai.protocol.globalmodel import GlobalModel
from distrai.protocol.runtime import Runtime, params_hash
from distrai.protocol.windows import reveal_seed
from distrai.train.assignment import batch_indices
from distrai.train.evaluate import evaluate
from distrai.train.inner import inner_loop
from distrai.train.outer import Contribution, OuterConfig, outer_step
from distrai.train.step import over_ranks
from distrai.wire.tensors import encode_tensors
from distrai.wire.window_documents import Boundary, UpdateBlob, UpdateManifest
from validators.checks import PASS, MinerVerdict
from validators.scoring import tokens_trained
from validators.shared_scoring import as_measurement
from validators.usefulness import measure_updates
from validators.window import WindowBasis
from validators.window_scoring import score_window

RULES = ("gain", "claims")
"""Which updates the outer step takes, and their weights: the run's rule (`aggregation.accepted_by_rule`:
the top n by the gain each update measured on the window's reserve, weighted by it), or the rule
before it (the top n by score, the tokens a manifest claims, weighted by it)."""

Residual = dict[str, torch.Tensor] | None


def hotkey(name: str) -> str:
    return Keypair.create_from_uri(f"//Incentives{name}").ss58_address


@dataclass(frozen=True)
class Miner:
    label: str
    hotkey: str
    steps: int
    """inner steps it trains in a window"""
    ranks: int = 1
    """data-parallel processes its step is split over"""
    claimed: int | None = None
    """inner steps its manifest claims (None: the steps it trains); it trains the last `steps` of them"""
    copies: bool = False
    """trains nothing: publishes a blend of the updates the last window's aggregate took"""
    scale: float = 1.0
    """what it multiplies its own update by before publishing it (1: as trained)"""

    @property
    def claims(self) -> int:
        return self.steps if self.claimed is None else self.claimed

    @property
    def honest(self) -> bool:
        return not self.copies and self.claims == self.steps and self.scale == 1.0


@dataclass(frozen=True)
class Trained:
    update: dict[str, torch.Tensor]
    """the update as a validator decodes it from the miner's blob"""
    residual: Residual
    manifest: UpdateManifest


@dataclass
class Run:
    """One run's state: the global model, every miner's codec residual, and the updates the last
    window's aggregate took (what a copier blends)."""

    model: GlobalModel
    residuals: dict[str, Residual] = field(default_factory=dict)
    accepted: list[dict[str, torch.Tensor]] = field(default_factory=list)


@dataclass(frozen=True)
class MinerWindow:
    """One miner's window as the validator scored it."""

    steps: int
    tokens: int
    """the tokens its manifest commits to"""
    score: float
    numbers: dict[str, float]
    """the validator's numbers: drop_trained, mark, mark_z, tokens, …"""
    weight: float
    """its weight in the outer step (0 when the aggregate did not take it)"""
    reason: str | None
    """why its update failed a check (`useful`, `duplicate`), None when it passed"""

    @property
    def pay_per_token(self) -> float:
        """The window score over the tokens claimed: 1 for a passing update, 0 for a failed one."""
        return self.score / self.tokens


@dataclass(frozen=True)
class WindowRecord:
    window: int
    miners: dict[str, MinerWindow]
    """hotkey → its window"""
    heldout: float | None
    """the held-out loss of the model the window's outer step produced (None: not evaluated)"""
    clip_factors: dict[str, float]
    """hotkey → the factor the outer step's median-norm clip scaled its update by (1: not clipped)"""


def _digest(tensors: Residual) -> str:
    return "none" if tensors is None else params_hash(tensors)


class Trainer:
    """Trains miners' windows; within one window, the same inputs give the same update once."""

    def __init__(self, runtime: Runtime):
        self.rt = runtime
        self.window = -1
        self.done: dict[tuple, Trained] = {}

    def train(self, run: Run, miner: Miner, miners: Sequence[str]) -> Trained:
        model = run.model
        if model.window != self.window:
            self.window, self.done = model.window, {}
        residual = run.residuals.get(miner.hotkey)
        blended = tuple(params_hash(u) for u in run.accepted) if miner.copies else ()
        key = (miner, tuple(miners), model.hash, _digest(residual), blended)
        if key not in self.done:
            self.done[key] = self._train(run, miner, miners, residual)
        return self.done[key]

    def _pseudo_gradient(self, run: Run, miner: Miner, miners: Sequence[str]) -> dict[str, torch.Tensor]:
        """What the miner trained this window; a copier's blend of the last aggregate's updates."""
        rt, cfg, model = self.rt, self.rt.config.train, run.model
        if miner.copies:
            if not run.accepted:
                raise ValueError(f"{miner.label} copies the last window's updates, and there are none")
            return {name: sum(u[name] for u in run.accepted) / len(run.accepted) for name in model.params}
        step = over_ranks(rt.inner.step, cfg.batch_size, miner.ranks) if miner.ranks > 1 else rt.inner.step
        inner = dataclasses.replace(rt.inner, inner_steps=miner.steps, step=step)
        skipped = miner.claims - miner.steps

        def batch(t: int) -> torch.Tensor:
            indices = batch_indices(
                rt.run_id,
                model.window,
                miner.hotkey,
                skipped + t,
                cfg.batch_size,
                rt.data.n_train,
                miners,
                rt.data.unit,
            )
            return rt.data.batch(indices)

        rt.load_params(model.params)
        result = inner_loop(rt.model, batch, rt.loss_fn, inner, keep_states=False)
        rt.load_params(model.params)
        return result.pseudo_gradient

    def _train(self, run: Run, miner: Miner, miners: Sequence[str], residual: Residual) -> Trained:
        rt, cfg, model = self.rt, self.rt.config.train, run.model
        encoded = rt.codec.encode(self._pseudo_gradient(run, miner, miners), residual)
        blob = encode_tensors(encoded.payload, encoded.metadata)
        manifest = UpdateManifest(
            run_id=rt.run_id,
            window=model.window,
            hotkey=miner.hotkey,
            base_hash=model.hash,
            update=UpdateBlob(
                sha256=hashlib.sha256(blob).hexdigest(),
                size=len(blob),
                codec=rt.config.codec.name,
                codec_metadata=encoded.metadata,
            ),
            micro_batches=cfg.micro_batches,
            ranks=miner.ranks,
            losses=[1.0] * miner.claims,
            boundaries=[
                Boundary(step=s, state_hash=UNCHECKED, sketch=[])
                for s in range(0, miner.claims + 1, cfg.segment_steps)
            ],
            residual_in_hash=None,
            residual_out_hash=None,
        )
        update = rt.codec.decode(encoded.payload, encoded.metadata, rt.shapes())
        return Trained({n: miner.scale * t for n, t in update.items()}, encoded.residual, manifest)


UNCHECKED = "00" * 32
"""The boundary hashes of the bench's manifests: nothing replays them here, and scoring reads only
how many steps a manifest covers."""


def window_block(window: int) -> str:
    """The block hash the bench makes up for the window's challenge."""
    return "0x" + hashlib.sha256(f"distrai.bench.incentives/{window}".encode()).hexdigest()


def window_seed(runtime: Runtime, window: int) -> bytes:
    """The window's challenge seed, from its made-up block hash."""
    return reveal_seed(window_block(window), runtime.run_id, window)


def passed_verdicts(trained: Mapping[str, Trained], miners: Sequence[str]) -> dict[str, MinerVerdict]:
    """Every miner's verdict with its checks passed (nothing is challenged), before scoring."""
    verdicts = {}
    for uid, hk in enumerate(miners):
        verdict = MinerVerdict(hk, uid, {"manifest": PASS, "consistency": PASS, "update": PASS})
        verdict.manifest, verdict.update = trained[hk].manifest, trained[hk].update
        verdicts[hk] = verdict
    return verdicts


def score(runtime: Runtime, model: GlobalModel, verdicts: Mapping[str, MinerVerdict]) -> None:
    """The validator's measurement and scoring of the window: sets every verdict's score."""
    miners = list(verdicts)
    updates = {hk: (v.manifest.steps, v.update) for hk, v in verdicts.items()}
    basis = WindowBasis.measured_outside(runtime, model, window_block(model.window), miners)
    measured = measure_updates(basis, window_seed(runtime, model.window), updates)
    measurements = {hk: as_measurement(result) for hk, result in measured.items()}
    score_window(runtime, list(verdicts.values()), measurements, dict.fromkeys(miners, 1))


def aggregation_weights(
    rule: str, verdicts: Mapping[str, MinerVerdict], top_n: int, seed: bytes
) -> list[tuple[str, float]]:
    """(hotkey, weight) of the updates the outer step takes under `rule` (`RULES`)."""
    scored = {hk: Scored(v.passed, v.score, v.numbers.get("drop_unseen", 0.0)) for hk, v in verdicts.items()}
    if rule == "gain":
        return accepted_by_rule(scored, top_n, seed)
    if rule == "claims":
        ranked = sorted(
            ((hk, s.score) for hk, s in scored.items() if s.passed and s.score > 0),
            key=lambda item: (-item[1], hashlib.sha256(seed + item[0].encode()).digest()),
        )[:top_n]
        total = sum(score for _, score in ranked)
        return [(hk, score / total) for hk, score in ranked]
    raise ValueError(f"unknown rule {rule!r}; choose one of {RULES}")


def heldout_loss(runtime: Runtime, params: dict[str, torch.Tensor]) -> float:
    runtime.load_params(params)
    return evaluate(runtime.model, runtime.data.heldout, loss_fn=runtime.loss_fn)


def advance(
    runtime: Runtime,
    trainer: Trainer,
    run: Run,
    miners: Sequence[Miner],
    rule: str,
    *,
    evaluated: bool,
) -> tuple[Run, WindowRecord]:
    """One window: every miner trains from the run's model, the window is scored, and the outer step
    applies the updates `rule` takes, clipped to the median norm as the run's config says; the new
    model's held-out loss when `evaluated`."""
    hotkeys = sorted(m.hotkey for m in miners)
    trained = {m.hotkey: trainer.train(run, m, hotkeys) for m in miners}
    verdicts = passed_verdicts(trained, hotkeys)
    score(runtime, run.model, verdicts)
    cfg = runtime.config
    tokens = {m.hotkey: tokens_trained(m.claims, cfg.train.batch_size, cfg.data.seq_len) for m in miners}
    seed = window_seed(runtime, run.model.window)
    weights = dict(aggregation_weights(rule, verdicts, cfg.scoring.aggregate_top_n, seed))
    outer = cfg.outer
    config = OuterConfig(
        lr=outer.lr,
        momentum=outer.momentum,
        nesterov=outer.nesterov,
        clip_to_median_norm=outer.clip_to_median_norm,
    )
    contributions = [Contribution(hk, trained[hk].update, w) for hk, w in sorted(weights.items())]
    stepped = outer_step(run.model.params, contributions, run.model.outer, config)
    record = WindowRecord(
        window=run.model.window,
        miners={
            m.hotkey: MinerWindow(
                m.steps,
                tokens[m.hotkey],
                verdicts[m.hotkey].score,
                dict(verdicts[m.hotkey].numbers),
                weights.get(m.hotkey, 0.0),
                verdicts[m.hotkey].reason,
            )
            for m in miners
        },
        heldout=heldout_loss(runtime, stepped.params) if evaluated else None,
        clip_factors=dict(stepped.aggregate.clip_factors),
    )
    following = Run(
        GlobalModel(run.model.window + 1, stepped.params, stepped.state),
        {**run.residuals, **{m.hotkey: trained[m.hotkey].residual for m in miners}},
        [trained[hk].update for hk in sorted(weights)],
    )
    return following, record
