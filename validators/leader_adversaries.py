"""The aggregating leader's adversaries: validators that try to steer the global model, which every
follower must refuse (`python neurons/validator.py --validator.adversary TYPE`).

Each is a `LeaderBehaviour` (`validators.leader_behaviour`, the honest one) that sees the window's verdicts
before its report is signed (`judge`) and the aggregate the run's rule gives before the result hash
is computed and the aggregate signed (`tamper`), so the report and the aggregate are internally
consistent and apply cleanly; only the follower's checks of `distrai.protocol.follow` can tell. The
follower's refusal names:
- `poison`: an accepted update swapped for a blob no miner committed, labelled with that miner's
  hotkey ("not one that miner's signed manifest names");
- `reweight`: the rule's updates with weights of the leader's choosing ("its signed report's
  scores give" other weights);
- `collude`: a report that passes its colluding miner's poisoned update (`miners.adversaries.Poison`,
  committed and anchored like honest work) and fails every honest one, and the aggregate that this
  report implies. Every check of the aggregator's own word passes; the report quorum ("which the
  signed reports of validators holding … stake failed") or, when the leader holds most of the
  stake, the held-out re-measurement ("raises the loss on the window's held-out sample") refuses it;
- `censor`: a report that fails every miner's usefulness check, and the aggregate it implies: nothing,
  so the model would stay where it is. No check of its own word fails and its result is its base;
  the report quorum's "No censoring" rule refuses it ("it leaves out the update of …") unless it
  holds more of the judging stake than the reports that pass the miners;
- `invent`: measurements of its share made up (every drop 0), published for the others to take; each
  other validator's re-check refutes it ("it published 0 and 0"), and it is distrusted and paid no
  worker share for `ban_windows` windows (`validators/shared_scoring.py`);
- `skipper`: receipts for its replays that no replay backs (the miners' own committed sketches); a
  validator that draws one replays the segment again and refutes it ("no replay of the segment
  reached it"), and it is distrusted and paid no worker share for `ban_windows` windows
  (`validators/receipts.py`).

Their names alone, in this order, are `validators.leader_adversary_names.LEADER_ADVERSARY_NAMES`.
"""

from __future__ import annotations

import hashlib
from dataclasses import replace

import torch

from distrai.protocol.update import encode_update
from distrai.wire.verdicts import PASS, Check, Number
from validators.leader_adversary_names import COLLUDE, LEADER_ADVERSARY_NAMES, check_leader_adversary
from validators.leader_behaviour import LeaderBehaviour

POISON_SCALE = 50.0
"""How much larger than the victim's update the poisoned one is."""


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
        first = accepted[0].model_copy(update={"update_sha256": hashlib.sha256(blob).hexdigest()})
        return [first, *accepted[1:]], [replace(victim, pseudo_gradient=decoded), *contributions[1:]]


class Reweight(LeaderBehaviour):
    """Keeps the rule's updates but puts nine tenths of the weight on the first; a lone update gets
    half the weight the rule gives it (the model is the same, the aggregate is still a lie)."""

    name = "reweight"

    def tamper(self, validator, w, accepted, contributions):
        if not contributions:
            return accepted, contributions
        rest = 0.1 / max(1, len(contributions) - 1)
        weights = [0.9 if len(contributions) > 1 else 0.5] + [rest] * (len(contributions) - 1)
        return (
            [a.model_copy(update={"weight": x}) for a, x in zip(accepted, weights, strict=True)],
            [replace(c, weight=x) for c, x in zip(contributions, weights, strict=True)],
        )


COLLUDING_SCORE = 1.0
"""The score the colluding leader's report gives its miner."""
COLLUDING_GAIN = 1.0
"""The gain on the window's reserve the colluding leader's report claims its miner's update measured:
the aggregate weighs updates by it (`distrai.protocol.aggregation`), and the poisoned update's own is
below zero."""


