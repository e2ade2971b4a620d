"""A validator's verification of a challenged miner, in one process: the miner's side is the
project's own inner loop, codec and update encoding; the validator's is `verify_challenge`.

An honest window passes bit for bit; each way of cheating fails its named check."""

from __future__ import annotations

import dataclasses
import hashlib
from pathlib import Path

import pytest
import torch
from bittensor.keyfiles import Keypair

from distrai.globalmodel import GlobalModel
from distrai.layout import residual_key, state_key
from distrai.run import load_run_config
from distrai.runtime import build_runtime
from distrai.store import FileStore
from distrai.train.assignment import batch_indices
from distrai.train.inner import inner_loop, pseudo_gradient, window_start_state
from distrai.train.outer import OuterState
from distrai.train.state import encode_state, state_hash
from distrai.update import encode_update, residual_hash
from distrai.wire import encode_tensors
from distrai.wire.manifest import UpdateManifest
from validators.checks import PASS, MinerVerdict
from validators.replay import verify_challenge

CONFIG = Path(__file__).parent / "support" / "adversary-localnet.toml"
WINDOW = 5
MINER = Keypair.create_from_uri("//ReplayMiner").ss58_address
OTHER = Keypair.create_from_uri("//OtherMiner").ss58_address
MINERS = sorted([MINER, OTHER])


@pytest.fixture(scope="module")
def runtime():
    return build_runtime(load_run_config(CONFIG))


@pytest.fixture(scope="module")
def model(runtime):
    return GlobalModel(WINDOW, runtime.initial_params(), OuterState(momentum={}))


@dataclasses.dataclass
class Window:
    """What a miner trained and would reveal."""

    states: dict[int, object]
    pseudo_gradient: dict[str, torch.Tensor]
    losses: list[float]


def train(runtime, model, data_of=MINER) -> Window:
    runtime.load_params(model.params)
    cfg = runtime.config.train

    def batch(t):
        return runtime.data.batch(
            batch_indices(runtime.run_id, WINDOW, data_of, t, cfg.batch_size, runtime.data.n_train, MINERS)
        )

    result = inner_loop(runtime.model, batch, runtime.loss_fn, runtime.inner)
    runtime.load_params(model.params)
    return Window({b.step: b.state for b in result.boundaries}, result.pseudo_gradient, result.losses)


@pytest.fixture(scope="module")
def honest(runtime, model):
    return train(runtime, model)


def publish(runtime, store, window: Window, update=None, residual=None, hashes=None, reveal=None):
    """Reveal the states, encode the update, and return the verdict the cheap checks would pass."""
    encoded = runtime.codec.encode(update or window.pseudo_gradient, residual)
    blob = encode_update(encoded.payload, encoded.metadata, MINER, WINDOW)
    for step, state in (reveal or window.states).items():
        store.put(state_key(runtime.run_id, WINDOW, MINER, step), encode_state(state))
    if residual is not None:
        store.put(residual_key(runtime.run_id, WINDOW, MINER), encode_tensors(residual))
    hashes = hashes or {step: state_hash(state) for step, state in window.states.items()}
    manifest = UpdateManifest(
        run_id=runtime.run_id,
        window=WINDOW,
        hotkey=MINER,
        base_hash="ab" * 32,
        update={
            "sha256": hashlib.sha256(blob).hexdigest(),
            "size": len(blob),
            "codec": runtime.config.codec.name,
            "codec_metadata": dict(encoded.metadata),
        },
        micro_batches=1,
        losses=window.losses,
        boundaries=[{"step": s, "state_hash": h, "sketch": [0.0]} for s, h in sorted(hashes.items())],
        residual_in_hash=None if residual is None else residual_hash(residual),
        residual_out_hash=None if encoded.residual is None else residual_hash(encoded.residual),
    )
    verdict = MinerVerdict(MINER, 1, verdicts={"manifest": PASS, "consistency": PASS, "update": PASS})
    verdict.manifest, verdict.blob = manifest, blob
    return verdict


