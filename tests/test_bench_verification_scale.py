"""Smoke test of bench/verification_scale.py: a `--quick` run (8 honest miners in swarm processes, the
4 cheaters, 2 validators, 2 windows, as separate processes through the real entry points) writes
every section of its page, keeps the notes below the marker, and each table follows from its own
numbers: a validator replays no more miners than it checked, a replay share is replayed over
checked, the four cheaters each have a row, no honest miner was rejected, and every target's verdict
follows from the number beside it."""

from __future__ import annotations

import re

import pytest
from support.bench_jobs import KEPT, MARKER
from test_bench_smoke import table_after

pytestmark = pytest.mark.e2e  # runs bench/verification_scale.py's network as processes

CHEATERS = ["forged", "lazy", "oldbase", "wrongdata"]
MINERS = 8 + len(CHEATERS)
VALIDATORS = 2


@pytest.fixture(scope="module")
def page(verification_scale_bench) -> str:
    run = verification_scale_bench.completed()
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    return verification_scale_bench.report.read_text()


def test_the_page_has_every_section_and_keeps_the_notes(page):
    assert page.startswith("# Verification at scale\n") and "# old report" not in page
    assert "python bench/verification_scale.py --quick --output" in page
    assert page.endswith(f"{MARKER}\n{KEPT}")
    for heading in (
        "## Per validator and window (measured)",
        "## Share of the miners replayed by anyone (measured)",
        "## The cheaters (measured)",
        "## The GPU config at 256 miners and 16 validators (computed)",
        "## Targets",
    ):
        assert heading in page


def test_each_validator_replays_within_what_it_checked(page):
    header, *rows = table_after(page, "## Per validator and window (measured)")
    assert header[:6] == [
        "window",
        "validator",
        "miners checked",
        "replays",
        "replayed steps",
        "of a miner's steps",
    ]
    assert len({row[1] for row in rows}) == VALIDATORS
    assert any(int(row[2]) > 0 for row in rows), "some window had miners to check"
    for window, _, checked, replays, steps, share, *_ in rows:
        assert 0 <= int(replays) <= int(checked) <= MINERS, (window, checked, replays)
        assert (int(replays) == 0) == (float(steps) == 0)
        assert share.endswith("%") or (share == "—" and int(checked) == 0)


def test_the_replayed_share_is_replayed_over_checked(page):
    _, *rows = table_after(page, "## Share of the miners replayed by anyone (measured)")
    assert any(int(row[2]) > 0 for row in rows)
    for _, replayed, checked, share, configured in rows:
        assert 0 <= int(replayed) <= int(checked) <= MINERS
        if int(checked):
            assert float(share.rstrip("%")) == pytest.approx(100 * int(replayed) / int(checked), abs=0.05)
        else:
            assert share == "—"
        assert float(configured) == 0.25


def test_every_cheater_has_a_row_and_no_honest_miner_was_rejected(page):
    _, *rows = table_after(page, "## The cheaters (measured)")
    assert sorted(row[0] for row in rows) == CHEATERS
    rejected, verified = map(int, re.search(r"Honest false rejections: (\d+) of (\d+)", page).groups())
    assert rejected == 0 and verified > 0


def test_each_target_verdict_follows_from_its_number(page):
    targets = page.split("## Targets", 1)[1]
    replay = re.search(r"at 256 miners: ([\d.]+)% of a miner's \((met|MISSED)", targets)
    assert replay and (replay.group(2) == "met") == (float(replay.group(1)) <= 5.0)
    reveal = re.search(r"Reveals ≤ 8 B/param: ([\d.]+) \((met|MISSED)\)", targets)
    assert reveal and (reveal.group(2) == "met") == (float(reveal.group(1)) <= 8)
    traffic = re.search(r"less than DDP: ([\d,]+)× \((met|MISSED)\)", targets)
    assert traffic and (traffic.group(2) == "met") == (float(traffic.group(1).replace(",", "")) >= 1000)
    assert "Zero honest false rejections: 0 (met)" in targets
