"""The README a newcomer skims: its first screen holds the set-up commands, the main command and the
test command, the last the very one `.ci/run` runs; and every relative link of the README and the
docs pages reaches a file, and a heading where it names one. (tests/test_readme_walk.py runs its
one-machine walk.)"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
README = REPO / "README.md"
FIRST_SCREEN = 25
"""Lines a newcomer sees before scrolling."""
PAGES = [README, *sorted((REPO / "docs").glob("*.md"))]


def ci_test_command() -> str:
    """The command `.ci/run` runs under its "The README's test command" comment, with the venv's
    python as the README's `python`."""
    lines = (REPO / ".ci" / "run").read_text().splitlines()
    marked = next(i for i, line in enumerate(lines) if "README's test command" in line)
    return lines[marked + 1].replace('"$venv/bin/python"', "python").strip()


def test_the_first_screen_sets_up_runs_and_tests():
    screen = README.read_text().splitlines()[:FIRST_SCREEN]
    commands = [line.split("#")[0].strip() for line in screen]
    assert any(c.startswith("python3 -m venv .venv") for c in commands), screen
    assert 'pip install torch==2.13.0 && pip install -e ".[dev,bench]"' in commands, screen
    assert "distrai localnet --miners 3 --validators 2 --windows 5" in commands, screen
    assert ci_test_command() == "python -m pytest -q"
    assert ci_test_command() in commands, screen


def slug(heading: str) -> str:
    """A heading's anchor as GitHub makes it: lower case, punctuation dropped, spaces to hyphens."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def anchors(page: Path) -> set[str]:
    text = re.sub(r"^```.*?^```", "", page.read_text(), flags=re.MULTILINE | re.DOTALL)
    return {slug(m.group(1)) for m in re.finditer(r"^#+\s+(.+)$", text, re.MULTILINE)}


@pytest.mark.parametrize("page", PAGES, ids=lambda page: str(page.relative_to(REPO)))
def test_every_relative_link_reaches_its_file_and_heading(page):
    broken = []
    for link in re.findall(r"\]\(([^)\s]+)\)", page.read_text()):
        if re.match(r"[a-z]+:", link):
            continue
        path, _, anchor = link.partition("#")
        target = (page.parent / path) if path else page
        if not target.exists():
            broken.append(f"{link}: no such file")
        elif anchor and anchor not in anchors(target):
            broken.append(f"{link}: no heading #{anchor} in {target.relative_to(REPO)}")
    assert not broken, broken