class Collude(LeaderBehaviour):
    """Reports its colluding miner's update as passing every check with the best score and a gain it
    did not measure, and every other miner as failing the usefulness check; the aggregate is then what
    the rule gives from that report: the colluder's update alone. It knows its miner by hotkey (`--validator.colluder`;
    `distrai localnet` pairs it with the `poison` adversary's). A window whose colluder published no
    readable update is judged honestly."""

    name = COLLUDE

    def __init__(self, colluder: str):
        self.colluder = colluder

    def judge(self, validator, w, verdicts):
        partner = next((v for v in verdicts if v.hotkey == self.colluder), None)
        if (
            partner is None
            or partner.update is None
            or partner.blob is None
            or partner.manifest_bytes is None
        ):
            return
        for v in verdicts:
            if v is partner:
                v.verdicts = {check: PASS for check in v.verdicts} | {Check.USEFUL: PASS}
                v.score, v.fraud = COLLUDING_SCORE, False
                v.numbers[Number.DROP_UNSEEN] = COLLUDING_GAIN
            else:
                v.verdicts[Check.USEFUL] = (
                    "the update does not lower the loss of the sequences it was trained on"
                )
                v.score = 0.0


class Invent(LeaderBehaviour):
    """Publishes made-up measurements of its share, as a validator that skips the work and fills in
    numbers would: every update of its share lowered no loss (both drops 0), so those miners score
    nothing here. The other validators re-check one measurement of its share each and refute it
    ("measured here: drops …; it published 0 and 0"), measure its share themselves, and distrust it
    and pay it no worker share for `ban_windows` windows (`validators/shared_scoring.py`)."""

    name = "invent"

    def measured(self, validator, w, own):
        return {hk: m.model_copy(update={"drop_trained": 0.0, "drop_unseen": 0.0}) for hk, m in own.items()}


class Skipper(LeaderBehaviour):
    """Publishes receipts for the replays of its share that it could write without replaying: the
    miner's own committed sketch of each segment's end, which every validator can read in the
    manifest. (It replays all the same here, so its verdicts stay honest; what the others see is a
    skipper's receipts.) The receipt's key is drawn from the window's seed and the replaying
    validator's hotkey, so the committed sketch lies about the segment's whole movement away from it;
    a validator that draws the receipt replays the segment again and refutes it ("no replay of the
    segment reached it"), and it is distrusted and paid no worker share for `ban_windows` windows
    (`validators/receipts.py`)."""

    name = "skipper"

    def receipted(self, validator, w, receipts):
        held = validator.held
        faked = []
        for receipt in receipts:
            manifest = held.verdicts[receipt.miner].manifest
            faked.append(
                receipt.model_copy(update={"sketch": list(manifest.boundaries[receipt.segment + 1].sketch)})
            )
        return faked


class Censor(LeaderBehaviour):
    """Reports every miner as failing the usefulness check, so the aggregate its report implies takes
    nothing and the global model stays where it is."""

    name = "censor"

    def judge(self, validator, w, verdicts):
        for v in verdicts:
            v.verdicts[Check.USEFUL] = "the update does not lower the loss of the sequences it was trained on"
            v.score = 0.0


LEADER_ADVERSARIES: dict[str, type[LeaderBehaviour]] = {
    cls.name: cls for cls in (Poison, Reweight, Collude, Censor, Invent, Skipper)
}
if tuple(LEADER_ADVERSARIES) != LEADER_ADVERSARY_NAMES:  # what the validator's flag offers before this loads
    raise ImportError(
        f"validators.leader_adversary_names.LEADER_ADVERSARY_NAMES must list {tuple(LEADER_ADVERSARIES)}, in this order"
    )


def leader_behaviour(name: str, colluder: str | None = None) -> LeaderBehaviour:
    """The honest aggregator, or the adversary called `name` (`collude` needs the hotkey of its
    colluding miner); ValueError lists the known ones."""
    check_leader_adversary(name, colluder)
    if name == "honest":
        return LeaderBehaviour()
    if name == Collude.name:
        assert colluder is not None, "check_leader_adversary refuses collude without a colluder"
        return Collude(colluder)
    return LEADER_ADVERSARIES[name]()
