"""A window's boundary work off the training thread (distrai/train/boundaries.py): the same hashes,
sketches, files and update as when every state is kept; a window of many boundaries reuses two
buffers, so host memory does not grow with its boundaries; a trainer more than two boundaries ahead
of a slow worker waits for it; a write that fails in the worker fails the window."""

from __future__ import annotations

import threading

import pytest
import torch
from support.tiny_models import fast_inner_config, tiny_data, tiny_model

from distrai.train.assignment import batch_indices
from distrai.train.boundaries import BoundaryState, BoundaryWorker, boundary
from distrai.train.inner import inner_loop
from distrai.train.loss import causal_lm_loss
from distrai.train.sketch import SketchTable, sketch
from distrai.train.train_state import TrainState, load_state, save_state, state_hash, states_equal

DATA = tiny_data(seq_len=32, documents=120)
CONFIG = fast_inner_config(inner_steps=24, segment_steps=2)


def batch(step: int) -> torch.Tensor:
    return DATA.batch(batch_indices("run", 0, "bob", step, 4, DATA.n_train, ["alice", "bob"]))


@pytest.fixture(scope="module")
def kept():
    """The window with every state kept in the result."""
    return inner_loop(tiny_model(), batch, causal_lm_loss, CONFIG, keep_states=True)


def test_written_states_hashes_sketches_and_update_are_those_of_the_kept_states(kept, tmp_path):
    buffers: set[int] = set()

    def write(b: BoundaryState) -> None:
        assert b.state is not None
        buffers.add(next(iter(b.state.params.values())).data_ptr())
        save_state(b.state, tmp_path / f"{b.step:06d}.safetensors")

    flat = inner_loop(tiny_model(), batch, causal_lm_loss, CONFIG, keep_states=False, on_boundary=write)
    assert [b.step for b in flat.boundaries] == list(range(0, 25, 2))
    assert all(b.state is None for b in flat.boundaries), "the result keeps no state"
    for mine, theirs in zip(flat.boundaries, kept.boundaries, strict=True):
        assert (mine.step, mine.state_hash, mine.sketch) == (theirs.step, theirs.state_hash, theirs.sketch)
        again = boundary(theirs.state, CONFIG.sketch_seed, CONFIG.sketch_size, keep_state=False)
        assert (again.state_hash, again.sketch) == (mine.state_hash, mine.sketch), "as the inline code gives"
        written = load_state(tmp_path / f"{mine.step:06d}.safetensors")
        assert states_equal(written, theirs.state) and state_hash(written) == mine.state_hash
    assert flat.losses == kept.losses
    assert all(torch.equal(flat.pseudo_gradient[n], kept.pseudo_gradient[n]) for n in kept.pseudo_gradient)
    # 13 boundaries through two buffers: host memory flat in the number of boundaries
    assert 1 <= len(buffers) <= 2, buffers  # two when the worker is behind, one when it keeps up


def test_kept_states_are_never_captured_into_again(kept):
    pointers = {next(iter(b.state.params.values())).data_ptr() for b in kept.boundaries}
    assert len(pointers) == len(kept.boundaries)


def test_a_write_that_fails_in_the_worker_fails_the_window():
    def write(b: BoundaryState) -> None:
        if b.step == 4:
            raise OSError("No space left on device")

    with pytest.raises(RuntimeError, match="the boundary worker failed: No space left on device"):
        inner_loop(tiny_model(), batch, causal_lm_loss, CONFIG, keep_states=False, on_boundary=write)
    assert not [t for t in threading.enumerate() if t.name == "boundary-worker"], "the worker is stopped"


def test_the_trainer_waits_for_a_buffer_when_the_worker_holds_both():
    """The worker is held on boundary 0: two states are in its hands (0 and 1), so a third capture
    waits until boundary 0 is done, then gets boundary 0's buffer back."""
    release, started = threading.Event(), threading.Event()

    def slow(b: BoundaryState) -> None:
        if b.step == 0:
            started.set()
            release.wait()

    worker = BoundaryWorker(CONFIG.sketch_seed, CONFIG.sketch_size, slow, keep_states=False)
    try:
        model = tiny_model()
        states = []
        for step in (0, 1):
            assert worker.buffer() is None, "the first two captures allocate"
            states.append(state_of(model, step))
            worker.submit(states[-1])
        started.wait()
        got: list[TrainState | None] = []
        third = threading.Thread(target=lambda: got.append(worker.buffer()))
        third.start()
        third.join(0.2)
        assert third.is_alive() and not got, "a third buffer is not handed out while the worker holds two"
        release.set()
        third.join()
        assert got == [states[0]], "boundary 0's buffer, once its work is done"
        worker.submit(state_of(model, 2))
        assert [b.step for b in worker.finish()] == [0, 1, 2]
    finally:
        release.set()
        worker.close()


def state_of(model: torch.nn.Module, step: int) -> TrainState:
    return TrainState(
        params={n: p.detach().clone() for n, p in model.named_parameters()}, optimizer={}, step=step
    )


def test_the_sketch_table_gives_the_sketch_bit_for_bit():
    """Dense and sparse tensors (a range's nonzeros alone when under half), an empty one, a shape
    the table has not seen, and the same table again: always `sketch`'s bits."""
    generator = torch.Generator().manual_seed(0)
    sparse = torch.zeros(10_000)
    sparse[::7] = torch.randn(len(sparse[::7]), generator=generator)
    params = {
        "dense": torch.randn(3_000, generator=generator),
        "zeros": torch.zeros(5_000),
        "matrix": torch.randn(7, 11, generator=generator),
        "empty": torch.zeros(0),
        "sparse": sparse,
    }
    table = SketchTable("seed", 64)
    for _ in range(2):
        assert torch.equal(table(params), sketch(params, "seed", 64))
    assert torch.equal(table({"dense": torch.randn(4_000, generator=generator) * 0}), torch.zeros(64))
    grown = {"dense": torch.randn(6_000, generator=generator)}
    assert torch.equal(table(grown), sketch(grown, "seed", 64)), "another size of a name already seen"
    assert torch.equal(SketchTable("seed", 17)(params), sketch(params, "seed", 17))
