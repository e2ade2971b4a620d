"""A validator's verification of a challenged miner, in one process: the miner's side is the
project's own inner loop, codec, update encoding and trajectory reveal; the validator's is
`verify_challenge`.

An honest window passes bit for bit; each way of cheating fails its named check."""

from __future__ import annotations

import dataclasses
import hashlib
import re
from pathlib import Path

import pytest
import torch
from bittensor.keyfiles import Keypair

from distrai.codec import get_codec
from distrai.protocol.globalmodel import GlobalModel
from distrai.protocol.layout import state_key, trajectory_key
from distrai.protocol.run import ClassTolerance, challenge_inputs, load_run_config
from distrai.protocol.runtime import build_runtime
from distrai.protocol.trajectory import build_trajectory, decode_trajectory, encode_trajectory, param_pieces
from distrai.protocol.update import decode_update, encode_update, residual_digests, residual_hash
from distrai.store import FileStore
from distrai.train.assignment import batch_indices
from distrai.train.coded_state import encode_coded_state
from distrai.train.hashing import piece_digests
from distrai.train.inner import inner_loop, pseudo_gradient, window_start_state
from distrai.train.outer import OuterState
from distrai.train.replay_class import replay_class_of
from distrai.train.train_state import encode_state, state_digests, state_hash
from distrai.wire.window_documents import UpdateManifest
from validators.checks import PASS, MinerVerdict
from validators.refused import Refused
from validators.replay_check import verify_challenge
from validators.trajectory_check import check_encoding
from validators.window import WindowBasis

CONFIG = Path(__file__).parent / "support" / "adversary-localnet.toml"
WINDOW = 5
MINER = Keypair.create_from_uri("//ReplayMiner").ss58_address
OTHER = Keypair.create_from_uri("//OtherMiner").ss58_address
MINERS = sorted([MINER, OTHER])
BLOCK_HASH = "0x" + "3c" * 32


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
    sketches: dict[int, list[float]] = dataclasses.field(default_factory=dict)
    derived: dict[tuple, tuple] = dataclasses.field(default_factory=dict, repr=False, compare=False)
    """what `once` computed of the window's states, by the call and the states' ids (each entry
    holds its states, so their ids stay theirs); shared by a `dataclasses.replace` of the window"""

    def once(self, function, *states):
        """`function(*states)`, computed once per state object: the tests publish the same honest
        window many times (at 0.05 CPU-s a coded state), and no test changes a state in place."""
        key = (function, *map(id, states))
        if key not in self.derived:
            self.derived[key] = (states, function(*states))
        return self.derived[key][1]


def coded_against(state, start) -> bytes:
    """`state` coded against the window's first state, as the uploader codes a revealed state."""
    return encode_coded_state(state, start.params)


def train(runtime, model, data_of=MINER, swapped_step=None) -> Window:
    """The miner's window; `swapped_step` trains on the other miner's batch at that one step."""
    runtime.load_params(model.params)
    cfg = runtime.config.train

    def batch(t):
        owner = OTHER if t == swapped_step else data_of
        return runtime.data.batch(
            batch_indices(runtime.run_id, WINDOW, owner, t, cfg.batch_size, runtime.data.n_train, MINERS)
        )

    result = inner_loop(runtime.model, batch, runtime.loss_fn, runtime.inner)
    runtime.load_params(model.params)
    return Window(
        {b.step: b.state for b in result.boundaries},
        result.pseudo_gradient,
        result.losses,
        {b.step: b.sketch for b in result.boundaries},
    )


@pytest.fixture(scope="module")
def honest(runtime, model):
    return train(runtime, model)


