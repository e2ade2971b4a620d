"""How long a miner trains: whole segments while the next one and the commit fit before the deadline."""

from __future__ import annotations

import pytest

from distrai.protocol.windows import skipped_windows
from miners.pacing import Pacer, blocks_needed, commit_by, stop_time


def test_training_stops_so_the_commitment_lands_before_the_deadline():
    # subtensor lands a call in the next block: it must be submitted before block deadline - 1 begins
    assert commit_by(110, inclusion_blocks=1) == 109
    assert commit_by(110, inclusion_blocks=0) == 110
    assert stop_time(50.0, seconds_to_deadline=30.0, finish_seconds=4.0) == 76.0


def test_blocks_needed_for_one_segment_and_the_commit():
    assert blocks_needed(1.9, 0.4, block_time=1.0, inclusion_blocks=0) == 4
    assert blocks_needed(48.0, 5.0, block_time=12.0, inclusion_blocks=1) == 7


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_the_pacer_trains_segments_while_the_slowest_one_so_far_still_fits():
    clock = Clock()
    pacer = Pacer(started=0.0, until=10.0, clock=clock)
    assert pacer.slowest is None
    clock.now = 2.0  # segment 0 took 2 s
    assert pacer.go_on(1)
    clock.now = 5.0  # segment 1 took 3 s: 5 + 3 ≤ 10
    assert pacer.go_on(2)
    clock.now = 7.5  # segment 2 took 2.5 s, but the slowest (3 s) would end at 10.5
    assert not pacer.go_on(3)
    assert pacer.segment_seconds == pytest.approx([2.0, 3.0, 2.5])
    assert pacer.slowest == pytest.approx(3.0)


def test_a_pacer_whose_time_is_up_stops_after_the_first_segment():
    clock = Clock()
    pacer = Pacer(started=0.0, until=-1.0, clock=clock)
    clock.now = 1.0
    assert not pacer.go_on(1)


def test_the_time_is_up_once_the_stop_time_has_come():
    clock = Clock()
    pacer = Pacer(started=0.0, until=10.0, clock=clock)
    clock.now = 9.9
    assert not pacer.time_up()
    clock.now = 10.0
    assert pacer.time_up()


def test_the_windows_a_miner_passes_over_are_those_between_the_last_it_set_out_to_train_and_the_next():
    assert list(skipped_windows(7, 9)) == [8]
    assert list(skipped_windows(7, 8)) == []
    assert list(skipped_windows(8, 8)) == []
    assert list(skipped_windows(None, 9)) == []


def test_time_waited_for_data_out_of_reach_is_not_a_segment_s_time():
    clock, waited = Clock(), [5.0]
    pacer = Pacer(started=0.0, until=30.0, clock=clock, stalled=lambda: waited[0])
    clock.now, waited[0] = 20.0, 23.0  # segment 0 took 20 s, 18 of them waiting for a shard
    assert pacer.go_on(1)  # 20 + 2 ≤ 30
    assert pacer.slowest == pytest.approx(2.0)
