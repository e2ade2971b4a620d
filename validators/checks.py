"""The checks a validator runs on one miner's window, cheapest first, each with a named verdict.

Everything a miner sends is untrusted: every failure becomes a verdict with a reason in the
report, never an exception that reaches the validator's loop.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field

import torch

from distrai.codec import CodecError
from distrai.protocol.announce import Announcement
from distrai.protocol.layout import manifest_key
from distrai.protocol.run import RunConfig
from distrai.protocol.update import CheckedUpdate, check_update
from distrai.store import StoreError
from distrai.wire import WireError, open_document
from distrai.wire.verdicts import PASS, Check, Number
from distrai.wire.window_documents import UpdateManifest, parse_body
from validators.inventory import Reader
from validators.refused import answered
from validators.window import WindowBasis


@dataclass
class MinerVerdict:
    """What the validator found for one miner in one window."""

    hotkey: str
    uid: int
    verdicts: dict[str, str] = field(default_factory=dict)
    numbers: dict[str, float] = field(default_factory=dict)
    manifest: UpdateManifest | None = None
    manifest_bytes: bytes | None = None
    """the signed manifest as committed (the aggregate republishes it for followers)"""
    blob: bytes | None = None
    checked: CheckedUpdate | None = field(default=None, repr=False)
    """the update blob as checked: `update` decodes it on first use, the duplicate check sketches
    it without decoding (`validators.duplicates`)"""
    decoded: dict[str, torch.Tensor] | None = field(default=None, repr=False)
    """the update, once decoded or set"""
    score: float = 0.0
    fraud: bool = False
    """A failure only a dishonest miner causes: zeroes the average and bars the hotkey."""
    unread: bool = False
    """A read of a committed object failed because the miner's store did not answer: tried again
    until the validator's read patience runs out, then settled by `validators.withheld`."""
    unmeasured: bool = False
    """Passed every check, but nobody measured its update in time: not scored this window (its
    moving average is left as it was, `validators.shared_scoring`)."""
    withheld: bool = False
    """Settled as withheld: a challenged miner's committed object stayed unread (fraud, confirmed
    or lifted by the validator's own re-read one window later)."""
    receipts: dict[int, list[float]] = field(default_factory=dict)
    """segment → this validator's receipt for its replay of it (`validators.receipts`)"""

    @property
    def update(self) -> dict[str, torch.Tensor] | None:
        """The miner's pseudo-gradient: decoded from the checked blob on first use and kept, so that
        only the updates a validator measures, replays or aggregates are ever decoded."""
        if self.decoded is None and self.checked is not None:
            self.decoded = self.checked.decode()
        return self.decoded

    @update.setter
    def update(self, value: dict[str, torch.Tensor] | None) -> None:
        """Set the update itself; the checked blob, which no longer says what it is, is let go."""
        self.decoded, self.checked = value, None

    @property
    def has_update(self) -> bool:
        """Whether the verdict holds an update, decoded or not (asking decodes nothing)."""
        return self.decoded is not None or self.checked is not None

    @property
    def passed(self) -> bool:
        return all(v == PASS for v in self.verdicts.values())

    @property
    def reason(self) -> str | None:
        """The first failed check and why, or None."""
        for name, verdict in self.verdicts.items():
            if verdict != PASS:
                return f"{name}: {verdict}"
        return None

    def fail(self, check: Check, why: str, *, fraud: bool = True) -> MinerVerdict:
        """Record a failed check; `fraud=False` for absence (nothing published), which only scores zero."""
        self.verdicts[check] = why
        self.fraud = self.fraud or fraud
        return self

    def unreadable(self, check: Check, why: str) -> MinerVerdict:
        """Record a read the miner's store did not answer: nothing is decided until it is settled."""
        self.verdicts[check] = why
        self.unread = True
        return self


def inconsistencies(
    manifest: UpdateManifest,
    hotkey: str,
    announcement: Announcement,
    base_hash: str,
    start_hash: str | None,
    cfg: RunConfig,
) -> list[str]:
    """What in a committed manifest does not fit its miner, its anchor, the window's base (and
    starting state, when given) or the run's shape, codec and limits; empty when it all fits."""
    problems = []
    if manifest.hotkey != hotkey:
        problems.append("names another hotkey")
    if manifest.base_hash != base_hash:
        problems.append("trained from another base model")
    if manifest.n_segments != announcement.segments:
        # the challenge was drawn from the anchored claim: a manifest claiming more than its anchor
        # would be paid for segments the draw never weighed
        problems.append(
            f"claims {manifest.n_segments} segments where its anchor on chain claims {announcement.segments}"
        )
    if start_hash is not None and manifest.boundaries[0].state_hash != start_hash:
        problems.append("boundary 0 is not the window's starting state")
    if not manifest.shape_matches(cfg.train.inner_steps, cfg.train.segment_steps):
        problems.append(
            f"does not cover whole segments of {cfg.train.segment_steps} steps, at most {cfg.train.inner_steps}"
        )
    if cfg.train.batch_size % (manifest.ranks * manifest.micro_batches):
        problems.append(
            f"{manifest.ranks} rank(s) of {manifest.micro_batches} micro-batches do not divide the batch"
        )
    if manifest.micro_batches % cfg.train.micro_batches:
        # a miner may split its batch further to fit its memory, never less: a validator replays
        # the miner's split, and planned its memory for the run's (docs/gpu.md)
        problems.append(
            f"{manifest.micro_batches} micro-batches are not a multiple of the run's {cfg.train.micro_batches}"
        )
    if manifest.update.codec != cfg.codec.name:
        problems.append(f"codec {manifest.update.codec!r} is not the run's {cfg.codec.name!r}")
    if manifest.update.size > cfg.limits.max_update_bytes:
        problems.append(f"update of {manifest.update.size} bytes exceeds {cfg.limits.max_update_bytes}")
    return problems


