"""A window's scores, in one process: honest updates trained by the project's own inner loop on
each miner's assigned data, beside updates that did little or no work of their own. None of them
is challenged: the scores alone must not pay for presence, and one piece of work published under
several hotkeys earns one share and is aggregated once."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from bittensor.keyfiles import Keypair

from distrai.aggregation import Scored, accepted_by_rule
from distrai.globalmodel import GlobalModel
from distrai.run import load_run_config
from distrai.runtime import build_runtime
from distrai.train.assignment import batch_indices
from distrai.train.inner import inner_loop
from distrai.train.outer import OuterState
from distrai.wire.manifest import Boundary, UpdateBlob, UpdateManifest
from validators.checks import PASS, MinerVerdict
from validators.duplicates import cosine, update_sketch
from validators.window_scoring import score_window

CONFIG = Path(__file__).parent / "support" / "adversary-localnet.toml"
WINDOW = 3
HONEST = [Keypair.create_from_uri(f"//Honest{i}").ss58_address for i in range(4)]
TINY, RELABELLED, RESCALED, PERTURBED = (
    Keypair.create_from_uri(f"//{name}").ss58_address
    for name in ("Tiny", "Relabelled", "Rescaled", "Perturbed")
)
MINERS = sorted([*HONEST, TINY, RELABELLED, RESCALED, PERTURBED])


@pytest.fixture(scope="module")
def runtime():
    return build_runtime(load_run_config(CONFIG))


@pytest.fixture(scope="module")
def model(runtime):
    return GlobalModel(WINDOW, runtime.initial_params(), OuterState(momentum={}))


def trained(runtime, model, hotkey) -> dict[str, torch.Tensor]:
    runtime.load_params(model.params)
    cfg = runtime.config.train

    def batch(t):
        return runtime.data.batch(
            batch_indices(runtime.run_id, WINDOW, hotkey, t, cfg.batch_size, runtime.data.n_train, MINERS)
        )

    result = inner_loop(runtime.model, batch, runtime.loss_fn, runtime.inner, keep_states=False)
    runtime.load_params(model.params)
    return result.pseudo_gradient


def published(runtime, model, pseudo_gradient) -> dict[str, torch.Tensor]:
    """What a validator decodes from the blob of this pseudo-gradient (through the run's codec)."""
    encoded = runtime.codec.encode(pseudo_gradient, None)
    shapes = {n: tuple(p.shape) for n, p in model.params.items()}
    return runtime.codec.decode(encoded.payload, encoded.metadata, shapes)


def manifest(runtime, hotkey: str) -> UpdateManifest:
    """A manifest of a whole window of H steps (scoring reads only how many steps it covers)."""
    cfg, digest = runtime.config.train, "ab" * 32
    return UpdateManifest(
        run_id=runtime.run_id,
        window=WINDOW,
        hotkey=hotkey,
        base_hash=digest,
        update=UpdateBlob(sha256=digest, size=1, codec=runtime.config.codec.name, codec_metadata={}),
        micro_batches=1,
        losses=[1.0] * cfg.inner_steps,
        boundaries=[
            Boundary(step=s, state_hash=digest, sketch=[])
            for s in range(0, cfg.inner_steps + 1, cfg.segment_steps)
        ],
        residual_in_hash=None,
        residual_out_hash=None,
    )


def passed(runtime, hotkey: str, update: dict[str, torch.Tensor]) -> MinerVerdict:
    verdict = MinerVerdict(
        hotkey, MINERS.index(hotkey), {"manifest": PASS, "consistency": PASS, "update": PASS}
    )
    verdict.manifest = manifest(runtime, hotkey)
    verdict.update = update
    return verdict


@pytest.fixture(scope="module")
def window(runtime, model):
    """Every miner's verdict after scoring: four honest, and four that did little work of their own."""
    honest = {hk: published(runtime, model, trained(runtime, model, hk)) for hk in HONEST}
    original = honest[HONEST[0]]
    generator = torch.Generator().manual_seed(0)
    others = {
        TINY: {n: 1e-4 * t for n, t in published(runtime, model, trained(runtime, model, TINY)).items()},
        RELABELLED: {n: t.clone() for n, t in original.items()},
        RESCALED: {n: 2.0 * t for n, t in original.items()},
        PERTURBED: {
            n: t + 0.01 * t.std() * torch.randn(t.shape, generator=generator) for n, t in original.items()
        },
    }
    verdicts = [passed(runtime, hk, u) for hk, u in {**honest, **others}.items()]
    # the relabelled copy commits first. Which member keeps the work is decided by how much better
    # each fits its own data than unassigned data; on the templated corpus, where every sequence comes
    # from one distribution, that measure is noise, so these tests check one share, not whose
    commit_blocks = {hk: (10 if hk in HONEST else 9 if hk == RELABELLED else 11) for hk in MINERS}
    score_window(runtime, model, WINDOW, verdicts, MINERS, commit_blocks)
    return {v.hotkey: v for v in verdicts}


def group_keeper(window) -> str:
    """The one member of HONEST[0]'s piece of work (itself and its three copies) that kept it."""
    kept = [hk for hk in (HONEST[0], RELABELLED, RESCALED, PERTURBED) if window[hk].passed]
    assert len(kept) == 1, {hk: window[hk].verdicts for hk in (HONEST[0], RELABELLED, RESCALED, PERTURBED)}
    return kept[0]


def test_honest_miners_pass_and_earn(runtime, window):
    for hk in [group_keeper(window), *HONEST[1:]]:
        assert window[hk].passed, window[hk].verdicts
        assert window[hk].score > 0.5, (hk, window[hk].score, window[hk].numbers)
    sketches = {hk: update_sketch(window[hk].update, f"{runtime.run_id}/duplicates") for hk in HONEST}
    similarities = [cosine(sketches[a], sketches[b]) for i, a in enumerate(HONEST) for b in HONEST[i + 1 :]]
    assert max(similarities) < runtime.config.scoring.duplicate_cosine, similarities


def test_an_update_scaled_to_a_ten_thousandth_earns_about_a_ten_thousandth(window):
    honest_least = min(window[hk].score for hk in [group_keeper(window), *HONEST[1:]])
    assert window[TINY].passed, window[TINY].verdicts
    assert 0 < window[TINY].score < 0.01 * honest_least, (window[TINY].score, honest_least)


@pytest.mark.parametrize(
    "copy",
    [HONEST[0], RELABELLED, RESCALED, PERTURBED],
    ids=["original", "relabelled", "rescaled", "perturbed"],
)
def test_one_piece_of_work_under_several_hotkeys_earns_one_share(window, copy):
    keeper = group_keeper(window)
    if copy == keeper:
        assert window[copy].score > 0
        return
    verdict = window[copy]
    assert verdict.score == 0.0 and not verdict.fraud
    assert keeper in verdict.verdicts["duplicate"], verdict.verdicts


def test_the_aggregate_takes_each_piece_of_work_once(window):
    chosen = accepted_by_rule({hk: Scored(v.passed, v.score) for hk, v in window.items()}, top_n=8)
    taken = {hk for hk, _ in chosen}
    assert taken & {HONEST[0], RELABELLED, RESCALED, PERTURBED} == {group_keeper(window)}
    assert set(HONEST[1:]) <= taken
