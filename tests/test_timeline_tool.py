"""The suite's timeline tool (`support.timeline`): its summary reads what the plugin writes."""

from __future__ import annotations

import json

from support.timeline import summary


def test_the_summary_gives_each_jobs_span_and_each_files_totals(tmp_path, capsys):
    path = tmp_path / "timeline.jsonl"
    rows = [
        {"job": "leader_net", "lane": 0, "ev": "start", "t": 10.0},
        {"test": "tests/test_a.py::one", "start": 1.0, "wall": 2.5, "own": 2.0, "kids": 0.0, "t": 3.5},
        {"test": "tests/test_a.py::two", "start": 3.5, "wall": 1.5, "own": 1.0, "kids": 0.0, "t": 5.0},
        {"test": "tests/test_b.py::one", "start": 5.0, "wall": 9.0, "own": 0.5, "kids": 4.0, "t": 14.0},
        {"job": "leader_net", "lane": 0, "ev": "end", "finished": True, "t": 185.5},
    ]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    summary(str(path))
    lines = capsys.readouterr().out.splitlines()
    assert any(line.split() == ["0", "leader_net", "10.0", "→", "185.5", "175.5"] for line in lines), lines
    assert "3 tests, the last ending at 14.0 s" in lines
    files = [line.split() for line in lines if "tests/test_" in line]
    assert files == [["9.0", "0.5", "1", "tests/test_b.py"], ["4.0", "3.0", "2", "tests/test_a.py"]]