def publish(
    runtime,
    store,
    window: Window,
    update=None,
    residual=None,
    hashes=None,
    reveal=None,
    residual_revealed=None,
    drawn=None,
    replay_class=None,
):
    """Reveal what a challenged miner reveals (every boundary but 0 and H, coded against boundary 0 as
    the uploader codes them, and the trajectory reveal with the `drawn` pieces, by default all), encode
    the update, and return the verdict the cheap checks would pass."""
    encoded = runtime.codec.encode(update or window.pseudo_gradient, residual)
    blob = encode_update(encoded.payload, encoded.metadata, MINER, WINDOW)
    last = runtime.inner.inner_steps
    for step, state in (reveal or window.states).items():
        if step not in (0, last):
            coded = window.once(coded_against, state, window.states[0])
            store.put(state_key(runtime.run_id, WINDOW, MINER, step), coded)
    end = window.states[last]
    revealed_residual = residual_revealed or residual
    trajectory = build_trajectory(
        list(param_pieces(end.params).values()) if drawn is None else drawn,
        end.params,
        dict(window.once(state_digests, end)),
        revealed_residual,
        None if revealed_residual is None else residual_digests(revealed_residual),
        None if encoded.residual is None else residual_digests(encoded.residual),
    )
    store.put(trajectory_key(runtime.run_id, WINDOW, MINER), encode_trajectory(trajectory))
    hashes = hashes or {step: window.once(state_hash, state) for step, state in window.states.items()}
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
        boundaries=[
            {"step": s, "state_hash": h, "sketch": window.sketches.get(s, [0.0])}
            for s, h in sorted(hashes.items())
        ],
        residual_in_hash=None if residual is None else residual_hash(residual),
        residual_out_hash=None if encoded.residual is None else residual_hash(encoded.residual),
        replay_class=replay_class,
    )
    verdict = MinerVerdict(MINER, 1, verdicts={"manifest": PASS, "consistency": PASS, "update": PASS})
    verdict.manifest, verdict.blob = manifest, blob
    shapes = {n: tuple(p.shape) for n, p in window.pseudo_gradient.items()}
    verdict.update = decode_update(blob, runtime.codec, shapes, len(blob), MINER, WINDOW)
    return verdict


def window_basis(runtime, model, block_hash=BLOCK_HASH, **fields) -> WindowBasis:
    """Window WINDOW as the checks read it: from `model`, of MINERS, its challenge drawn from
    `block_hash`; `fields` the rest (shares, announcements, is_registered, start_hash)."""
    return WindowBasis(
        runtime=runtime,
        number=WINDOW,
        base=model,
        inputs=challenge_inputs(runtime.config, block_hash, WINDOW, MINERS),
        miners=tuple(MINERS),
        shares=fields.pop("shares", {}),
        announcements=fields.pop("announcements", {}),
        is_registered=fields.pop("is_registered", lambda hk: True),
        **fields,
    )


def verify(runtime, model, store, verdict, segments=(0, 1, 2, 3), sample=None):
    pieces = list(param_pieces(model.params).values())
    basis = window_basis(runtime, model)
    verify_challenge(basis, verdict, store, list(segments), pieces if sample is None else sample)
    return verdict


def test_a_run_of_segments_is_replayed_from_its_one_revealed_start(runtime, model, honest, tmp_path):
    store = FileStore(tmp_path)
    k = runtime.inner.segment_steps
    reveal = {step: st for step, st in honest.states.items() if step in (0, 2 * k, 4 * k)}
    verdict = verify(runtime, model, store, publish(runtime, store, honest, reveal=reveal), segments=(2, 3))
    assert verdict.passed, verdict.verdicts
    assert verdict.numbers["replay_steps"] == 2 * k
    wrapped = verify(runtime, model, store, publish(runtime, store, honest, reveal=reveal), segments=(0, 3))
    assert wrapped.fraud and f"challenged boundary {3 * k} was not revealed" in wrapped.verdicts["states"]


def test_an_honest_window_passes_bit_for_bit(runtime, model, honest, tmp_path):
    store = FileStore(tmp_path)
    verdict = verify(runtime, model, store, publish(runtime, store, honest))
    assert verdict.passed, verdict.verdicts
    assert {"states", "replay", "trajectory"} <= verdict.verdicts.keys()
    assert verdict.numbers["replay_distance"] == 0.0
    assert verdict.numbers["replay_steps"] == 4 * runtime.inner.segment_steps
    assert verdict.numbers["revealed_bytes"] > 0


def test_an_honest_bfloat16_window_passes(runtime, tmp_path):
    config = runtime.config.model_copy(
        update={"model": runtime.config.model.model_copy(update={"dtype": "bfloat16"})}
    )
    bf16 = build_runtime(config)
    model = GlobalModel(WINDOW, bf16.initial_params(), OuterState(momentum={}))
    assert next(iter(model.params.values())).dtype == torch.float32  # the global model stays float32
    store = FileStore(tmp_path)
    verdict = verify(bf16, model, store, publish(bf16, store, train(bf16, model)), segments=(1,))
    assert verdict.passed, verdict.verdicts


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
    verdict = verify(runtime, model, store, publish(runtime, store, honest, hashes=hashes), segments=(1,))
    assert verdict.fraud and "does not hash to the committed state" in verdict.verdicts["states"]


