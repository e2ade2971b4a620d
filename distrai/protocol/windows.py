"""Block → window → phase arithmetic, deadlines, and the challenge draw. Pure functions, no I/O.

Window `w` covers blocks `[w * blocks_per_window, (w + 1) * blocks_per_window)`. Its work runs in
half-open spans at the run config's offsets, counted from the window's first block:

    TRAIN     [start, commit deadline)      miners train H steps and anchor their manifest
    REVEAL    [commit deadline, reveal)     miners upload the update and the challenged checkpoints
    VALIDATE  [reveal, aggregate deadline)  validators check, replay, score and publish the aggregate
    WEIGHTS   [aggregate deadline, ...)     validators fold scores and set weights

Sequential windows (`pipelined = false`) keep every span inside the window, and window w trains
from the model that window w − 1's aggregate produced. Pipelined windows (`pipelined = true`)
train for the whole window (`commit_offset = blocks_per_window`) while the previous window is
revealed and checked: the reveal and aggregate deadlines of window w fall inside window w + 1,
and window w trains from the model before window w − 1's aggregate (the outer step lands one
window late, `base_index`), so every window's base is public when the window starts.

A deadline is the first block at which an act is late: a commitment counts for window `w` when it
sits in a block `b` with `window_start(w) <= b < commit_deadline(w)`. The hash of the block *at* the
commit deadline seeds the challenge, so no commitment that counts could have known it.

The challenge draw ranks candidates by sha256 of a domain-separated, length-prefixed message, so it
is deterministic, uniform over subsets, and independent of the order of any input list. One seed
per window, from the block hash at the commit deadline, draws everything: the miners replayed in
the window (`challenged`), what each of them reveals (its segments and the sample of its last
state, `trajectory_sample`), and how the replays are shared among the validators
(`replay_shares`: each challenged miner goes to `replicas` of them, the load balanced to within one
miner). A miner's reveal does not grow with the number of validators, and a validator's replays
shrink as validators join.

A claim is checked in proportion to its size. Every miner is challenged with the run's floor
probability q (`challenge_miners` of the committed miners, uniformly); a miner whose commitment
claims more than `reference_segments` segments draws, besides, q · (claimed − reference) / reference
runs of segments in expectation (`extra_runs`), so claiming m times the reference multiplies one's
own chance of a replay about m-fold, and a claim of segments that were never trained is caught the
surer the more it claims. A miner on probation (registered within the run's `probation_windows`
windows before the window) is challenged in every window. Nobody can change the draw after it is
known: the claims are the segment counts the miners anchored on chain before the commit deadline.
"""

from __future__ import annotations

import hashlib
import heapq
import math
import re
from collections.abc import Iterable
from dataclasses import dataclass
from decimal import Decimal
from enum import Enum
from fractions import Fraction

from pydantic import BaseModel, ConfigDict, Field, ValidationInfo, field_validator

SEED_BYTES = 32
_BLOCK_HASH = re.compile(r"0x[0-9a-fA-F]+")
_MINER_TAG = b"distrai/challenge-miner/v1"
_SEGMENT_TAG = b"distrai/challenge-segment/v1"
_REVEAL_TAG = b"distrai/reveal-seed/v1"
_PIECE_TAG = b"distrai/trajectory-piece/v1"
_VALIDATOR_TAG = b"distrai/challenge-validator/v1"
_SCORER_TAG = b"distrai/score-validator/v1"
_SCORED_TAG = b"distrai/score-miner/v1"
_EXTRA_TAG = b"distrai/challenge-extra/v1"


