"""A window's scores, in one process: honest updates trained by the project's own inner loop on
each miner's assigned data, beside updates that did little or no work of their own, none of them
challenged, so the scores alone must hold:

- pay follows the tokens trained: a miner that trained a quarter of the steps earns a quarter, and
  one piece of compute earns the same as one hotkey or split over four;
- one piece of work earns one share: a verbatim, rescaled or slightly perturbed copy of another
  miner's update, and another miner's honest update scaled to a ten-thousandth, fail `duplicate`;
- a miner's own honest work scaled to a ten-thousandth earns no more than a ten-thousandth of its
  claim: its gain on the reserve vouches for no more (`validators.scoring.vouched_tokens`);
- a copy disguised beyond the sketches (noise, another codec residual) and an update trained from the
  window's base on another miner's data of the window before pass the window's checks when nobody
  replays them, though their mark of the hotkey's own data is within noise where every honest one
  stands out: the mark does not decide pay (docs/protocol.md, "Scores"); what keeps them from being
  paid is a replay before their pay matures (tests/test_deterrence.py, tests/test_pay.py);
- an update nobody measured in time is not scored, neither paid nor zeroed;
- in a run's first window, where the marks can barely tell a trainer from a copier, a miner that
  trained on an honest miner's public assignment (and so published its update) does not take the
  honest share: the honest miner keeps it when a replay of it passed or its mark stands out, else
  nobody is paid for the work.

The base is the tiny model after two windows of training, when an update's memorisation of its own
data can be measured (from the initial model it cannot)."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
import torch
from bittensor.keyfiles import Keypair

from distrai.protocol.aggregation import Scored, accepted_by_rule
from distrai.protocol.globalmodel import GlobalModel
from distrai.protocol.run import load_run_config
from distrai.protocol.runtime import build_runtime
from distrai.protocol.windows import reveal_seed
from distrai.train.assignment import batch_indices
from distrai.train.inner import inner_loop
from distrai.train.outer import OuterState
from distrai.wire.window_documents import Boundary, UpdateBlob, UpdateManifest
from validators.checks import PASS, MinerVerdict
from validators.scoring import tokens_trained
from validators.shared_scoring import as_measurement
from validators.usefulness import measure_updates
from validators.window import WindowBasis
from validators.window_scoring import score_window

pytestmark = pytest.mark.e2e  # trains and scores a whole window of miners: ~75 CPU-s, the full suite's

CONFIG = Path(__file__).parent / "support" / "scoring.toml"
WINDOW = 3
FULL, QUARTER = 60, 15


def hotkey(name: str) -> str:
    return Keypair.create_from_uri(f"//{name}").ss58_address


HONEST = [hotkey(f"Honest{i}") for i in range(4)]
SPLIT = [hotkey(f"Split{i}") for i in range(4)]
"""four hotkeys of one operator, each training a quarter of a window: one honest miner's compute"""
TINY, RELABELLED, RESCALED, PERTURBED, DISGUISED, STALE, WRONGDATA, SHRUNK = (
    hotkey(name)
    for name in ("Tiny", "Relabelled", "Rescaled", "Perturbed", "Disguised", "Stale", "Wrongdata", "Shrunk")
)
COPIES = (RELABELLED, RESCALED, PERTURBED, DISGUISED)
MINERS = sorted([*HONEST, *SPLIT, TINY, *COPIES, STALE, SHRUNK, WRONGDATA])
"""the run's registered miners, whose number and order assign each its data in every window"""
SHRINK = 1e-4
"""what the `SHRUNK` miner scales its own honest update by"""


@pytest.fixture(scope="module")
def runtime():
    return build_runtime(load_run_config(CONFIG))


def trained(runtime, base, hotkey, window=WINDOW, steps=FULL) -> dict[str, torch.Tensor]:
    runtime.load_params(base)
    cfg = runtime.config.train

    def batch(t):
        return runtime.data.batch(
            batch_indices(runtime.run_id, window, hotkey, t, cfg.batch_size, runtime.data.n_train, MINERS)
        )

    inner = dataclasses.replace(runtime.inner, inner_steps=steps)
    result = inner_loop(runtime.model, batch, runtime.loss_fn, inner, keep_states=False)
    runtime.load_params(base)
    return result.pseudo_gradient