def test_an_unrevealed_state_fails(runtime, model, honest, tmp_path):
    store = FileStore(tmp_path)
    reveal = {s: st for s, st in honest.states.items() if s != runtime.inner.segment_steps}
    verdict = verify(runtime, model, store, publish(runtime, store, honest, reveal=reveal), segments=(1,))
    assert verdict.fraud and "was not revealed" in verdict.verdicts["states"]


def test_a_state_revealed_under_another_step_fails(runtime, model, honest, tmp_path):
    store = FileStore(tmp_path)
    k = runtime.inner.segment_steps
    reveal = {**honest.states, k: honest.states[2 * k]}
    verdict = verify(runtime, model, store, publish(runtime, store, honest, reveal=reveal), segments=(1,))
    assert verdict.fraud and f"boundary {k} says it is step {2 * k}" in verdict.verdicts["states"]


def test_a_state_coded_against_another_base_fails_its_hash(runtime, model, honest, tmp_path):
    store = FileStore(tmp_path)
    k = runtime.inner.segment_steps
    verdict = publish(runtime, store, honest)
    elsewhere = {name: p + 1e-3 for name, p in honest.states[0].params.items()}
    store.put(state_key(runtime.run_id, WINDOW, MINER, k), encode_coded_state(honest.states[k], elsewhere))
    verify(runtime, model, store, verdict, segments=(1,))
    assert verdict.fraud and "does not hash to the committed state" in verdict.verdicts["states"]