class WindowConfig(BaseModel):
    """Window length and phase offsets, in blocks. The offsets are counted from the window's first
    block and strictly increasing: inside the window for sequential windows; for pipelined ones
    the commit deadline is at most the window's end and the reveal and aggregate deadlines fall
    before the end of the next window. How long they last in seconds depends on the chain's block
    time (12 s on a Bittensor chain)."""

    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)

    blocks_per_window: int = Field(ge=1, description="window length, in blocks")
    pipelined: bool = Field(
        default=False,
        description="train window w + 1 while window w is revealed and checked; the outer step lands one window late",
    )
    commit_offset: int = Field(
        ge=1, description="commit deadline, in blocks after the window's start; the train phase ends here"
    )
    reveal_offset: int = Field(description="reveal deadline, in blocks after the window's start")
    aggregate_offset: int = Field(
        description="deadline for the leader's aggregate, in blocks after the window's start"
    )
    checkpoint_every: int = Field(
        default=10,
        ge=1,
        description="a full checkpoint of the global model is published every this many windows",
    )

    @field_validator("commit_offset", "reveal_offset", "aggregate_offset")
    @classmethod
    def _offsets_increase_within_reach(cls, value: int, info: ValidationInfo) -> int:
        previous = {"reveal_offset": "commit_offset", "aggregate_offset": "reveal_offset"}.get(
            info.field_name or ""
        )
        if previous is not None and previous in info.data and value <= info.data[previous]:
            raise ValueError(f"{value} must be after {previous} ({info.data[previous]})")
        length = info.data.get("blocks_per_window")
        if length is None:
            return value
        if not info.data.get("pipelined", False):
            if value >= length:
                raise ValueError(
                    f"{value} must be inside the window, before blocks_per_window ({length}); "
                    "pipelined windows may reach into the next"
                )
        elif info.field_name == "commit_offset" and value > length:
            raise ValueError(
                f"{value} must not pass the window's end ({length}): the next window trains there"
            )
        elif value >= 2 * length:
            raise ValueError(
                f"{value} must be before 2 x blocks_per_window ({2 * length}): "
                "the window after next trains on the aggregate"
            )
        elif (
            info.field_name == "aggregate_offset" and value >= info.data.get("reveal_offset", value) + length
        ):
            raise ValueError(
                f"{value} must be before reveal_offset + blocks_per_window "
                f"({info.data['reveal_offset'] + length}): a window's checks start from the previous window's aggregate"
            )
        return value


class Phase(Enum):
    """The phases of a window (DESIGN.md, "A window"). The challenge is not a phase but the block at
    the commit deadline, whose hash seeds it."""

    TRAIN = "train"
    REVEAL = "reveal"
    VALIDATE = "validate"
    WEIGHTS = "weights"


