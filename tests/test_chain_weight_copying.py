"""Weight copying does not pay under commit-reveal, and does without it, on the embedded chain.

Two honest validators and a copier with equal stake score four miners whose true quality changes
every few tempos. Each tempo the honest validators set weights from their own noisy measurement
of the current quality; the copier reads the weights visible on chain (`LocalChain.weights()`)
and sets their stake-weighted mean. The chain's own epochs run Yuma3 over a frozen clock.

Measured with these settings (seed 0, 30 tempos, quality redrawn every 3 tempos, measurement
noise 0.03): with commit-reveal (reveal period 1) the honest validators earned 51.67 and 51.51
and the copier 39.51, a ratio of 0.767 to the lower honest one (0.73 to 0.79 over seeds 0-5);
without it the copier earned 48.42 against 47.05 and 47.21, a ratio of 1.029 (1.025 to 1.037
over the same seeds): copying then pays, since the mean of the honest weights is nearer
consensus than either of them.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest
from support.local_harness import TEST_HYPERPARAMETERS, make_local_harness

TEMPOS = 30
CHANGE_EVERY = 3
MINERS = 4
NOISE = 0.03
HONEST = ("honest0", "honest1")


def copier_scenario(tmp_path, commit_reveal: bool) -> tuple[float, float, float]:
    """Each validator's accumulated emission: (honest0, honest1, copier)."""
    hp = replace(
        TEST_HYPERPARAMETERS, commit_reveal_weights=commit_reveal, commit_reveal_period=1, max_validators=3
    )
    h = make_local_harness(tmp_path, hp)
    chain = h.local
    validators = [h.new_wallet(name) for name in (*HONEST, "copier")]
    miners = [h.new_wallet(f"miner{i}") for i in range(MINERS)]
    for wallet in (*validators, *miners):
        chain.register(wallet)
    for wallet in validators:
        chain.add_stake(wallet, 100.0)
    h.advance(hp.tempo + 2)
    honest_uids = [0, 1]
    miner_uids = list(range(len(validators), len(validators) + MINERS))
    rng = np.random.default_rng(0)
    for tempo in range(TEMPOS):
        if tempo % CHANGE_EVERY == 0:
            quality = rng.dirichlet(np.full(MINERS, 0.5))
        for wallet in validators[:2]:
            measured = np.clip(quality + rng.normal(0.0, NOISE, MINERS), 0.0, None)
            chain.set_weights(wallet, miner_uids, measured.tolist())
        stake = chain.metagraph().stake
        visible = chain.weights()
        rows = [(stake[uid], visible[uid]) for uid in honest_uids if uid in visible]
        if rows:
            total = sum(s for s, _ in rows)
            mean = [sum(s * row.get(m, 0.0) for s, row in rows) / total for m in miner_uids]
            chain.set_weights(validators[2], miner_uids, mean)
        h.advance(hp.tempo + 1)
    earned = [n.total_emission for n in chain.metagraph().neurons[: len(validators)]]
    return earned[0], earned[1], earned[2]


def test_copying_weights_does_not_pay_under_commit_reveal(tmp_path):
    honest0, honest1, copier = copier_scenario(tmp_path, commit_reveal=True)
    assert honest0 > 0 and honest1 > 0
    assert copier / min(honest0, honest1) < 0.85


def test_copying_weights_pays_as_well_as_honesty_without_commit_reveal(tmp_path):
    honest0, honest1, copier = copier_scenario(tmp_path, commit_reveal=False)
    assert honest0 > 0 and honest1 > 0
    assert copier / min(honest0, honest1) == pytest.approx(1.0, abs=0.05)
    assert copier / max(honest0, honest1) > 0.97
