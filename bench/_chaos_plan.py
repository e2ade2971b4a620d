"""The options and the plan of bench/chaos.py's run: which outages and kills it holds, and when
each falls."""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from pathlib import Path

from distrai.protocol.run import shipped_config_path
from distrai.protocol.windows import Phase, WindowConfig, activities, window_start

PHASES = ("train", "reveal", "validate")
ROLES = ("miner", "validator")
RESTART_S = 12.0
"""About how long a restarted node takes to reach its loop on a loaded 2-core machine."""
MARGIN_BLOCKS = 3
"""No kill within this many blocks after a store outage or a chain stall, nor within this many
blocks plus `RESTART_S` before one, so each effect has one cause."""
MIN_KILL_GAP_BLOCKS = 3


OUTAGE_KINDS = {"store": "store outage", "s3": "S3 server paused", "chain": "chain stall"}
"""`--outage` KIND → the disruption's name in the checks and the report."""
STORE_KINDS = frozenset({"store outage", "S3 server paused"})
"""The disruptions of the nodes' store."""
S3_BUCKET = "distrai-chaos"
"""The bucket of the nodes' store on the run's moto server (a run with an `s3` outage)."""
OBJECT_LIMIT = 1 << 40
"""The size cap of the checks' reads of store objects: none in practice (the checks read every
object whole, as a node would within its own limits)."""


@dataclass(frozen=True)
class OutageSpec:
    kind: str
    """a value of `OUTAGE_KINDS`"""
    phase: str
    """where it starts (`PHASES`, `outage_start`)"""
    seconds: float

    @classmethod
    def parse(cls, text: str) -> OutageSpec:
        """`KIND:PHASE:SECONDS`, as `--outage` takes it (`store:reveal:8`)."""
        try:
            kind, phase, seconds = text.split(":")
            spec = cls(OUTAGE_KINDS[kind], phase, float(seconds))
        except (ValueError, KeyError):
            raise ValueError(
                f"--outage {text!r}: expected KIND:PHASE:SECONDS, KIND one of {', '.join(OUTAGE_KINDS)}"
            ) from None
        if phase not in PHASES or spec.seconds <= 0:
            raise ValueError(f"--outage {text!r}: PHASE one of {', '.join(PHASES)}, SECONDS above 0")
        return spec

    def __str__(self) -> str:
        kind = next(k for k, v in OUTAGE_KINDS.items() if v == self.kind)
        return f"{kind}:{self.phase}:{self.seconds:g}"


DEFAULT_OUTAGES = (
    OutageSpec("store outage", "reveal", 9.0),
    OutageSpec("S3 server paused", "validate", 8.0),
    OutageSpec("chain stall", "train", 5.0),
    OutageSpec("chain stall", "validate", 3.0),
)
"""Every kind, every phase: the store on S3 (for the pause), unreachable across a reveal phase and
paused in a validate phase. At 0.8 s blocks the reveal phase outlasts its outage (12.8 s); the
validate phase's chain stall ends before the read patience (4 blocks, 3.2 s, after the reveal
deadline). The server's pause (8 s) outlasts the nodes' read timeout at 0.8 s blocks (5 s,
`distrai.store.timeouts`), so a request in flight times out once, is tried again and waits for the
server, and the stores say so; a pause within the timeout is only a slow answer, and a run with one
finds the nodes with nothing to say (`--seed 1` at 5 s: "S3 server paused logged" failed). A store
outage there (`--outage store:validate:2`) makes a challenged reveal withheld when a
validator's first reads end after the read patience (docs/reliability.md, notes)."""


@dataclass(frozen=True)
class ChaosOptions:
    work: Path
    kills: int = 20
    windows: int = 8
    seed: int = 0
    block_time: float = 0.8
    miners: int = 3
    validators: int = 2
    outages: tuple[OutageSpec, ...] = DEFAULT_OUTAGES
    timeout_s: float | None = None
    """the whole run, from the nodes' start; default from the windows and the block time"""
    warm_start: bool = False
    """nodes, restarts included, forked from a warm interpreter (`distrai.localnet.warm_start`), as
    the test suite's short run starts them; a plain `python` start is what an operator's restart costs"""
    run_config: Path = field(default_factory=lambda: shipped_config_path("cpu-localnet"))
    """the run config the network runs"""

    @property
    def on_s3(self) -> bool:
        """Whether the nodes' store is a bucket of a local S3 server (the run pauses it)."""
        return any(o.kind == "S3 server paused" for o in self.outages)


