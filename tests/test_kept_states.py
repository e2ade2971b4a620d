"""A miner keeps at most `--miner.kept-states` boundary states of a window on disk, whatever its
length (miners/kept_states.py); tests/test_miner_reveals.py rebuilds a dropped one."""

from __future__ import annotations

import pytest

from miners.kept_states import check_kept_states, kept, spacing
from miners.miner import MinerOptions


@pytest.mark.parametrize("max_kept", [2, 3, 5, 16, 64])
def test_the_kept_boundaries_are_bounded_hold_the_ends_and_never_need_a_dropped_one_again(max_kept):
    for latest in range(0, 600):
        now = kept(latest, max_kept)
        assert len(now) <= max_kept, (latest, now)
        assert {0, latest} <= now
        s = spacing(latest, max_kept)
        assert all(b % s == 0 for b in now - {latest})
        # every start is rebuilt from a kept boundary at most s - 1 segments before it
        assert all(any(0 <= b - k < s for k in now) for b in range(latest + 1))
        after = kept(latest + 1, max_kept)
        assert after - {latest + 1} <= now, f"segment {latest + 1} brings back a boundary dropped before"


def test_the_gpu_configs_arithmetic_for_one_h100_and_for_eight():
    # 46 segments a window on one H100 (measured pace): spacing 4, 13 states, at most 3 segments replayed
    assert spacing(46, 16) == 4 and len(kept(46, 16)) == 13
    # about 368 on 8: 16 kept would replay up to 31 segments on one GPU; 64 keeps it to 7
    assert spacing(368, 16) == 32 and spacing(368, 64) == 8 and len(kept(368, 64)) == 47


@pytest.mark.parametrize("bad", [-1, 1])
def test_a_kept_states_setting_that_cannot_hold_the_ends_is_refused_by_name(bad):
    with pytest.raises(ValueError, match="--miner.kept-states"):
        check_kept_states(bad)
    with pytest.raises(ValueError, match="--miner.kept-states"):
        MinerOptions(work_dir=None, kept_states=bad)  # type: ignore[arg-type]
