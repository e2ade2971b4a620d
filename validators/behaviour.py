"""How a validator builds its aggregate: honestly, or as a leader that tries to steer the global
model, which every follower must refuse (`python neurons/validator.py --validator.adversary TYPE`).

A `LeaderBehaviour` sees the aggregate the run's rule gives and may change it before the result
hash is computed and the aggregate signed, so the aggregate is internally consistent and applies
cleanly; only the follower's checks of `distrai.follow` can tell. The follower's refusal names:
- `poison`: an accepted update swapped for a blob no miner committed, labelled with that miner's
  hotkey ("not one that miner's signed manifest names");
- `reweight`: the rule's updates with weights of the leader's choosing ("its signed report's
  scores give" other weights).
"""

from __future__ import annotations

import hashlib
from dataclasses import replace
from typing import TYPE_CHECKING

import torch

from distrai.train.outer import Contribution
from distrai.update import encode_update

if TYPE_CHECKING:
    from validators.validator import Validator

POISON_SCALE = 50.0
"""How much larger than the victim's update the poisoned one is."""


class LeaderBehaviour:
    """An honest aggregator: the aggregate is what the rule gives."""

    name = "honest"

    def tamper(
        self, validator: Validator, w: int, accepted: list[dict], contributions: list[Contribution]
    ) -> tuple[list[dict], list[Contribution]]:
        return accepted, contributions


class Poison(LeaderBehaviour):
    """Swaps the first accepted update for its own blob, labelled with that miner's hotkey."""

    name = "poison"

    def tamper(self, validator, w, accepted, contributions):
        if not contributions:
            return accepted, contributions
        victim = contributions[0]
        generator = torch.Generator().manual_seed(w)
        poisoned = {
            name: POISON_SCALE * float(t.abs().mean()) * torch.randn(t.shape, generator=generator)
            for name, t in victim.pseudo_gradient.items()
        }
        encoded = validator.rt.codec.encode(poisoned, None)
        blob = encode_update(encoded.payload, encoded.metadata, victim.key, w)
        validator.store.put_blob(blob)
        decoded = validator.rt.codec.decode(
            encoded.payload, encoded.metadata, {k: tuple(v.shape) for k, v in poisoned.items()}
        )
        first = {**accepted[0], "update_sha256": hashlib.sha256(blob).hexdigest()}
        return [first, *accepted[1:]], [replace(victim, pseudo_gradient=decoded), *contributions[1:]]


class Reweight(LeaderBehaviour):
    """Keeps the rule's updates but puts nine tenths of the weight on the first."""

    name = "reweight"

    def tamper(self, validator, w, accepted, contributions):
        if len(contributions) < 2:
            return accepted, contributions
        rest = 0.1 / (len(contributions) - 1)
        weights = [0.9] + [rest] * (len(contributions) - 1)
        return (
            [{**a, "weight": x} for a, x in zip(accepted, weights, strict=True)],
            [replace(c, weight=x) for c, x in zip(contributions, weights, strict=True)],
        )


LEADER_ADVERSARIES: dict[str, type[LeaderBehaviour]] = {cls.name: cls for cls in (Poison, Reweight)}


def leader_behaviour(name: str) -> LeaderBehaviour:
    """The honest aggregator, or the adversary called `name`; ValueError lists the known ones."""
    if name == "honest":
        return LeaderBehaviour()
    if name not in LEADER_ADVERSARIES:
        raise ValueError(f"unknown validator adversary {name!r}; known: {', '.join(LEADER_ADVERSARIES)}")
    return LEADER_ADVERSARIES[name]()