@pytest.fixture(scope="module")
def history(runtime) -> tuple[dict[int, dict[str, dict[str, torch.Tensor]]], GlobalModel]:
    """Windows 1 and 2 of the run: three honest miners' pseudo-gradients in each, by window, and the
    model they make, the initial one after both windows' averaged updates."""
    params, updates = runtime.initial_params(), {}
    for window in (1, 2):
        updates[window] = {hk: trained(runtime, params, hk, window) for hk in HONEST[:3]}
        params = {n: p - sum(u[n] for u in updates[window].values()) / 3 for n, p in params.items()}
    return updates, GlobalModel(WINDOW, params, OuterState(momentum={}))


@pytest.fixture(scope="module")
def model(history):
    """The window's base: the initial model after two windows of three miners' averaged updates."""
    return history[1]


def published(runtime, model, pseudo_gradient, residual=None) -> dict[str, torch.Tensor]:
    """What a validator decodes from the blob of this pseudo-gradient (through the run's codec)."""
    encoded = runtime.codec.encode(pseudo_gradient, residual)
    shapes = {n: tuple(p.shape) for n, p in model.params.items()}
    return runtime.codec.decode(encoded.payload, encoded.metadata, shapes)


def manifest(runtime, hotkey: str, steps: int) -> UpdateManifest:
    """A manifest of `steps` steps (scoring reads only how many steps it covers)."""
    cfg, digest = runtime.config.train, "ab" * 32
    return UpdateManifest(
        run_id=runtime.run_id,
        window=WINDOW,
        hotkey=hotkey,
        base_hash=digest,
        update=UpdateBlob(sha256=digest, size=1, codec=runtime.config.codec.name, codec_metadata={}),
        micro_batches=1,
        losses=[1.0] * steps,
        boundaries=[
            Boundary(step=s, state_hash=digest, sketch=[]) for s in range(0, steps + 1, cfg.segment_steps)
        ],
        residual_in_hash=None,
        residual_out_hash=None,
    )


def passed(runtime, hotkey: str, update: dict[str, torch.Tensor], steps: int = FULL) -> MinerVerdict:
    verdict = MinerVerdict(
        hotkey, MINERS.index(hotkey), {"manifest": PASS, "consistency": PASS, "update": PASS}
    )
    verdict.manifest = manifest(runtime, hotkey, steps)
    verdict.update = update
    return verdict


@pytest.fixture(scope="module")
def own_work(runtime, model):
    """Each honest miner's pseudo-gradient from the window's base, trained once for the module (what
    it publishes, the disguised copy and the unmeasured update start from it; none changes it)."""
    return {hk: trained(runtime, model.params, hk) for hk in HONEST}


@pytest.fixture(scope="module")
def honest(runtime, model, own_work):
    """What each honest miner publishes from the window's base."""
    return {hk: published(runtime, model, own_work[hk]) for hk in HONEST}


@pytest.fixture(scope="module")
def window(runtime, model, own_work, honest):
    """Every miner's verdict after scoring."""
    base = model.params
    split = {hk: published(runtime, model, trained(runtime, base, hk, steps=QUARTER)) for hk in SPLIT}
    original = own_work[HONEST[0]]
    generator = torch.Generator().manual_seed(0)
    noisy = {n: t + 0.3 * t.std() * torch.randn(t.shape, generator=generator) for n, t in original.items()}
    other_residual = {
        n: 0.5 * t.std() * torch.randn(t.shape, generator=generator) for n, t in original.items()
    }
    earlier = trained(runtime, base, HONEST[1], window=WINDOW - 1)
    others = {
        TINY: {n: 1e-4 * t for n, t in honest[HONEST[2]].items()},
        RELABELLED: {n: t.clone() for n, t in honest[HONEST[0]].items()},
        RESCALED: {n: 2.0 * t for n, t in honest[HONEST[0]].items()},
        PERTURBED: {
            n: t + 0.01 * t.std() * torch.randn(t.shape, generator=generator)
            for n, t in honest[HONEST[0]].items()
        },
        DISGUISED: published(runtime, model, noisy, other_residual),
        STALE: published(runtime, model, earlier),
        SHRUNK: {n: SHRINK * t for n, t in published(runtime, model, trained(runtime, base, SHRUNK)).items()},
    }
    verdicts = [
        *(passed(runtime, hk, u) for hk, u in {**honest, **others}.items()),
        *(passed(runtime, hk, u, QUARTER) for hk, u in split.items()),
    ]
    commit_blocks = {hk: (9 if hk == RELABELLED else 10) for hk in MINERS}
    seed = reveal_seed("0x" + "3c" * 32, runtime.run_id, WINDOW)
    updates = {v.hotkey: (v.manifest.steps, v.update) for v in verdicts}
    assert model.window == WINDOW
    basis = WindowBasis.measured_outside(runtime, model, "0x" + "3c" * 32, MINERS)
    measured = measure_updates(basis, seed, updates)
    score_window(runtime, verdicts, {hk: as_measurement(r) for hk, r in measured.items()}, commit_blocks)
    return {v.hotkey: v for v in verdicts}


