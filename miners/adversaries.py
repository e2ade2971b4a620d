"""The miner adversaries of DESIGN.md's threat model, which validators must reject (`python
neurons/miner.py --miner.adversary TYPE`, `distrai localnet --adversary TYPE[,TYPE…]`).

Each adversary is a `Behaviour` (`miners.miner`, the honest miner) that overrides the hooks it
cheats in. The validator's report names the check that catches each one (`EXPECTED_CHECK`); their
names alone, in this order, are `miners.adversary_names.ADVERSARY_NAMES`.
"""

from __future__ import annotations

import dataclasses
import hashlib
import io
import json
import logging
import secrets
import threading

import torch

from distrai.chain.signing import Keypair
from distrai.protocol.announce import committed_updates
from distrai.protocol.layout import manifest_key
from distrai.protocol.update import encode_update
from distrai.protocol.windows import commit_deadline, committed_in_time, read_patience, reveal_deadline
from distrai.store import Store, StoreError
from distrai.train.inner import pseudo_gradient, window_start_state
from distrai.train.sketch import sketch
from distrai.train.train_state import load_state, save_state, state_hash
from distrai.wire import sign_document
from distrai.wire.verdicts import Check
from distrai.wire.window_documents import UpdateBlob, UpdateManifest
from miners.adversary_names import ADVERSARY_NAMES
from miners.miner import Behaviour

log = logging.getLogger("distrai.miner")

SCALE = 10.0
"""How much the `scaled` adversary multiplies its update by."""
POISON_SCALE = 100.0
"""How much larger than its honest update, and turned against it, the `poison` adversary's update is."""


class Untrained(Behaviour):
    """Trains nothing: a zero update whose every boundary claims the starting state. The
    adversaries that the cheap checks refuse build on it, since their training would not matter."""

    def train(self, miner, w, miners, states_dir):
        return miner.idle_update(states_dir)


class Idle(Untrained):
    """Trains nothing and publishes the zero update."""

    name = "idle"


class Noise(Behaviour):
    """Trains honestly but publishes Gaussian noise of the same size as its update."""

    name = "noise"

    def update(self, miner, pseudo_gradient):
        generator = torch.Generator().manual_seed(secrets.randbits(63))
        return {
            name: torch.randn(t.shape, generator=generator) * (t.norm() / max(t.numel(), 1) ** 0.5)
            for name, t in pseudo_gradient.items()
        }


class Scaled(Behaviour):
    """Trains honestly and multiplies its update, to weigh more in the aggregate."""

    name = "scaled"

    def update(self, miner, pseudo_gradient):
        return {name: SCALE * t for name, t in pseudo_gradient.items()}