@dataclass(frozen=True)
class Planned:
    kind: str
    """"kill" or a value of `OUTAGE_KINDS`"""
    block: float
    """chain block (with a fraction) at which it starts"""
    node: str = ""
    phase: str = ""
    """the phase aimed at (`PHASES`)"""
    seconds: float = 0.0
    """for an outage: how long it lasts"""


def phase_label(under_way: list[tuple[int, Phase]]) -> str:
    """One word for what `activities` says is under way: the older window's reveal or validation
    if one runs beside the training, else the phase itself."""
    phases = [p for _, p in under_way]
    for phase in (Phase.REVEAL, Phase.VALIDATE, Phase.WEIGHTS):
        if phase in phases:
            return phase.value
    return Phase.TRAIN.value


def phase_offsets(cfg: WindowConfig) -> dict[str, list[int]]:
    """Block offsets inside a window (past the first two) at which each label of `phase_label` holds."""
    window = 2
    offsets: dict[str, list[int]] = {}
    for offset in range(cfg.blocks_per_window):
        label = phase_label(activities(cfg, window_start(cfg, window) + offset))
        offsets.setdefault(label, []).append(offset)
    return offsets


def outage_start(cfg: WindowConfig, phase: str, window: int, rng: random.Random) -> float:
    """The block (with a fraction) at which an outage of `phase` in `window` starts: inside the
    train phase's first block alone (on pipelined windows the last of the window, so the outage
    spans the next window's first block, when every node reads or writes the chain: miners start the
    window and read the commitments, validators note the window's miners); in the reveal phase in
    the second half of the commit deadline's block, so the store is already out of reach at the next
    block, when every miner uploads its update blob and the challenged miners their reveals (a
    tiny model's upload takes a fraction of a block: an outage that began inside that block found
    it done in a CI run); in the validate phase inside the reveal deadline's block, when the
    validators list the reveals (a store back before the read patience costs nothing; one still out
    of reach then makes a challenged miner's reveal withheld, docs/protocol.md, "Withheld reveals")."""
    bpw = cfg.blocks_per_window
    offset, fraction = {
        "train": (min(phase_offsets(cfg).get("train", [0])), (0.1, 0.9)),
        "reveal": (cfg.commit_offset % bpw, (0.5, 0.9)),
        "validate": (cfg.reveal_offset % bpw, (0.1, 0.9)),
    }[phase]
    if phase_label(activities(cfg, window_start(cfg, 2) + offset)) != phase:
        raise ValueError(f"the run's windows have no {phase} phase to put an outage in")
    return window_start(cfg, window) + offset + rng.uniform(*fraction)


