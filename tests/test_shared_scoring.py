"""Shared scoring (validators/shared_scoring.py): validators split the measuring of a window's
updates, publish their measurements signed, take the others', re-check a drawn few, and pay the
validators that did their share.

- measurements travel signed through real file stores; a forged or mislabelled one is not taken;
- a validator that publishes a false measurement is refuted by the re-check and named, and none of
  its measurements of the window are taken;
- a validator that skips its share is not a worker; on the embedded chain (Yuma Consensus) it
  earns measurably less than a validator that does its share, although it sets the same weights on
  the miners as the honest ones, so it earns the same dividends."""

from __future__ import annotations

from dataclasses import replace

import pytest
from bittensor.keyfiles import Keypair
from support.local_harness import TEST_HYPERPARAMETERS, make_local_harness

from distrai.protocol.layout import measurements_key
from distrai.protocol.sync import StoreCache
from distrai.protocol.windows import ChallengeInputs, score_shares
from distrai.store import FileStore
from distrai.wire.window_documents import Measurement, Measurements
from validators.published import OthersWindow
from validators.scoring import weights_from_averages
from validators.shared_scoring import (
    REFUTED,
    pool,
    read_measurements,
    recheck_draw,
    recheck_measurement,
    signed_measurements,
)

RUN = "ab" * 32
WINDOW = 4
VALIDATORS = {name: Keypair.create_from_uri(f"//{name}") for name in ("Honest0", "Honest1", "Lazy")}
MINERS = sorted(Keypair.create_from_uri(f"//Miner{i}").ss58_address for i in range(9))


def measured(mark: float) -> Measurement:
    return Measurement(drop_trained=0.1 + mark, drop_unseen=0.1, mark=mark, mark_z=5.0)


def truth(miner: str) -> Measurement:
    return measured(0.01 * (1 + MINERS.index(miner)))


def shares() -> dict[str, list[str]]:
    inputs = ChallengeInputs("0x" + "11" * 32, RUN, WINDOW, tuple(MINERS), 1, 1)
    return score_shares(inputs, [k.ss58_address for k in VALIDATORS.values()], 1)


def publish(tmp_path, name: str, entries: dict[str, Measurement]) -> str:
    store = FileStore(tmp_path / name)
    store.put(
        measurements_key(RUN, WINDOW, VALIDATORS[name].ss58_address),
        signed_measurements(VALIDATORS[name], RUN, WINDOW, entries),
    )
    return store.url


def test_measurements_are_signed_published_and_read_back(tmp_path):
    honest1 = VALIDATORS["Honest1"].ss58_address
    share = shares()[honest1]
    url = publish(tmp_path, "Honest1", {m: truth(m) for m in share})
    forged = FileStore(tmp_path / "forged")
    lazy = VALIDATORS["Lazy"].ss58_address
    forged.put(
        measurements_key(RUN, WINDOW, lazy), signed_measurements(VALIDATORS["Honest0"], RUN, WINDOW, {})
    )
    found = read_measurements(
        OthersWindow(StoreCache(), {honest1: url, lazy: forged.url}, RUN, WINDOW, 1 << 20, lambda hk: True)
    )
    assert set(found) == {honest1}  # the one signed by another key than its validator's is not taken
    assert found[honest1].miners == {m: truth(m) for m in share}
    assert (
        read_measurements(
            OthersWindow(StoreCache(), {honest1: url}, RUN, WINDOW + 1, 1 << 20, lambda hk: True)
        )
        == {}
    )


def test_a_false_measurement_is_refuted_and_none_of_its_authors_are_taken():
    me, other = VALIDATORS["Honest0"].ss58_address, VALIDATORS["Honest1"].ss58_address
    split = shares()
    theirs = {m: truth(m) for m in split[other]}
    victim = split[other][0]
    theirs[victim] = measured(0.9)  # inflates one miner's mark
    refuted = recheck_measurement(other, victim, WINDOW, truth(victim), theirs[victim], 1e-4)
    assert refuted.outcome == REFUTED and "published" in refuted.reason
    assert (
        recheck_measurement(other, victim, WINDOW, truth(victim), truth(victim), 0.0).outcome == "confirmed"
    )
    published = {other: _doc(other, theirs)}
    pooled = pool(me, split, {m: truth(m) for m in split[me]}, published, [refuted], set(MINERS))
    assert not set(split[other]) & set(pooled.measured_by)  # its whole share is left unmeasured
    assert other not in pooled.workers and me in pooled.workers
    confirmed = pool(me, split, {m: truth(m) for m in split[me]}, published, [], set(MINERS))
    assert confirmed.measured_by[victim] == other and other in confirmed.workers


def test_the_recheck_draw_takes_only_others_measurements_of_miners_that_passed_here():
    me, other = VALIDATORS["Honest0"].ss58_address, VALIDATORS["Honest1"].ss58_address
    split = shares()
    published = {v: _doc(v, {m: truth(m) for m in split[v]}) for v in (me, other)}
    eligible = set(split[other][1:])
    draw = recheck_draw(b"s" * 32, me, published, eligible, 2)
    assert len(draw) == 2 and all(v == other and m in eligible for v, m in draw)
    assert draw == recheck_draw(b"s" * 32, me, published, eligible, 2)
    assert recheck_draw(b"s" * 32, me, published, eligible, 0) == []