def verify(runtime, model, store, verdict, segments=(0, 1, 2, 3)):
    verify_challenge(runtime, model, WINDOW, verdict, store, list(segments), MINERS)
    return verdict


def test_an_honest_window_passes_bit_for_bit(runtime, model, honest, tmp_path):
    store = FileStore(tmp_path)
    verdict = verify(runtime, model, store, publish(runtime, store, honest))
    assert verdict.passed, verdict.verdicts
    assert {"states", "replay", "trajectory"} <= verdict.verdicts.keys()
    assert verdict.numbers["replay_distance"] == 0.0
    assert verdict.numbers["replay_steps"] == 4 * runtime.inner.segment_steps
    assert verdict.numbers["revealed_bytes"] > 0


def test_boundary_zero_is_the_windows_start(runtime, model, honest):
    runtime.load_params(model.params)
    assert state_hash(honest.states[0]) == state_hash(window_start_state(runtime.model))


def test_an_honest_window_with_a_carried_residual_passes(runtime, model, honest, tmp_path):
    store = FileStore(tmp_path)
    generator = torch.Generator().manual_seed(3)
    residual = {n: 1e-4 * torch.randn(p.shape, generator=generator) for n, p in model.params.items()}
    verdict = verify(runtime, model, store, publish(runtime, store, honest, residual=residual))
    assert verdict.passed, verdict.verdicts


def test_training_on_other_data_fails_the_replay(runtime, model, tmp_path):
    store = FileStore(tmp_path)
    verdict = verify(runtime, model, store, publish(runtime, store, train(runtime, model, data_of=OTHER)))
    assert verdict.fraud and "replayed to another state" in verdict.verdicts["replay"]


def test_a_faked_second_half_fails_the_replay_of_a_faked_segment(runtime, model, honest, tmp_path):
    store = FileStore(tmp_path)
    states = dict(honest.states)
    k = runtime.inner.segment_steps
    for step in (3 * k, 4 * k):
        states[step] = dataclasses.replace(states[2 * k], step=step)
    lazy = Window(states, honest.pseudo_gradient, honest.losses)
    passes = verify(runtime, model, store, publish(runtime, store, lazy), segments=(0,))
    assert passes.verdicts["replay"] == PASS
    caught = verify(runtime, model, store, publish(runtime, store, lazy), segments=(2,))
    assert caught.fraud and "segment 2" in caught.verdicts["replay"]


def test_revealed_states_that_do_not_match_the_commitment_fail(runtime, model, honest, tmp_path):
    store = FileStore(tmp_path)
    hashes = {s: state_hash(st) for s, st in honest.states.items()}
    hashes[runtime.inner.segment_steps] = "cd" * 32
    verdict = verify(runtime, model, store, publish(runtime, store, honest, hashes=hashes))
    assert verdict.fraud and "does not hash to the committed state" in verdict.verdicts["states"]


def test_an_unrevealed_state_fails(runtime, model, honest, tmp_path):
    store = FileStore(tmp_path)
    reveal = {s: st for s, st in honest.states.items() if s != runtime.inner.segment_steps}
    verdict = verify(runtime, model, store, publish(runtime, store, honest, reveal=reveal))
    assert verdict.fraud and "was not revealed" in verdict.verdicts["states"]


def test_a_state_revealed_under_another_step_fails(runtime, model, honest, tmp_path):
    store = FileStore(tmp_path)
    k = runtime.inner.segment_steps
    reveal = {**honest.states, k: honest.states[2 * k]}
    verdict = verify(runtime, model, store, publish(runtime, store, honest, reveal=reveal))
    assert verdict.fraud and f"boundary {k} says it is step {2 * k}" in verdict.verdicts["states"]