def plan(
    cfg: WindowConfig,
    options: ChaosOptions,
    nodes: dict[str, str],
    first_window: int,
    rng: random.Random,
) -> list[Planned]:
    """Every kill and disruption of the run, in block order. `nodes` maps each name to its role;
    `first_window` is the miners' first window. Kills fall in the windows after it, spread evenly;
    each (role, phase) pair is hit at least once when there are kills enough, and no node is
    killed again within half a window of its last kill (its restart takes seconds); among the
    nodes of a role, the one killed least often so far is taken."""
    bpw = cfg.blocks_per_window
    offsets = phase_offsets(cfg)
    missing = [p for p in PHASES if p not in offsets]
    if missing:
        raise ValueError(f"the run's windows have no {', '.join(missing)} phase to aim kills at")
    kill_windows = list(range(first_window + 1, first_window + options.windows))
    if not kill_windows:
        raise ValueError("--windows must be at least 2: kills fall after the miners' first window")
    blocked: list[tuple[float, float]] = []
    events: list[Planned] = []
    before = MARGIN_BLOCKS + RESTART_S / options.block_time
    # each outage in a window of its own, before the last (the window after it shows what it cost);
    # one of half a window or more with no outage in the two windows on either side, since the
    # windows it can cost reach a window past its end
    outage_windows = kill_windows[:-1] or kill_windows
    used: set[int] = set()
    for spec in options.outages:
        if spec.seconds > bpw * options.block_time:
            raise ValueError(
                f"a {spec.kind} of {spec.seconds:g} s is longer than a window ({bpw * options.block_time:g} s)"
            )
        length = spec.seconds / options.block_time
        apart = 0 if length < bpw / 2 else 2
        for _ in range(1000):
            window = rng.choice(outage_windows)
            start = outage_start(cfg, spec.phase, window, rng)
            span = (start - before, start + length + MARGIN_BLOCKS)
            if not set(range(window - apart, window + apart + 1)) & used and not any(
                _overlap(span, b) for b in blocked
            ):
                break
        else:
            raise ValueError(f"no room for the {spec.kind} in the {spec.phase} phase: add --windows")
        events.append(Planned(spec.kind, start, phase=spec.phase, seconds=spec.seconds))
        blocked.append(span)
        used.add(window)

    # every (role, phase) pair once, then moments drawn uniformly over the windows' blocks
    combos = [(role, phase) for role in ROLES for phase in PHASES]
    rng.shuffle(combos)
    wanted = [(role, phase, True) for role, phase in combos[: options.kills]]
    while len(wanted) < options.kills:
        role = rng.choices(ROLES, weights=(3, 2))[0]
        wanted.append((role, rng.choices(PHASES, weights=[len(offsets[p]) for p in PHASES])[0], False))
    slots = [kill_windows[i * len(kill_windows) // options.kills] for i in range(options.kills)]
    rng.shuffle(wanted)
    moments: list[tuple[float, str, str]] = []
    # the pairs first, the scarcest phase first (on pipelined windows the train phase alone lasts two blocks)
    pairs = sorted(zip(wanted, slots, strict=True), key=lambda p: (not p[0][2], len(offsets[p[0][1]])))
    for (role, phase, required), window in pairs:
        choices = (
            [(role, phase)]
            if required
            else [(r, p) for r in (role, *(x for x in ROLES if x != role)) for p in (phase, *PHASES)]
        )
        placed = False
        for kind, option in choices:
            for w in sorted(kill_windows, key=lambda x: (abs(x - window), x)):
                free = [
                    b
                    for o in _aim(cfg, offsets, kind, option, required)
                    if _free(b := window_start(cfg, w) + o, blocked, moments, kind, bpw / 2)
                ]
                if free:
                    moments.append((rng.choice(free) + rng.uniform(0.05, 0.95), kind, option))
                    placed = True
                    break
            if placed:
                break
        if not placed:
            raise ValueError(
                f"no free block for a {role} kill in the {phase} phase: add --windows or fewer --kills"
            )
    last_kill: dict[str, float] = {}
    times: dict[str, int] = {}
    for block, role, phase in sorted(moments):
        names = [n for n, r in nodes.items() if r == role]
        rested = [n for n in names if block - last_kill.get(n, -1e9) >= bpw / 2]
        if rested:
            fewest = min(times.get(n, 0) for n in rested)
            node = rng.choice([n for n in rested if times.get(n, 0) == fewest])
        else:
            node = min(names, key=lambda n: last_kill.get(n, -1e9))
        last_kill[node] = block
        times[node] = times.get(node, 0) + 1
        events.append(Planned("kill", block, node=node, phase=phase))
    return sorted(events, key=lambda e: e.block)


def plan_for_seed(
    cfg: WindowConfig, options: ChaosOptions, nodes: dict[str, str], first_window: int
) -> list[Planned]:
    """`plan` with `random.Random(seed)`; when that draw leaves no room for some kill, the next
    draws of the same seed are tried, so a seed always gives the same plan."""
    error = None
    for attempt in range(100):
        rng = random.Random(options.seed if attempt == 0 else f"{options.seed}/{attempt}")
        try:
            return plan(cfg, options, nodes, first_window, rng)
        except ValueError as exc:
            error = exc
    raise ValueError(f"no plan fits: {error}")


def _aim(
    cfg: WindowConfig, offsets: dict[str, list[int]], role: str, phase: str, required: bool
) -> list[int]:
    """Offsets a kill may take. The one required miner kill of the reveal phase aims at the block
    after the previous window's commit deadline, when its reveal is being uploaded (a reveal of the
    tiny model takes about a second, so a kill anywhere else in the phase finds it done)."""
    if required and role == "miner" and phase == "reveal":
        upload = (cfg.commit_offset + 1) % cfg.blocks_per_window
        return [o for o in offsets[phase] if o == upload] or offsets[phase]
    return offsets[phase]


def _free(
    block: int,
    blocked: list[tuple[float, float]],
    moments: list[tuple[float, str, str]],
    role: str,
    apart: float,
) -> bool:
    """Whether a kill may fall in `block`: outside every disruption's span, at least
    `MIN_KILL_GAP_BLOCKS` from any other kill and, for a validator, `apart` blocks from any other
    validator kill (one validator down at a time, so a window keeps an aggregate)."""
    if any(_overlap((block, block + 1), b) for b in blocked):
        return False
    for at, other, _ in moments:
        gap = abs(at - (block + 0.5))
        if gap < MIN_KILL_GAP_BLOCKS or (role == other == "validator" and gap < apart):
            return False
    return True


def _overlap(a: tuple[float, float], b: tuple[float, float]) -> bool:
    return a[0] < b[1] and b[0] < a[1]