def full_pay(runtime) -> float:
    return tokens_trained(FULL, runtime.config.train.batch_size, runtime.config.data.seq_len)


def test_honest_work_is_paid_by_its_tokens(runtime, window):
    for hk in HONEST[1:]:
        verdict = window[hk]
        assert verdict.passed and verdict.score == full_pay(runtime), verdict.numbers


@pytest.mark.parametrize("seed", range(4))
def test_an_honest_miner_measured_on_the_gpu_configs_sequence_count_is_not_failed(
    runtime, model, honest, seed
):
    """The GPU config measures 16 sequences per update; the `useful` gate, judged on each update's
    own last segment, fails none of the honest miners' updates on any of four window seeds (the
    mark's z at 16 sequences is noisy: it decides no pay)."""
    sixteen = dataclasses.replace(
        runtime,
        config=runtime.config.model_copy(
            update={"scoring": runtime.config.scoring.model_copy(update={"usefulness_sequences": 16})}
        ),
    )
    block = "0x" + f"{seed:02x}" * 32
    verdicts = [passed(runtime, hk, u) for hk, u in honest.items()]
    basis = WindowBasis.measured_outside(sixteen, model, block, MINERS)
    updates = {v.hotkey: (FULL, v.update) for v in verdicts}
    measured = measure_updates(basis, reveal_seed(block, runtime.run_id, WINDOW), updates)
    measurements = {hk: as_measurement(r) for hk, r in measured.items()}
    score_window(sixteen, verdicts, measurements, dict.fromkeys(HONEST, 10))
    assert all(v.passed and v.score == full_pay(runtime) for v in verdicts), [v.verdicts for v in verdicts]


def test_a_quarter_of_the_steps_earns_a_quarter_and_splitting_changes_nothing(runtime, window):
    for hk in SPLIT:
        assert window[hk].score == full_pay(runtime) / 4, window[hk].numbers
    assert sum(window[hk].score for hk in SPLIT) == window[HONEST[1]].score


def test_ones_own_update_scaled_down_earns_no_more_than_its_size(runtime, window):
    """Its own work on its own data, so no duplicate; it passes `useful` (it still lowers the loss of
    its last segment's sequences, a ten-thousandth as much), but its gain on the reserve vouches for
    almost none of its claim."""
    verdict = window[SHRUNK]
    assert verdict.passed and verdict.verdicts["useful"] == PASS, verdict.verdicts
    assert verdict.numbers["tokens"] == full_pay(runtime)
    assert 0.0 <= verdict.score <= SHRINK * full_pay(runtime), verdict.numbers


@pytest.mark.parametrize(
    "copy", [RELABELLED, RESCALED, PERTURBED, TINY], ids=["relabelled", "rescaled", "perturbed", "tiny"]
)
def test_one_piece_of_work_earns_one_share(window, copy):
    verdict = window[copy]
    assert verdict.score == 0.0 and not verdict.fraud, (verdict.verdicts, verdict.numbers)
    assert "one piece of work earns one share" in verdict.verdicts["duplicate"], verdict.verdicts


@pytest.mark.parametrize("copy", [DISGUISED, STALE], ids=["disguised", "stale"])
def test_a_disguised_or_stale_copy_waits_like_any_claim_for_a_replay_before_it_matures(runtime, window, copy):
    """The mark tells these apart from honest work here (honest marks stand 5 or more standard
    errors out, these within noise: under 3), but not at every model size and sequence count: pay does not
    rest on it. Scored by their claim, they are pending until the replays of the next
    `maturity_windows` windows have had their chance (`validators.deterrence`)."""
    verdict = window[copy]
    assert verdict.passed and verdict.score == full_pay(runtime), verdict.verdicts
    assert abs(verdict.numbers["mark_z"]) < 3 < 5 < min(window[hk].numbers["mark_z"] for hk in HONEST)


def test_the_original_of_a_copied_update_keeps_its_pay(runtime, window):
    assert window[HONEST[0]].score == full_pay(runtime), (
        window[HONEST[0]].verdicts,
        window[HONEST[0]].numbers,
    )