@pytest.mark.parametrize("cheat", ["scaled", "noise"])
def test_an_update_that_is_not_the_trajectorys_encoding_fails(runtime, model, honest, tmp_path, cheat):
    store = FileStore(tmp_path)
    if cheat == "scaled":
        update = {n: 10 * t for n, t in honest.pseudo_gradient.items()}
    else:
        generator = torch.Generator().manual_seed(0)
        update = {
            n: torch.randn(t.shape, generator=generator) * t.std() for n, t in honest.pseudo_gradient.items()
        }
    verdict = verify(runtime, model, store, publish(runtime, store, honest, update=update), segments=(1,))
    assert verdict.verdicts["replay"] == PASS
    assert verdict.fraud and "not the encoding of the committed trajectory" in verdict.verdicts["trajectory"]


def test_a_residual_that_does_not_match_its_hash_fails(runtime, model, honest, tmp_path):
    store = FileStore(tmp_path)
    residual = {n: torch.zeros(p.shape) for n, p in model.params.items()}
    verdict = publish(runtime, store, honest, residual=residual)
    name = next(iter(residual))
    store.put(
        residual_key(runtime.run_id, WINDOW, MINER), encode_tensors({**residual, name: residual[name] + 1})
    )
    verify(runtime, model, store, verdict, segments=(0,))
    assert verdict.fraud and "residual" in verdict.verdicts["trajectory"]


def test_with_a_tolerance_the_distance_is_measured(runtime, model, honest, tmp_path):
    store = FileStore(tmp_path)
    loose = dataclasses.replace(
        runtime,
        config=runtime.config.model_copy(
            update={"verification": runtime.config.verification.model_copy(update={"replay_tolerance": 0.01})}
        ),
    )
    verdict = verify(loose, model, store, publish(runtime, store, honest))
    assert verdict.passed and verdict.numbers["replay_distance"] == 0.0
    other = verify(loose, model, store, publish(runtime, store, train(runtime, model, data_of=OTHER)))
    assert other.fraud and "tolerance 0.01" in other.verdicts["replay"]


def stale_window(runtime, model, older) -> Window:
    """Trained from `older` parameters (anchored to them, as a node that never saw G_w would), but
    claiming G_w: boundary 0 is G_w's start state and the update is G_w − θ_H."""
    stale = train(runtime, GlobalModel(WINDOW, older, OuterState(momentum={})))
    runtime.load_params(model.params)
    states = {**stale.states, 0: window_start_state(runtime.model)}
    end = stale.states[runtime.inner.inner_steps]
    return Window(states, pseudo_gradient(model.params, end.params), stale.losses)


def test_training_from_an_older_base_fails_the_replay_of_any_segment(runtime, model, tmp_path):
    generator = torch.Generator().manual_seed(7)
    older = {
        n: p + 1e-3 * p.std() * torch.randn(p.shape, generator=generator) for n, p in model.params.items()
    }
    window = stale_window(runtime, model, older)
    for segment in range(runtime.inner.n_segments):
        store = FileStore(tmp_path / f"s{segment}")
        verdict = verify(runtime, model, store, publish(runtime, store, window), segments=(segment,))
        assert verdict.fraud and f"segment {segment}" in verdict.verdicts["replay"], verdict.verdicts

    unanchored = dataclasses.replace(runtime, inner=dataclasses.replace(runtime.inner, base_anchor=0.0))
    window = stale_window(unanchored, model, older)
    store = FileStore(tmp_path / "unanchored")
    verdict = verify(unanchored, model, store, publish(unanchored, store, window), segments=(2,))
    assert verdict.passed, "without the anchor only segment 0 could tell; this test would prove nothing"


def test_a_reveal_missing_is_hiding_but_a_store_failing_now_is_not_fraud():
    from distrai.store import StoreError
    from distrai.store.base import NotFound
    from validators.replay import not_read

    hidden = not_read("states", "challenged boundary 5", NotFound("no key"))
    assert hidden.fraud and "was not revealed" in hidden.why
    failing = not_read("states", "challenged boundary 5", StoreError("connection reset"))
    assert not failing.fraud and "could not be read" in failing.why