def poisoned(pseudo_gradient: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """An honest pseudo-gradient turned into one that undoes the training it measured, `POISON_SCALE`
    times over: applied, it drives the model up its loss."""
    return {name: -POISON_SCALE * t for name, t in pseudo_gradient.items()}


class Poison(Behaviour):
    """Trains honestly but publishes a poisoned update (`poisoned`), which it encodes, commits and
    anchors like an honest one: nothing but its effect gives it away. On its own it is caught as
    `scaled` is; beside a colluding leader (`validators.leader_adversaries.Collude`), only the followers'
    report quorum and held-out re-measurement stop it (docs/protocol.md, "Following an aggregate")."""

    name = "poison"

    def update(self, miner, pseudo_gradient):
        return poisoned(pseudo_gradient)


class Lazy(Behaviour):
    """Trains the first half of its segments and fakes the rest of its trajectory: the later
    boundaries repeat its last trained state under later step numbers."""

    name = "lazy"

    def train(self, miner, w, miners, states_dir):
        k, h = miner.rt.inner.segment_steps, miner.rt.inner.inner_steps
        trained = miner.train(w, miners, states_dir, steps=max(k, (h // k // 2) * k))
        done = trained.boundaries[-1][0]  # fewer steps when the window's pace cut its training short
        last = load_state(states_dir / f"{done:06d}.safetensors")
        boundaries = list(trained.boundaries)
        for step in range(done + k, h + 1, k):
            faked = dataclasses.replace(last, step=step)
            save_state(faked, states_dir / f"{step:06d}.safetensors")
            boundaries.append((step, state_hash(faked), boundaries[-1][2]))
        losses = trained.losses + [trained.losses[-1]] * (h - done)
        return dataclasses.replace(trained, losses=losses, boundaries=boundaries)


class Withhold(Lazy):
    """Trains half its segments like `lazy` and, when challenged, keeps the validators from reading
    its reveal: once uploaded, its own store stops answering (a store in a folder of its own, moved
    away, so that listing it fails; an S3 endpoint under a miner's control would answer 503) until the
    validators' read patience for the window has run out (`windows.read_patience`), then answers
    again, hoping they have given up. It commits nothing while its store is away."""

    name = "withhold"

    def __init__(self) -> None:
        self.away = threading.Event()

    def commits(self, miner):
        return not self.away.is_set()

    def revealed(self, miner, w, challenged, chain):
        root = getattr(miner.store, "root", None)
        if not challenged or root is None or self.away.is_set():
            return
        hidden = root.with_name(root.name + ".withheld")
        root.rename(hidden)
        self.away.set()
        log.info("withhold: window %d's reveal is uploaded; the store stops answering", w)

        def answer_again() -> None:
            chain.connect_again().wait_for_block(read_patience(miner.windows, w) + 1)
            hidden.rename(root)
            self.away.clear()
            log.info("withhold: the store answers again after window %d's read patience", w)

        threading.Thread(target=answer_again, name="withhold", daemon=True).start()


class OldBase(Behaviour):
    """Trains the window from an older global model than its base (the base of its previous window;
    when that is no different, the base shifted by a little noise, as an older model would be) while
    claiming the base: the manifest names it, boundary 0 is its start state, and the update is
    encoded from it, so the cheap checks and the trajectory check hold. Every step was anchored to
    the older model, so the replay of any segment against the true base differs."""

    name = "oldbase"

    def __init__(self) -> None:
        self.previous: dict[str, torch.Tensor] | None = None

    def train(self, miner, w, miners, states_dir):
        base = miner.model.params
        differs = self.previous is not None and any(
            not torch.equal(self.previous[name], p) for name, p in base.items()
        )
        older = self.previous if differs else _shifted(base)
        self.previous = base
        miner.rt.load_params(older)
        trained = miner.train(w, miners, states_dir)
        miner.rt.load_params(base)
        start = window_start_state(miner.rt.model)
        save_state(start, states_dir / f"{0:06d}.safetensors")
        numbers = sketch(start.params, miner.rt.inner.sketch_seed, miner.rt.inner.sketch_size).tolist()
        end = load_state(states_dir / f"{trained.boundaries[-1][0]:06d}.safetensors")
        return dataclasses.replace(
            trained,
            pseudo_gradient=pseudo_gradient(base, end.params),
            boundaries=[(0, state_hash(start), numbers), *trained.boundaries[1:]],
        )


def _shifted(params: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    generator = torch.Generator().manual_seed(0)
    return {
        name: p + 1e-3 * float(p.std() if p.numel() > 1 else 1.0) * torch.randn(p.shape, generator=generator)
        for name, p in sorted(params.items())
    }


class WrongData(Behaviour):
    """Trains on another miner's assignment instead of its own."""

    name = "wrongdata"

    def train(self, miner, w, miners, states_dir):
        others = [hk for hk in miners if hk != miner.hotkey] or [miner.hotkey[::-1]]
        return miner.train(w, miners, states_dir, data_of=others[w % len(others)])


class Forged(Behaviour):
    """Trains honestly but commits state hashes it never computed (the reveal cannot match them)."""

    name = "forged"

    def manifest(self, miner, w, body):
        forged = [b.model_copy(update={"state_hash": secrets.token_hex(32)}) for b in body.boundaries[1:]]
        return body.model_copy(update={"boundaries": [body.boundaries[0], *forged]})


class Nan(Untrained):
    """Publishes an update whose floating-point payload is NaN."""

    name = "nan"

    def blob(self, miner, w, encoded):
        payload = {
            name: torch.full_like(t, float("nan")) if t.is_floating_point() else t
            for name, t in encoded.payload.items()
        }
        return encode_update(payload, encoded.metadata, miner.hotkey, w)


class Oversize(Untrained):
    """Publishes an update padded past the run's size limit."""

    name = "oversize"

    def blob(self, miner, w, encoded):
        padding = torch.zeros(miner.rt.config.limits.max_update_bytes // 4 + 1, dtype=torch.float32)
        return encode_update({**encoded.payload, "padding": padding}, encoded.metadata, miner.hotkey, w)


class Pickle(Untrained):
    """Publishes its update as a torch.save pickle instead of safetensors."""

    name = "pickle"

    def blob(self, miner, w, encoded):
        buffer = io.BytesIO()
        torch.save(dict(encoded.payload), buffer)
        return buffer.getvalue()


class BadSig(Untrained):
    """Signs its manifest with a signature that does not verify."""

    name = "badsig"

    def sign(self, miner, w, body):
        envelope = sign_document(miner.wallet.hotkey, body.body())
        marker = b'"signature":"'
        at = envelope.index(marker) + len(marker)
        flipped = b"0" if envelope[at : at + 1] != b"0" else b"1"
        return envelope[:at] + flipped + envelope[at + 1 :]


class Unregistered(Untrained):
    """Publishes its manifest under a hotkey that is not registered on the subnet."""

    name = "unregistered"

    def __init__(self) -> None:
        self.key = Keypair.create_from_mnemonic(Keypair.generate_mnemonic())

    def sign(self, miner, w, body):
        return sign_document(self.key, body.model_copy(update={"hotkey": self.key.ss58_address}).body())


class Stale(Untrained):
    """Publishes the update of an earlier window again (its first: the update bound to the window before)."""

    name = "stale"

    def __init__(self) -> None:
        self.old: tuple[int, bytes] | None = None

    def blob(self, miner, w, encoded):
        if self.old is None:
            self.old = (w - 1, encode_update(encoded.payload, encoded.metadata, miner.hotkey, max(w - 1, 0)))
        return self.old[1]


class Replay(Untrained):
    """Resends an old signed manifest (its first: a manifest signed for the window before)."""

    name = "replay"

    def __init__(self) -> None:
        self.old: bytes | None = None

    def sign(self, miner, w, body):
        if self.old is None:
            self.old = sign_document(
                miner.wallet.hotkey, body.model_copy(update={"window": max(w - 1, 0)}).body()
            )
        return self.old


class Copycat(Untrained):
    """Trains nothing; reads another miner's committed manifest before the commit deadline,
    commits the same update hash under its own hotkey, and republishes that miner's blob as soon
    as it can read it (a window with nobody to copy, it commits nothing)."""

    name = "copycat"

    def __init__(self) -> None:
        self.copied: UpdateBlob | None = None
        self.victim_store: Store | None = None

    def train(self, miner, w, miners, states_dir):
        trained = super().train(miner, w, miners, states_dir)
        self.copied = None
        deadline = commit_deadline(miner.windows, w) - 2
        while self.copied is None and miner.chain.block() < deadline:
            self.copied = self.find_victim(miner, w)
            if self.copied is None:
                miner.chain.wait_for_block(miner.chain.block() + 1)
        return trained

    def find_victim(self, miner, w) -> UpdateBlob | None:
        """The first update, by hotkey, that the run's size and codec rules let through: copying one
        that is refused before it is read (an oversized one, say) would earn nothing."""
        mg = miner.chain.metagraph()
        in_time = committed_updates(mg.commitments, w, lambda b: committed_in_time(miner.windows, w, b))
        config = miner.rt.config
        for hotkey, announcement in sorted(in_time.items()):
            if hotkey == miner.hotkey:
                continue
            try:
                store = miner.stores.get(announcement.store_url)
                data = store.get(manifest_key(miner.rt.run_id, w, hotkey), 1 << 20)
                body = UpdateManifest.model_validate(json.loads(data)["body"])
            except (StoreError, ValueError, KeyError, TypeError):
                continue
            if body.update.size > config.limits.max_update_bytes or body.update.codec != config.codec.name:
                continue
            if hashlib.sha256(data).hexdigest() == announcement.manifest_sha256:
                self.victim_store = store
                log.info("copycat: copying the update %s… of %s", body.update.sha256[:12], hotkey[:10])
                return body.update
        return None

    def commits(self, miner):
        return self.copied is not None

    def manifest(self, miner, w, body):
        return body if self.copied is None else body.model_copy(update={"update": self.copied})

    def reveal_blob(self, miner, w, blob, chain):
        if self.copied is None or self.victim_store is None:  # set together when a copy is found
            return blob
        deadline = reveal_deadline(miner.windows, w) - 1
        while chain.block() < deadline:
            try:
                return self.victim_store.get_blob(self.copied.sha256, miner.rt.config.limits.max_update_bytes)
            except StoreError:
                chain.wait_for_block(chain.block() + 1)
        return None


ADVERSARIES: dict[str, type[Behaviour]] = {
    cls.name: cls
    for cls in (
        Idle,
        Noise,
        Copycat,
        Stale,
        Lazy,
        Withhold,
        OldBase,
        WrongData,
        Forged,
        Scaled,
        Poison,
        Nan,
        Oversize,
        Pickle,
        BadSig,
        Unregistered,
        Replay,
    )
}
if tuple(ADVERSARIES) != ADVERSARY_NAMES:  # the names the miner's flag offers before this module loads
    raise ImportError(f"miners.adversary_names.ADVERSARY_NAMES must list {tuple(ADVERSARIES)}, in this order")

EXPECTED_CHECK: dict[str, Check] = {
    "idle": Check.STATES,
    "noise": Check.TRAJECTORY,
    "copycat": Check.UPDATE,
    "stale": Check.UPDATE,
    "lazy": Check.REPLAY,
    "withhold": Check.STORE,
    "oldbase": Check.REPLAY,
    "wrongdata": Check.REPLAY,
    "forged": Check.STATES,
    "scaled": Check.TRAJECTORY,
    "poison": Check.TRAJECTORY,
    "nan": Check.UPDATE,
    "oversize": Check.CONSISTENCY,
    "pickle": Check.UPDATE,
    "badsig": Check.MANIFEST,
    "unregistered": Check.MANIFEST,
    "replay": Check.MANIFEST,
}
"""The check of the validator's report that rejects each adversary when it is challenged."""


def behaviour(name: str) -> Behaviour:
    """The honest behaviour, or the adversary called `name`; ValueError lists the known ones."""
    if name == "honest":
        return Behaviour()
    if name not in ADVERSARIES:
        raise ValueError(f"unknown adversary {name!r}; known: {', '.join(ADVERSARIES)}")
    return ADVERSARIES[name]()