def check_miner(
    basis: WindowBasis, hotkey: str, uid: int, store: Reader, challenged: bool = False
) -> MinerVerdict:
    """Fetch and check the miner's manifest, committed as `basis.announcements[hotkey]` says, and
    its update; stops at the first failed check.

    Boundary 0 must commit to `basis.start_hash` (the hash of G_w with no optimizer state at step
    0), when given. A committed manifest or update that is missing is absence for a miner nobody
    challenged, and fraud for a challenged one (it may be hiding its work); a read the store did
    not answer is marked `unread`, to be tried again."""
    runtime, model, window, start_hash = basis.runtime, basis.base, basis.number, basis.start_hash
    announcement = basis.announcements[hotkey]
    cfg, limits = runtime.config, runtime.config.limits
    verdict = MinerVerdict(hotkey=hotkey, uid=uid)
    try:
        data = store.get(manifest_key(runtime.run_id, window, hotkey), limits.max_manifest_bytes)
    except StoreError as exc:
        if not answered(exc):
            return verdict.unreadable(Check.MANIFEST, f"not fetched: {exc}")
        return verdict.fail(Check.MANIFEST, f"not fetched: {exc}", fraud=challenged)
    if hashlib.sha256(data).hexdigest() != announcement.manifest_sha256:
        return verdict.fail(Check.MANIFEST, "hash_mismatch: the manifest is not the one committed on chain")
    try:
        doc = open_document(
            data,
            max_bytes=limits.max_manifest_bytes,
            is_registered=basis.is_registered,
            run_id=runtime.run_id,
            window=window,
            signer=hotkey,
        )
        manifest = parse_body(UpdateManifest, doc.body)
    except WireError as exc:
        return verdict.fail(Check.MANIFEST, str(exc))
    verdict.verdicts[Check.MANIFEST] = PASS
    verdict.manifest = manifest
    verdict.manifest_bytes = data
    if basis.behind and manifest.base_hash != model.hash:
        verdict.unmeasured = True
        return verdict.fail(
            Check.CONSISTENCY,
            f"not judged: trained from model {manifest.base_hash[:10]}, which this validator does not have "
            "(it passed over an aggregate out of reach and may be behind the network)",
            fraud=False,
        )
    problems = inconsistencies(manifest, hotkey, announcement, model.hash, start_hash, cfg)
    if problems:
        return verdict.fail(Check.CONSISTENCY, "; ".join(problems))
    verdict.verdicts[Check.CONSISTENCY] = PASS
    try:
        blob = store.get_blob(manifest.update.sha256, limits.max_update_bytes)
    except StoreError as exc:  # hiding, when challenged; a store that does not answer is tried again
        if not answered(exc):
            return verdict.unreadable(Check.UPDATE, f"not fetched: {exc}")
        return verdict.fail(Check.UPDATE, f"not fetched: {exc}", fraud=challenged)
    try:
        if len(blob) != manifest.update.size:
            raise StoreError(f"update is {len(blob)} bytes, the manifest says {manifest.update.size}")
        shapes = {name: tuple(t.shape) for name, t in model.params.items()}
        verdict.checked = check_update(blob, runtime.codec, shapes, limits.max_update_bytes, hotkey, window)
        verdict.blob = blob
    except (StoreError, WireError, CodecError) as exc:
        return verdict.fail(Check.UPDATE, str(exc))
    verdict.verdicts[Check.UPDATE] = PASS
    verdict.numbers[Number.UPDATE_BYTES] = float(len(blob))
    return verdict


def flag_copies(verdicts: list[MinerVerdict], commit_blocks: dict[str, int]) -> None:
    """Identical updates from several hotkeys: all but the earliest committer fail as copies
    (when the earliest block is shared, all of them fail: nobody can be shown to be first)."""
    by_sha: dict[str, list[MinerVerdict]] = {}
    for v in verdicts:
        if v.manifest is not None and v.passed:
            by_sha.setdefault(v.manifest.update.sha256, []).append(v)
    for group in by_sha.values():
        if len(group) < 2:
            continue
        first = min(commit_blocks[v.hotkey] for v in group)
        firsts = [v for v in group if commit_blocks[v.hotkey] == first]
        for v in group:
            if v not in firsts or len(firsts) > 1:
                v.fail(Check.COPY, "identical to another hotkey's update committed no later")