def test_the_aggregate_takes_each_piece_of_work_once(window):
    scored = {hk: Scored(v.passed, v.score, v.numbers.get("drop_unseen", 0.0)) for hk, v in window.items()}
    taken = dict(accepted_by_rule(scored, 16, bytes(32)))
    assert not set(taken) & {TINY, RELABELLED, RESCALED, PERTURBED}
    assert set(HONEST) | set(SPLIT) <= set(taken)
    # weighed by what each update measured on the reserve, not by what its manifest claims: a quarter
    # of the steps weighs less than the full window (the disguised copy, honest work with noise,
    # measures about as much as its original: it is the challenge that catches it)
    assert max(taken[hk] for hk in SPLIT) < min(taken[hk] for hk in HONEST)


def test_an_update_nobody_measured_is_not_scored(runtime, own_work):
    verdict = passed(runtime, HONEST[3], {n: t.clone() for n, t in own_work[HONEST[3]].items()})
    score_window(runtime, [verdict], {}, {HONEST[3]: 10})
    assert verdict.unmeasured and verdict.passed and verdict.score == 0.0 and "useful" not in verdict.verdicts


@pytest.fixture(scope="module")
def first_updates(runtime, history):
    """Window 1's base, the initial model, and what HONEST[0] and HONEST[1] published from it."""
    model = GlobalModel(1, runtime.initial_params(), OuterState(momentum={}))
    first = history[0][1]
    return model, published(runtime, model, first[HONEST[0]]), published(runtime, model, first[HONEST[1]])


def first_verdicts(runtime, first_updates) -> list[MinerVerdict]:
    """HONEST[0] trained on its own assignment, WRONGDATA on HONEST[0]'s (the same steps on the same
    data from the same base: the same update); HONEST[1] trained on its own."""
    _, update, other = first_updates
    return [
        passed(runtime, HONEST[0], update),
        passed(runtime, WRONGDATA, {n: t.clone() for n, t in update.items()}),
        passed(runtime, HONEST[1], other),
    ]


@pytest.fixture(scope="module")
def first_measured(runtime, first_updates):
    """What window 1's three updates measured (once for the module: a replay's verdict does not
    change what an update measures, only how it is scored)."""
    model = first_updates[0]
    basis = WindowBasis.measured_outside(runtime, model, "0x" + "5d" * 32, MINERS)
    seed = reveal_seed("0x" + "5d" * 32, runtime.run_id, 1)
    updates = {v.hotkey: (FULL, v.update) for v in first_verdicts(runtime, first_updates)}
    return measure_updates(basis, seed, updates)


def first_window(runtime, first_updates, first_measured, honest_replayed: bool) -> dict[str, MinerVerdict]:
    """Window 1 from the initial model (`first_verdicts`), WRONGDATA committed first. Nobody
    replayed, or HONEST[0]'s replay passed."""
    verdicts = first_verdicts(runtime, first_updates)
    if honest_replayed:
        verdicts[0].verdicts["replay"] = PASS
    blocks = {HONEST[0]: 10, WRONGDATA: 9, HONEST[1]: 10}
    score_window(runtime, verdicts, {hk: as_measurement(r) for hk, r in first_measured.items()}, blocks)
    return {v.hotkey: v for v in verdicts}


@pytest.mark.parametrize("honest_replayed", [False, True], ids=["nobody-replayed", "honest-replayed"])
def test_training_on_another_miners_data_takes_nothing_from_it_in_a_first_window(
    runtime, first_updates, first_measured, honest_replayed
):
    got = first_window(runtime, first_updates, first_measured, honest_replayed)
    assert got[HONEST[1]].score == full_pay(runtime), got[HONEST[1]].verdicts
    copier, honest = got[WRONGDATA], got[HONEST[0]]
    assert copier.score == 0.0 and not copier.fraud and "duplicate" in copier.verdicts, copier.verdicts
    if honest_replayed:
        assert honest.score == full_pay(runtime), honest.verdicts
        assert "its replay passed" in copier.verdicts["duplicate"], copier.verdicts
    else:
        # the marks may or may not tell them apart from the initial model (with one run id the honest
        # miner's stood 2.4 standard errors above the copier's, with another within 2): the share goes
        # to the honest miner when its mark stands out, else to nobody, never to the copier
        assert not honest.fraud, honest.verdicts
        if honest.score:
            assert honest.score == full_pay(runtime), honest.verdicts
            assert "its mark stands out" in copier.verdicts["duplicate"], copier.verdicts
        else:
            assert "cannot be told" in honest.verdicts["duplicate"], honest.verdicts
