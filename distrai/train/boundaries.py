"""What a window commits at its segment boundaries, and that work off the training thread, in
bounded memory.

Each boundary carries the canonical hash of the training state (parameters, optimizer state,
step), a linear sketch of its parameters (`BoundaryState`, `boundary`; its buckets and signs hashed
once per run, `sketch_table`) and, when asked, the state itself. At a boundary the training thread
only copies the state into a buffer (`capture_state`'s `into`: host memory allocated and touched
once per window, page-locked on a GPU) and goes on
training; one worker thread (`BoundaryWorker`) hashes it, sketches it and hands it to `on_boundary`
(the miner writes it to disk), in boundary order. Hashing, sketching and writing barely hold the
GIL, so they run beside the training steps. The worker holds at most `buffers` states: when every
buffer is still being worked on, the training thread waits for one, so a window's host memory does
not grow with its boundaries (with `keep_states`, the states are the result and are not reused:
memory then grows as before). An error in the worker (a failed write, say) is raised on the
training thread at its next boundary, or when the window joins the worker, and fails the window as
it did inline.

The hashes, sketches and files are those the inline code gave, bit for bit: the same functions run
on the same bytes, only on another thread (`tests/test_boundaries.py`).
"""

from __future__ import annotations

import functools
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, replace

from distrai.train.sketch import SketchTable
from distrai.train.train_state import TrainState, state_hash


@dataclass(frozen=True)
class BoundaryState:
    """The commitment at one boundary, and the state when it was kept."""

    step: int
    state_hash: str
    sketch: list[float]
    state: TrainState | None


@functools.lru_cache(maxsize=1)
def sketch_table(seed: str, size: int) -> SketchTable:
    """The run's sketch table (`sketch.SketchTable`), built as the first boundary is sketched and
    kept for the next ones: one per process, the run's seed and size."""
    return SketchTable(seed, size)


def boundary(state: TrainState, sketch_seed: str, sketch_size: int, keep_state: bool) -> BoundaryState:
    """Hash and sketch the state captured after `state.step` inner steps (the sketch `sketch.sketch`
    gives, from the run's table)."""
    numbers = sketch_table(sketch_seed, sketch_size)(state.params).tolist()
    return BoundaryState(
        step=state.step, state_hash=state_hash(state), sketch=numbers, state=state if keep_state else None
    )


DEFAULT_BUFFERS = 2
"""One state being worked on while the next segment trains into the other."""


class BoundaryWorker:
    """Hashes, sketches and hands on a window's boundary states, in order, on one thread."""

    def __init__(
        self,
        sketch_seed: str,
        sketch_size: int,
        on_boundary: Callable[[BoundaryState], None] | None,
        keep_states: bool,
        buffers: int = DEFAULT_BUFFERS,
    ):
        if buffers < 1:
            raise ValueError(f"a boundary worker needs at least one buffer, got {buffers}")
        self.sketch_seed, self.sketch_size = sketch_seed, sketch_size
        self.on_boundary = on_boundary
        self.keep_states = keep_states
        self.buffers = buffers
        self.done: list[BoundaryState] = []
        self.seconds: list[float] = []
        """the worker's time on each boundary done: hash, sketch and `on_boundary`"""
        self.free: deque[TrainState] = deque()
        """states whose work is done, to capture the next ones into"""
        self.in_use = 0
        """states captured and not yet done (or handed out for capturing)"""
        self.queue: deque[TrainState] = deque()
        self.error: BaseException | None = None
        self.closing = False
        self.cond = threading.Condition()
        self.thread = threading.Thread(target=self._work, name="boundary-worker", daemon=True)
        self.thread.start()

    def buffer(self) -> TrainState | None:
        """A state to capture the next boundary into (None: allocate a fresh one), once fewer than
        `buffers` states are in the worker's hands; raises the worker's error, if it had one."""
        with self.cond:
            self.cond.wait_for(lambda: self.error is not None or self.in_use < self.buffers)
            self._raise()
            self.in_use += 1
            return self.free.popleft() if self.free else None

    def submit(self, state: TrainState) -> None:
        """Hand a captured state (into the last `buffer`) to the worker."""
        with self.cond:
            self._raise()
            self.queue.append(state)
            self.cond.notify_all()

    def finish(self) -> list[BoundaryState]:
        """Wait until every submitted state is done; the boundaries in order, or the worker's error."""
        with self.cond:
            self.cond.wait_for(lambda: self.error is not None or (not self.queue and self.in_use == 0))
            self._raise()
        return list(self.done)

    def close(self) -> None:
        """Stop the worker thread (what is queued is dropped); safe to call more than once."""
        with self.cond:
            self.closing = True
            self.cond.notify_all()
        self.thread.join()

    def _raise(self) -> None:
        if self.error is not None:
            raise RuntimeError(f"the boundary worker failed: {self.error}") from self.error

    def _work(self) -> None:
        while True:
            with self.cond:
                self.cond.wait_for(lambda: self.closing or bool(self.queue))
                if self.closing:
                    return
                state = self.queue[0]
            started = time.perf_counter()
            try:
                made = boundary(state, self.sketch_seed, self.sketch_size, keep_state=True)
                if self.on_boundary is not None:
                    self.on_boundary(made)
            except BaseException as exc:  # any failure fails the window on the training thread
                with self.cond:
                    self.error = exc
                    self.cond.notify_all()
                return
            with self.cond:
                self.queue.popleft()
                self.seconds.append(time.perf_counter() - started)
                self.done.append(made if self.keep_states else replace(made, state=None))
                if not self.keep_states:
                    self.free.append(state)
                self.in_use -= 1
                self.cond.notify_all()