@pytest.mark.parametrize(
    ("reveal", "reason"),
    [
        ("plain", "expected a 'distrai.coded_train_state/1' blob"),
        ("truncated", "malformed"),
        ("garbage", "malformed"),
        ("corrupted", "byte plane"),
    ],
)
def test_a_revealed_state_that_does_not_decode_fails_with_its_reason(
    runtime, model, honest, tmp_path, reveal, reason
):
    store = FileStore(tmp_path)
    k = runtime.inner.segment_steps
    verdict = publish(runtime, store, honest)
    key = state_key(runtime.run_id, WINDOW, MINER, k)
    coded = store.get(key, 1 << 30)
    frames_start = len(coded) - 4096  # inside the last tensors' zstd frames
    broken = {
        "plain": encode_state(honest.states[k]),
        "truncated": coded[: len(coded) // 2],
        "garbage": b"\x00" * 64,
        "corrupted": coded[:frames_start] + bytes(b ^ 0x5A for b in coded[frames_start:]),
    }[reveal]
    store.put(key, broken)
    verify(runtime, model, store, verdict, segments=(1,))
    assert verdict.fraud and f"revealed boundary {k} is malformed" in verdict.verdicts["states"]
    assert reason in verdict.verdicts["states"], verdict.verdicts["states"]


@pytest.mark.parametrize("cheat", ["scaled", "shrunk", "noise"])
def test_an_update_that_is_not_the_trajectorys_encoding_fails(runtime, model, honest, tmp_path, cheat):
    """A challenged miner whose update is not the encoding of its committed training is caught: ten
    times its work, or 1e-4 of it (paid in full if unchallenged, it forfeits that pay once caught,
    as every claim beyond the work does: docs/protocol.md, "Pay that matures")."""
    store = FileStore(tmp_path)
    if cheat in ("scaled", "shrunk"):
        factor = 10.0 if cheat == "scaled" else 1e-4
        update = {n: factor * t for n, t in honest.pseudo_gradient.items()}
    else:
        generator = torch.Generator().manual_seed(0)
        update = {
            n: torch.randn(t.shape, generator=generator) * t.std() for n, t in honest.pseudo_gradient.items()
        }
    verdict = verify(runtime, model, store, publish(runtime, store, honest, update=update), segments=(1,))
    assert verdict.verdicts["replay"] == PASS
    assert verdict.fraud and "not the encoding of the committed trajectory" in verdict.verdicts["trajectory"]


def retamper(runtime, store, change):
    """Rewrite the revealed trajectory after `change(reveal)`."""
    key = trajectory_key(runtime.run_id, WINDOW, MINER)
    reveal = decode_trajectory(store.get(key, 1 << 30), 1 << 30)
    store.put(key, encode_trajectory(change(reveal)))


def test_a_residual_piece_that_does_not_match_its_digest_fails(runtime, model, honest, tmp_path):
    store = FileStore(tmp_path)
    residual = {n: torch.zeros(p.shape) for n, p in model.params.items()}
    verdict = publish(runtime, store, honest, residual=residual)
    ref = next(iter(sorted(verdict_residual_refs(store, runtime))))

    def bump(reveal):
        return dataclasses.replace(reveal, residual={**reveal.residual, ref: reveal.residual[ref] + 1})

    retamper(runtime, store, bump)
    verify(runtime, model, store, verdict, segments=(0,))
    assert verdict.fraud and "incoming residual does not hash to its digest" in verdict.verdicts["trajectory"]


def verdict_residual_refs(store, runtime):
    return decode_trajectory(
        store.get(trajectory_key(runtime.run_id, WINDOW, MINER), 1 << 30), 1 << 30
    ).residual


def test_residual_digests_that_are_not_the_committed_residual_fail(runtime, model, honest, tmp_path):
    store = FileStore(tmp_path)
    residual = {n: torch.zeros(p.shape) for n, p in model.params.items()}
    name = next(iter(residual))
    other = {**residual, name: residual[name] + 1}
    verdict = verify(
        runtime,
        model,
        store,
        publish(runtime, store, honest, residual=residual, residual_revealed=other),
        segments=(0,),
    )
    assert (
        verdict.fraud and "incoming residual do not hash to the committed hash" in verdict.verdicts["states"]
    )


def test_a_missing_trajectory_reveal_is_hiding(runtime, model, honest, tmp_path):
    store = FileStore(tmp_path)
    verdict = publish(runtime, store, honest)
    store.delete(trajectory_key(runtime.run_id, WINDOW, MINER))
    verify(runtime, model, store, verdict, segments=(1,))
    assert verdict.fraud and "the trajectory reveal was not revealed" in verdict.verdicts["states"]


def test_a_reveal_holds_one_start_state_per_segment_and_a_sample_of_the_last_state(
    runtime, model, honest, tmp_path
):
    store = FileStore(tmp_path)
    k = runtime.inner.segment_steps
    pieces = list(param_pieces(model.params).values())
    fraction = runtime.config.verification.trajectory_fraction
    sample = pieces[: max(1, round(fraction * len(pieces)))]
    verdict = verify(
        runtime, model, store, publish(runtime, store, honest, drawn=sample), segments=(1,), sample=sample
    )
    assert verdict.passed, verdict.verdicts
    one_state = len(encode_coded_state(honest.states[k], honest.states[0].params))
    sampled = sum(model.params[ref.name].numel() for ref in sample) * 4
    # the start of segment 1 and the sampled parameters, plus the digests: never the end or the last state
    assert one_state + sampled < verdict.numbers["revealed_bytes"] < one_state + sampled + 64 * 1024


def test_an_idle_window_claiming_the_start_state_everywhere_fails_the_states(
    runtime, model, honest, tmp_path
):
    store = FileStore(tmp_path)
    start = honest.states[0]
    idle = Window(
        {step: start for step in honest.states},
        {n: torch.zeros_like(t) for n, t in honest.pseudo_gradient.items()},
        [0.0] * runtime.inner.inner_steps,
    )
    verdict = verify(runtime, model, store, publish(runtime, store, idle), segments=(0,))
    last = runtime.inner.inner_steps
    assert verdict.fraud and f"not a state after step {last}" in verdict.verdicts["states"]


def test_boundary_zero_that_is_not_the_base_fails(runtime, model, honest, tmp_path):
    store = FileStore(tmp_path)
    hashes = {s: state_hash(st) for s, st in honest.states.items()}
    hashes[0] = state_hash(honest.states[runtime.inner.segment_steps])
    verdict = verify(runtime, model, store, publish(runtime, store, honest, hashes=hashes), segments=(0,))
    assert verdict.fraud and "boundary 0 is not the window's base" in verdict.verdicts["states"]


def test_committed_losses_that_the_replay_does_not_reproduce_fail(runtime, model, honest, tmp_path):
    store = FileStore(tmp_path)
    k = runtime.inner.segment_steps
    losses = list(honest.losses)
    losses[k + 1] *= 1.0 + 1e-6
    window = dataclasses.replace(honest, losses=losses)
    passes = verify(runtime, model, store, publish(runtime, store, window), segments=(0,))
    assert passes.passed, passes.verdicts
    caught = verify(runtime, model, store, publish(runtime, store, window), segments=(1,))
    assert caught.fraud and "per-step losses" in caught.verdicts["replay"]


def test_a_cheat_on_one_piece_is_caught_only_when_that_piece_is_drawn(runtime, model, honest, tmp_path):
    pieces = list(param_pieces(model.params).values())  # the tiny model's tensors are one piece each
    target = pieces[3]
    update = {n: t.clone() for n, t in honest.pseudo_gradient.items()}
    update[target.name] *= 10
    drawn = [ref for ref in pieces if ref != target]
    store = FileStore(tmp_path / "missed")
    missed = verify(
        runtime, model, store, publish(runtime, store, honest, update=update, drawn=drawn), (1,), drawn
    )
    assert missed.passed, missed.verdicts
    store = FileStore(tmp_path / "caught")
    caught = verify(
        runtime, model, store, publish(runtime, store, honest, update=update, drawn=[target]), (1,), [target]
    )
    assert caught.fraud and f"piece {target.key}" in caught.verdicts["trajectory"]


def test_the_encoding_check_cuts_a_tensor_into_pieces_as_the_codec_chunks_it(runtime, model, honest):
    piece = 4096  # a multiple of the config's chunk (256): each tensor of the tiny model is many pieces
    residual = {n: 1e-4 * torch.ones(p.shape) for n, p in model.params.items()}
    encoded = runtime.codec.encode(honest.pseudo_gradient, residual)
    shapes = {n: tuple(p.shape) for n, p in model.params.items()}
    update = runtime.codec.decode(encoded.payload, encoded.metadata, shapes)
    end = honest.states[runtime.inner.inner_steps]
    pieces = list(param_pieces(model.params, piece).values())
    middle = [ref for ref in pieces if ref.index == 2]
    reveal = build_trajectory(
        middle,
        end.params,
        piece_digests({"param": end.params}, piece),
        residual,
        piece_digests({"tensors": residual}, piece),
        piece_digests({"tensors": encoded.residual}, piece),
        piece,
    )
    check_encoding(runtime.codec, reveal, middle, model.params, update, piece)
    target = middle[0]
    update[target.name].view(-1)[2 * piece + 7] += 1.0
    with pytest.raises(Refused, match=f"piece {re.escape(target.key)}"):
        check_encoding(runtime.codec, reveal, middle, model.params, update, piece)


def test_an_incoming_residual_under_a_codec_that_keeps_none_fails_the_trajectory(runtime, model, honest):
    """A miner may reveal an incoming residual under any codec: where the run's codec keeps none, that
    is a failed trajectory, not a validator's crash."""
    piece = 4096
    residual = {n: 1e-4 * torch.ones(p.shape) for n, p in model.params.items()}
    plain = get_codec("none")
    encoded = plain.encode(honest.pseudo_gradient, None)
    update = plain.decode(
        encoded.payload, encoded.metadata, {n: tuple(p.shape) for n, p in model.params.items()}
    )
    end = honest.states[runtime.inner.inner_steps]
    drawn = [ref for ref in param_pieces(model.params, piece).values() if ref.index == 0]
    reveal = build_trajectory(
        drawn,
        end.params,
        piece_digests({"param": end.params}, piece),
        residual,
        piece_digests({"tensors": residual}, piece),
        None,
        piece,
    )
    with pytest.raises(
        Refused, match="codec none keeps no residual, but an incoming one was revealed"
    ) as caught:
        check_encoding(plain, reveal, drawn, model.params, update, piece)
    assert caught.value.check == "trajectory" and caught.value.fraud


def tolerance_class(runtime, replay=0.01, loss=1e-3, tolerances=()):
    """The runtime as a validator of the tolerance class sees it: by default, replay within 0.01,
    losses within 1e-3."""
    verification = runtime.config.verification.model_copy(
        update={"replay_tolerance": replay, "loss_tolerance": loss, "tolerances": list(tolerances)}
    )
    return dataclasses.replace(
        runtime, config=runtime.config.model_copy(update={"verification": verification})
    )


def test_with_a_tolerance_the_distance_is_measured(runtime, model, honest, tmp_path):
    store = FileStore(tmp_path)
    loose = tolerance_class(runtime)
    verdict = verify(loose, model, store, publish(runtime, store, honest))
    assert verdict.passed and verdict.numbers["replay_distance"] == 0.0
    other = verify(loose, model, store, publish(runtime, store, train(runtime, model, data_of=OTHER)))
    assert other.fraud and "tolerance 0.01" in other.verdicts["replay"]


def test_with_a_tolerance_a_loss_off_by_more_than_its_bound_fails(runtime, model, honest, tmp_path):
    store = FileStore(tmp_path)
    loose = tolerance_class(runtime)
    k = runtime.inner.segment_steps
    losses = list(honest.losses)
    losses[k + 1] *= 1.01
    verdict = verify(
        loose, model, store, publish(runtime, store, dataclasses.replace(honest, losses=losses)), (1,)
    )
    assert verdict.fraud and f"step {k + 1}'s loss replayed to" in verdict.verdicts["replay"]


def test_the_miner_s_own_class_is_replayed_bit_for_bit_and_a_listed_pair_within_its_row(
    runtime, model, honest, tmp_path
):
    """A manifest naming the validator's own replay class is held to the committed hash even in a
    run with a tolerance; one naming another device of the table's row is held to the row."""
    store = FileStore(tmp_path)
    k = runtime.inner.segment_steps
    mine = replay_class_of(
        runtime.model, runtime.device, dataclasses.replace(runtime.inner.step, micro_batches=1)
    )
    h200 = mine.model_copy(update={"device": "NVIDIA H200"})
    row = ClassTolerance(devices=(mine.device, h200.device), replay=0.01, loss=1e-3, measured="this test")
    loose = tolerance_class(runtime, replay=0.02, loss=2e-3, tolerances=[row])
    # segment 1's end committed under another hash, as a replay on other hardware sees its own end
    hashes = {step: state_hash(state) for step, state in honest.states.items()} | {2 * k: "cd" * 32}
    same = verify(
        loose, model, store, publish(runtime, store, honest, hashes=hashes, replay_class=mine), (1,)
    )
    assert same.fraud and "another state than the committed one" in same.verdicts["replay"]
    assert same.numbers["replay_tolerance"] == 0.0
    across = verify(
        loose, model, store, publish(runtime, store, honest, hashes=hashes, replay_class=h200), (1,)
    )
    assert across.passed, across.verdicts
    assert across.numbers["replay_tolerance"] == 0.01 and across.numbers["replay_distance"] == 0.0
    unnamed = verify(loose, model, store, publish(runtime, store, honest, hashes=hashes), (1,))
    assert unnamed.passed and unnamed.numbers["replay_tolerance"] == 0.02


def test_the_per_step_losses_catch_a_swapped_batch_the_end_distance_misses(runtime, model, tmp_path):
    store = FileStore(tmp_path)
    k = runtime.inner.segment_steps
    swapped = train(runtime, model, swapped_step=k + 1)
    blind = verify(
        tolerance_class(runtime, replay=1.0, loss=1.0), model, store, publish(runtime, store, swapped), (1,)
    )
    assert blind.passed, blind.verdicts
    distance = blind.numbers["replay_distance"]
    assert distance > 0.0
    # an end tolerance the swap stays inside: only the committed losses can show it
    ends_only = tolerance_class(runtime, replay=2 * distance, loss=1.0)
    assert verify(ends_only, model, store, publish(runtime, store, swapped), (1,)).passed
    checked = tolerance_class(runtime, replay=2 * distance, loss=1e-3)
    verdict = verify(checked, model, store, publish(runtime, store, swapped), (1,))
    assert verdict.fraud and f"step {k + 1}'s loss replayed to" in verdict.verdicts["replay"]


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
    from validators.refused import not_read

    hidden = not_read("states", "challenged boundary 5", NotFound("no key"))
    assert hidden.fraud and "was not revealed" in hidden.why
    failing = not_read("states", "challenged boundary 5", StoreError("connection reset"))
    assert not failing.fraud and "could not be read" in failing.why
