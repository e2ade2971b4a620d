"""One piece of work under several hotkeys, and who keeps its share (`validators/duplicates.py`).

The attack: a miner trains on an honest miner's public assignment and so publishes the honest
miner's update. Early in a run the marks of both on their own data are equal give or take their
noise (seen in a local network: 0.0124 ± 0.0058 for the copier, 0.0121 ± 0.0048 for the honest
miner), and keeping the larger gave the honest share to the copier. A replay that passed settles it;
a mark that stands out by two standard errors settles it; else nobody is paid for the work."""

from __future__ import annotations

import torch

from distrai.wire.verdicts import PASS, Check, Number
from validators.checks import MinerVerdict
from validators.duplicates import flag_duplicates

THRESHOLD = 0.95
HONEST, COPIER, OTHER = "5Honest" + "h" * 41, "5Copier" + "c" * 41, "5Other" + "o" * 42


def work(seed: int) -> dict[str, torch.Tensor]:
    generator = torch.Generator().manual_seed(seed)
    return {"w": torch.randn(64, 32, generator=generator), "b": torch.randn(32, generator=generator)}


def verdict(hotkey: str, update: dict[str, torch.Tensor], mark: float, error: float) -> MinerVerdict:
    v = MinerVerdict(hotkey, 0, {"manifest": PASS, "consistency": PASS, "update": PASS})
    v.update = {n: t.clone() for n, t in update.items()}
    v.numbers.update({Number.MARK: mark, Number.MARK_Z: mark / error})
    return v


def flagged(*verdicts: MinerVerdict, copier_first: bool = True) -> dict[str, MinerVerdict]:
    blocks = {v.hotkey: (9 if (v.hotkey == COPIER) == copier_first else 10) for v in verdicts}
    flag_duplicates(list(verdicts), blocks, THRESHOLD, "run/duplicates")
    return {v.hotkey: v for v in verdicts}


def test_marks_too_close_to_tell_pay_neither_the_copier_nor_the_one_it_copied():
    shared = work(0)
    got = flagged(verdict(HONEST, shared, 0.0121, 0.0048), verdict(COPIER, shared, 0.0124, 0.0058))
    for hk, other in ((HONEST, COPIER), (COPIER, HONEST)):
        v = got[hk]
        assert not v.passed and not v.fraud, v.verdicts
        assert other in v.verdicts[Check.DUPLICATE] and "cannot be told" in v.verdicts[Check.DUPLICATE]


def test_a_replay_that_passed_keeps_the_work_whatever_the_marks():
    shared = work(0)
    honest = verdict(HONEST, shared, 0.0121, 0.0048)
    honest.verdicts[Check.REPLAY] = PASS
    got = flagged(honest, verdict(COPIER, shared, 0.0124, 0.0058))
    assert got[HONEST].passed, got[HONEST].verdicts
    why = got[COPIER].verdicts[Check.DUPLICATE]
    assert not got[COPIER].fraud and f"trained on {HONEST}'s data (its replay passed" in why, why


def test_a_mark_two_standard_errors_above_the_others_keeps_the_work():
    shared = work(0)
    rescaled = {n: 3.0 * t for n, t in shared.items()}
    got = flagged(verdict(HONEST, shared, 0.030, 0.005), verdict(COPIER, rescaled, 0.010, 0.005))
    assert got[HONEST].passed, got[HONEST].verdicts
    assert f"trained on {HONEST}'s data (its mark stands out" in got[COPIER].verdicts[Check.DUPLICATE]


def test_a_mark_just_short_of_two_standard_errors_keeps_nothing():
    shared = work(0)
    got = flagged(verdict(HONEST, shared, 0.030, 0.005), verdict(COPIER, shared, 0.016, 0.005))
    assert not got[HONEST].passed and not got[COPIER].passed


def test_an_unmeasured_member_leaves_the_marks_unable_to_tell():
    shared = work(0)
    copier = verdict(COPIER, shared, 0.0, 1.0)
    copier.numbers.clear()
    got = flagged(verdict(HONEST, shared, 0.030, 0.005), copier)
    assert not got[HONEST].passed and not got[COPIER].passed


def test_independent_work_is_not_a_duplicate_and_records_its_largest_cosine():
    got = flagged(verdict(HONEST, work(0), 0.0121, 0.0048), verdict(OTHER, work(1), 0.0124, 0.0058))
    for v in got.values():
        assert v.passed, v.verdicts
        assert abs(v.numbers[Number.MAX_COSINE]) < 0.2


def test_the_reason_names_one_other_member_however_many_copies_there_are():
    shared = work(0)
    copies = [verdict(f"5Copy{i:02d}" + "x" * 41, shared, 0.01, 0.005) for i in range(40)]
    flag_duplicates(copies, {v.hotkey: 10 for v in copies}, THRESHOLD, "run/duplicates")
    for v in copies:
        why = v.verdicts[Check.DUPLICATE]
        assert "and 38 other miners'" in why and len(why) < 400, why