def _non_negative(name: str, value: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{name} must be an int, got {type(value).__name__}")
    if value < 0:
        raise ValueError(f"{name} must be >= 0, got {value}")
    return value


def window_of(cfg: WindowConfig, block: int) -> int:
    """The window that `block` belongs to."""
    return _non_negative("block", block) // cfg.blocks_per_window


def window_start(cfg: WindowConfig, window: int) -> int:
    """The first block of `window`."""
    return _non_negative("window", window) * cfg.blocks_per_window


def window_end(cfg: WindowConfig, window: int) -> int:
    """The first block after `window` (the start of the next one)."""
    return window_start(cfg, window) + cfg.blocks_per_window


def roster_block(cfg: WindowConfig, window: int) -> int:
    """The block whose registered hotkeys are `window`'s miner list for data assignment and
    challenges: the last block before the window starts (block 0 for window 0), complete by the
    time the window begins, so every node reads the same list whenever it reads it."""
    return max(window_start(cfg, window) - 1, 0)


def commit_deadline(cfg: WindowConfig, window: int) -> int:
    """First block at which a commitment for `window` is late; its hash seeds the challenge."""
    return window_start(cfg, window) + cfg.commit_offset


def reveal_deadline(cfg: WindowConfig, window: int) -> int:
    """First block at which a reveal for `window` is late."""
    return window_start(cfg, window) + cfg.reveal_offset


def aggregate_deadline(cfg: WindowConfig, window: int) -> int:
    """First block at which the leader's aggregate for `window` is late and the next validator serves."""
    return window_start(cfg, window) + cfg.aggregate_offset


def read_patience(cfg: WindowConfig, window: int) -> int:
    """The block until which a validator keeps asking a miner's store that did not answer for what
    the miner committed to: the first third of the validate phase (at least one block), so the
    checks still end before the aggregate deadline. What is still unread then is settled
    (`validators.withheld`)."""
    return reveal_deadline(cfg, window) + max(1, (cfg.aggregate_offset - cfg.reveal_offset) // 3)


def score_patience(cfg: WindowConfig, window: int) -> int:
    """The block until which a validator waits for the other validators' measurements of the
    window's updates (`validators.shared_scoring`): the last sixth of the validate phase (at least
    two blocks) is left to score, report and aggregate, and it ends after the read patience."""
    span = cfg.aggregate_offset - cfg.reveal_offset
    return max(read_patience(cfg, window) + 1, aggregate_deadline(cfg, window) - max(2, span // 6))


def base_index(cfg: WindowConfig, window: int, first_window: int) -> int:
    """Which global model window `window` trains from: M_j is the model after the aggregates of
    every window before j (the run's initial parameters at the run's first window). Sequential
    windows train from M_w; pipelined ones from M_{w-1}, since window w − 1's aggregate is
    published only during window w. The first windows of a run train from its initial model."""
    delay = 1 if cfg.pipelined else 0
    return max(_non_negative("first_window", first_window), _non_negative("window", window) - delay)


def phase(cfg: WindowConfig, block: int) -> Phase:
    """The phase of its own window that `block` falls in. On pipelined windows that train to the
    window's end every block is in its window's train phase; the reveal and validation of the previous window run beside it
    (`activities`)."""
    return _phase_at(cfg, _non_negative("block", block) % cfg.blocks_per_window)


def activities(cfg: WindowConfig, block: int) -> list[tuple[int, Phase]]:
    """Every (window, phase) under way at `block`, oldest window first: one on sequential windows,
    up to two on pipelined ones (training window w while window w − 1 is revealed or checked)."""
    current = window_of(cfg, block)
    under_way = []
    for w in (current - 1, current):
        if w < 0:
            continue
        offset = block - window_start(cfg, w)
        if w == current or offset < cfg.aggregate_offset:
            under_way.append((w, _phase_at(cfg, offset)))
    return under_way


def _phase_at(cfg: WindowConfig, offset: int) -> Phase:
    if offset < cfg.commit_offset:
        return Phase.TRAIN
    if offset < cfg.reveal_offset:
        return Phase.REVEAL
    if offset < cfg.aggregate_offset:
        return Phase.VALIDATE
    return Phase.WEIGHTS


def committed_in_time(cfg: WindowConfig, window: int, commit_block: int) -> bool:
    """Whether a commitment recorded at `commit_block` counts for `window`."""
    return (
        window_start(cfg, window)
        <= _non_negative("commit_block", commit_block)
        < commit_deadline(cfg, window)
    )


def is_checkpoint_window(cfg: WindowConfig, window: int) -> bool:
    """Whether a full checkpoint of the global model at the start of `window` is published."""
    return _non_negative("window", window) % cfg.checkpoint_every == 0


def blocks_until(block: int, target: int) -> int:
    """Blocks to wait from `block` until `target` is reached; 0 when it already has been."""
    return max(0, _non_negative("target", target) - _non_negative("block", block))


def _digest(tag: bytes, *parts: bytes) -> bytes:
    """sha256 over a tag and length-prefixed parts, so no two different part lists collide by concatenation."""
    h = hashlib.sha256(tag)
    for part in parts:
        h.update(len(part).to_bytes(8, "big"))
        h.update(part)
    return h.digest()


def _hotkey(name: str, value: str) -> bytes:
    if not isinstance(value, str) or not value:
        raise ValueError(f"{name} must be a non-empty string, got {value!r}")
    return value.encode("utf-8")


def _hotkey_list(name: str, values: Iterable[str]) -> set[str]:
    if isinstance(values, str | bytes):
        raise TypeError(f"{name} must be a collection of hotkeys, not a single string")
    return {_hotkey(name, v).decode("utf-8") for v in values}


def _positive(name: str, value: int) -> int:
    if _non_negative(name, value) < 1:
        raise ValueError(f"{name} must be >= 1, got {value}")
    return value


def _check_seed(seed: bytes) -> bytes:
    if not isinstance(seed, bytes) or len(seed) != SEED_BYTES:
        raise ValueError(f"seed must be {SEED_BYTES} bytes from reveal_seed, got {seed!r:.80}")
    return seed


def reveal_seed(block_hash_at_commit_deadline: str, run_id: str, window: int) -> bytes:
    """The 32-byte seed of one window's challenge, the same for every miner and validator. The block
    hash is a `0x` hex string (case does not matter); nobody knows it before the commit deadline's
    block exists."""
    return _digest(
        _REVEAL_TAG,
        _block_hash(block_hash_at_commit_deadline),
        _hotkey("run_id", run_id),
        _non_negative("window", window).to_bytes(8, "big"),
    )


def _block_hash(value: str) -> bytes:
    if not isinstance(value, str) or not _BLOCK_HASH.fullmatch(value):
        raise ValueError(f"block hash must be a 0x-prefixed hex string, got {value!r:.80}")
    return value.lower().encode("ascii")


def challenge_count(count_or_fraction: int | float, population: int) -> int:
    """How many of `population` a challenge takes: an int is a count (capped at the population), a
    float in (0, 1] a fraction rounded up (so a non-empty population always gives at least one).
    The fraction is read from its shortest decimal form, so 0.3 of 10 is exactly 3."""
    _non_negative("population", population)
    if isinstance(count_or_fraction, bool) or not isinstance(count_or_fraction, int | float):
        raise TypeError(f"count_or_fraction must be an int or a float, got {count_or_fraction!r}")
    if isinstance(count_or_fraction, int):
        return min(_non_negative("count", count_or_fraction), population)
    if not 0.0 < count_or_fraction <= 1.0:
        raise ValueError(f"a fraction must be in (0, 1], got {count_or_fraction}")
    return math.ceil(Decimal(repr(count_or_fraction)) * population)


def challenged_miners(seed: bytes, miner_hotkeys: Iterable[str], count_or_fraction: int | float) -> list[str]:
    """The miners a seed challenges, most urgent first. Duplicates and input order do not matter;
    every subset of the given size is equally likely."""
    _check_seed(seed)
    unique = _hotkey_list("miner_hotkeys", miner_hotkeys)
    ranked = sorted(unique, key=lambda h: (_digest(_MINER_TAG, seed, h.encode("utf-8")), h))
    return ranked[: challenge_count(count_or_fraction, len(ranked))]


def challenged_segments(
    seed: bytes, miner_hotkey: str, n_segments: int, count: int, runs: int = 1
) -> list[int]:
    """The segment indices (of `n_segments`) a seed challenges for one miner, ascending: `runs` runs
    of `count` consecutive segments, each from a distinct, uniformly drawn first one, wrapping around
    to segment 0 (runs that meet merge). A run is replayed from one revealed state (each replayed
    end, matching its committed hash, starts the next segment; segment 0 starts at the window's
    base), so a longer run costs replay, not upload, and one run covers every segment with
    probability count / n_segments. The first run is the same whatever `runs` is."""
    _check_seed(seed)
    hotkey = _hotkey("miner_hotkey", miner_hotkey)
    if _non_negative("n_segments", n_segments) < _non_negative("count", count):
        raise ValueError(f"cannot challenge {count} segments of {n_segments}")
    if count == 0 or _non_negative("runs", runs) == 0:
        return []
    firsts = heapq.nsmallest(
        runs, range(n_segments), key=lambda i: _digest(_SEGMENT_TAG, seed, hotkey, i.to_bytes(8, "big"))
    )
    return sorted({(first + i) % n_segments for first in firsts for i in range(count)})


def run_starts(segments: Iterable[int]) -> list[int]:
    """The challenged segments whose start state must be revealed: those that begin a run (the one
    before is not challenged) other than segment 0, whose start is the window's base."""
    chosen = set(segments)
    return sorted(s for s in chosen if s > 0 and s - 1 not in chosen)


@dataclass(frozen=True)
class ChallengeInputs:
    """What fixes a window's challenge. Miners and validators must agree on `miner_hotkeys`: the
    miners whose commitment counts for the window, which the chain shows to all."""

    block_hash: str
    """hash of the block at the window's commit deadline"""
    run_id: str
    window: int
    miner_hotkeys: tuple[str, ...]
    miners_challenged: int | float
    """count or fraction of the miners replayed in the window, by somebody"""
    segments_per_miner: int
    """segments replayed per challenged miner (all of them when it committed fewer)"""
    replicas: int = 1
    """validators that replay each challenged miner (fewer when fewer validators take part)"""
    claims: tuple[tuple[str, int], ...] = ()
    """(miner, segments its commitment claims); a miner not listed draws no runs beyond the floor's"""
    reference_segments: int | None = None
    """the claim up to which a miner draws only the floor's run; each segment beyond adds
    q / reference_segments runs in expectation (None: no runs beyond the floor's)"""
    probation: tuple[str, ...] = ()
    """miners challenged whatever the floor draws: hotkeys registered within the run's probation"""


def floor_rate(inputs: ChallengeInputs) -> Fraction:
    """q: the share of the committed miners the floor challenges, each with that probability."""
    population = len(set(inputs.miner_hotkeys))
    if population == 0:
        return Fraction(0)
    return Fraction(challenge_count(inputs.miners_challenged, population), population)


def extra_runs(seed: bytes, miner_hotkey: str, claimed: int, reference: int | None, rate: Fraction) -> int:
    """The runs a claim of `claimed` segments draws beyond the floor's: rate · (claimed − reference) /
    reference in expectation (none up to the reference), the whole part always and the fraction
    with its probability, drawn from the seed in exact arithmetic so every node draws the same."""
    _check_seed(seed)
    if reference is None or _non_negative("claimed", claimed) <= _positive("reference", reference):
        return 0
    expected = rate * Fraction(claimed - reference, reference)
    whole = math.floor(expected)
    part = expected - whole
    draw = int.from_bytes(_digest(_EXTRA_TAG, seed, _hotkey("miner_hotkey", miner_hotkey)), "big")
    return whole + int(draw * part.denominator < part.numerator * (1 << (8 * SEED_BYTES)))


def challenge_runs(inputs: ChallengeInputs, miner_hotkey: str) -> int:
    """How many runs of segments the window replays of one miner: one when the floor draws it or it is
    on probation, plus the runs its claim draws beyond the reference (`extra_runs`); 0: not
    challenged."""
    return _Draw(inputs).runs(miner_hotkey)


def challenged(inputs: ChallengeInputs) -> list[str]:
    """The miners replayed in the window, most urgent first: each with probability
    `miners_challenged` (a fraction), whoever validates; besides, each miner on probation and each
    whose claim draws runs beyond the reference (`challenge_runs`)."""
    draw = _Draw(inputs)
    return [m for m in challenged_miners(draw.seed, inputs.miner_hotkeys, 1.0) if draw.runs(m) > 0]


class _Draw:
    """One window's draw of runs, its seed, floor and claims worked out once."""

    def __init__(self, inputs: ChallengeInputs):
        self.inputs = inputs
        self.seed = reveal_seed(inputs.block_hash, inputs.run_id, inputs.window)
        self.floor = set(challenged_miners(self.seed, inputs.miner_hotkeys, inputs.miners_challenged))
        self.claims = dict(inputs.claims)
        self.rate = floor_rate(inputs)

    def runs(self, miner_hotkey: str) -> int:
        drawn = int(miner_hotkey in self.floor or miner_hotkey in self.inputs.probation)
        claimed = self.claims.get(miner_hotkey, 0)
        return drawn + extra_runs(self.seed, miner_hotkey, claimed, self.inputs.reference_segments, self.rate)


def replay_shares(inputs: ChallengeInputs, validator_hotkeys: Iterable[str]) -> dict[str, list[str]]:
    """Validator → the challenged miners it replays. The validators are ranked by the window's seed
    and the i-th challenged miner goes to the `replicas` validators from rank i × replicas onwards
    (modulo their number): every challenged miner is replayed by min(replicas, V) distinct
    validators, and no validator replays more than one miner above any other."""
    seed = reveal_seed(inputs.block_hash, inputs.run_id, inputs.window)
    return _dealt(seed, _VALIDATOR_TAG, validator_hotkeys, challenged(inputs), inputs.replicas)


def score_shares(
    inputs: ChallengeInputs, validator_hotkeys: Iterable[str], replicas: int
) -> dict[str, list[str]]:
    """Validator → the miners whose updates it measures (`validators/usefulness.py`): every miner
    whose commitment counts for the window, each by `replicas` of the validators (fewer when fewer
    take part), dealt round the validators ranked by the window's seed in an order of the miners the
    seed draws too, so no validator measures more than one miner above any other and nobody can
    pick whom it measures."""
    seed = reveal_seed(inputs.block_hash, inputs.run_id, inputs.window)
    miners = sorted(
        _hotkey_list("miner_hotkeys", inputs.miner_hotkeys),
        key=lambda m: (_digest(_SCORED_TAG, seed, m.encode("utf-8")), m),
    )
    return _dealt(seed, _SCORER_TAG, validator_hotkeys, miners, replicas)


def _dealt(
    seed: bytes, tag: bytes, validator_hotkeys: Iterable[str], miners: list[str], replicas: int
) -> dict[str, list[str]]:
    """`miners` dealt in order round the validators ranked by the seed under `tag`, each to `replicas`
    of them (all of them when fewer)."""
    validators = sorted(
        _hotkey_list("validator_hotkeys", validator_hotkeys),
        key=lambda v: (_digest(tag, seed, v.encode("utf-8")), v),
    )
    shares: dict[str, list[str]] = {v: [] for v in validators}
    if not validators:
        return shares
    copies = min(_positive("replicas", replicas), len(validators))
    for i, miner in enumerate(miners):
        for j in range(copies):
            shares[validators[(i * copies + j) % len(validators)]].append(miner)
    return shares


def replayed_by(inputs: ChallengeInputs, validator_hotkeys: Iterable[str], validator: str) -> list[str]:
    """The challenged miners `validator` replays when `validator_hotkeys` share the window's replays
    (none when it is not among them)."""
    return replay_shares(inputs, validator_hotkeys).get(validator, [])


def miner_segments(inputs: ChallengeInputs, miner_hotkey: str, n_segments: int) -> list[int]:
    """The segments a miner that committed `n_segments` reveals and any validator that challenges
    it replays, drawn from the window's seed: its `challenge_runs` runs (at least one) of
    `segments_per_miner` consecutive segments."""
    seed = reveal_seed(inputs.block_hash, inputs.run_id, inputs.window)
    count = min(inputs.segments_per_miner, n_segments)
    runs = max(1, challenge_runs(inputs, miner_hotkey))
    return challenged_segments(seed, miner_hotkey, n_segments, count, runs)


def segments_to_reveal(inputs: ChallengeInputs, miner_hotkey: str, n_segments: int) -> list[int]:
    """The segments of a miner that committed `n_segments` when it is challenged, else none."""
    if miner_hotkey in challenged(inputs):
        return miner_segments(inputs, miner_hotkey, n_segments)
    return []


def trajectory_sample(
    inputs: ChallengeInputs, miner_hotkey: str, pieces: Iterable[str], fraction: float
) -> list[str]:
    """The pieces of its last state and residual a challenged miner reveals for the trajectory
    check: `fraction` of `pieces` (rounded up), drawn from the window's seed; sorted."""
    seed = reveal_seed(inputs.block_hash, inputs.run_id, inputs.window)
    hotkey = _hotkey("miner_hotkey", miner_hotkey)
    unique = sorted(set(pieces))
    ranked = sorted(unique, key=lambda p: (_digest(_PIECE_TAG, seed, hotkey, p.encode("utf-8")), p))
    return sorted(ranked[: challenge_count(fraction, len(ranked))])


def on_probation(cfg: WindowConfig, window: int, registered_at: int, probation_windows: int) -> bool:
    """Whether a hotkey registered at block `registered_at` is on probation in `window`: the window is
    one of the first `probation_windows` whose roster holds it (`roster_block`), those that start
    within that many windows' blocks after its registration."""
    age = window_start(cfg, window) - _non_negative("registered_at", registered_at)
    return 0 < age <= _non_negative("probation_windows", probation_windows) * cfg.blocks_per_window


def skipped_windows(last_tried: int | None, next_window: int) -> range:
    """The windows a node passes over without setting out to train or check them: those after the
    last one it set out to (`last_tried`; none before its first) and before `next_window`."""
    return range(0) if last_tried is None else range(last_tried + 1, next_window)