def test_the_recheck_draw_takes_from_every_other_validators_share():
    me = VALIDATORS["Honest0"].ss58_address
    split = shares()
    published = {v: _doc(v, {m: truth(m) for m in split[v]}) for v in split}
    draw = recheck_draw(b"s" * 32, me, published, set(MINERS), 1)
    assert sorted(v for v, _ in draw) == sorted(v for v in split if v != me)
    assert all(m in split[v] for v, m in draw)


def test_an_inventing_validator_is_caught_at_the_rate_the_arithmetic_gives():
    """The GPU config's shape: 16 validators share 256 miners (16 each), every validator re-checks one
    of each other's measurements a window. One validator makes up one measurement of its share. Over
    400 windows of the project's dealing (`windows.score_shares`) and draw (`recheck_draw`), each
    re-checker catches it with probability 1/16 a window, and nobody does with (15/16)^15 = 0.379
    (`validators/shared_scoring.py`, "What an invented measurement costs")."""
    validators = [Keypair.create_from_uri(f"//V{i}").ss58_address for i in range(16)]
    miners = tuple(Keypair.create_from_uri(f"//M{i}").ss58_address for i in range(256))
    liar = validators[0]
    windows, caught_by, nobody = 400, 0, 0
    for w in range(windows):
        inputs = ChallengeInputs("0x" + f"{w:064x}", RUN, w, miners, 1, 1)
        split = score_shares(inputs, validators, 1)
        invented = split[liar][0]
        published = {v: _doc(v, dict.fromkeys(split[v], measured(0.01))) for v in validators}
        seed = w.to_bytes(32, "big")
        catchers = sum(
            (liar, invented) in recheck_draw(seed, me, published, set(miners), 1) for me in validators[1:]
        )
        caught_by += catchers
        nobody += catchers == 0
    per_recheck = caught_by / (windows * 15)
    assert abs(per_recheck - 1 / 16) < 3 * (1 / 16 * 15 / 16 / (windows * 15)) ** 0.5, per_recheck
    escape = (15 / 16) ** 15
    assert abs(nobody / windows - escape) < 3 * (escape * (1 - escape) / windows) ** 0.5, nobody / windows


def test_a_validator_refuted_before_is_not_taken_nor_paid():
    me, other = VALIDATORS["Honest0"].ss58_address, VALIDATORS["Honest1"].ss58_address
    split = shares()
    published = {other: _doc(other, {m: truth(m) for m in split[other]})}
    trusted = pool(me, split, {m: truth(m) for m in split[me]}, published, [], set(MINERS))
    assert other in trusted.workers and set(split[other]) <= set(trusted.measured_by)
    distrusted = pool(me, split, {m: truth(m) for m in split[me]}, published, [], set(MINERS), {other})
    assert other not in distrusted.workers and not set(split[other]) & set(distrusted.measured_by)


def _doc(validator: str, entries: dict[str, Measurement]) -> Measurements:
    return Measurements(run_id=RUN, window=WINDOW, validator=validator, miners=entries)


TEMPOS = 20
SHARE = 0.1


def earnings(tmp_path) -> dict[str, float]:
    """Two validators do their share of the measurements and pay each other as workers; a third
    publishes none and sets exactly the miners' weights the honest ones set (it can read their
    reports). Each validator's emission over `TEMPOS` tempos of the chain's Yuma Consensus."""
    hp = replace(TEST_HYPERPARAMETERS, max_validators=3)
    h = make_local_harness(tmp_path, hp)
    chain = h.local
    wallets = {name: h.new_wallet(name) for name in ("honest0", "honest1", "lazy")}
    miners = [h.new_wallet(f"miner{i}") for i in range(4)]
    for wallet in (*wallets.values(), *miners):
        chain.register(wallet)
    for wallet in wallets.values():
        chain.add_stake(wallet, 100.0)
    h.advance(hp.tempo + 2)
    mg = chain.metagraph()
    uid = {name: mg.uid_of(w.hotkey.ss58_address) for name, w in wallets.items()}
    averages = [0.0] * mg.n
    for i, miner in enumerate(miners):
        averages[mg.uid_of(miner.hotkey.ss58_address)] = 1.0 + i
    workers = {"honest0": [uid["honest1"]], "honest1": [uid["honest0"]]}
    for _ in range(TEMPOS):
        for name, wallet in wallets.items():
            paid = workers.get(name, [uid["honest0"], uid["honest1"]])  # the copier copies the honest weights
            weights = weights_from_averages(
                averages, burn_share=0.0, owner_uid=None, workers=paid, worker_share=SHARE
            )
            chain.set_weights(wallet, list(range(mg.n)), weights)
        h.advance(hp.tempo + 1)
    return {
        name: chain.metagraph().neuron(w.hotkey.ss58_address).total_emission for name, w in wallets.items()
    }


def test_a_validator_that_skips_its_share_earns_less_than_one_that_does_it(tmp_path):
    earned = earnings(tmp_path)
    assert earned["honest0"] > 0 and earned["honest1"] > 0
    # the copier's dividends match the honest ones (its weights agree with the consensus); what it
    # loses is the workers' pay: 33.56 against 35.12 each, a ratio of 0.956, at a share of 0.1
    assert earned["lazy"] < 0.97 * min(earned["honest0"], earned["honest1"]), earned
    assert earned["honest0"] == pytest.approx(earned["honest1"], rel=0.05)
