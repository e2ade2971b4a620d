"""Folders for a test module's fixtures that go when the module is done."""

from __future__ import annotations

import shutil
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest


@pytest.fixture(scope="module")
def module_folders(request, tmp_path_factory) -> Iterator[Callable[[str], Path]]:
    """Makes folders for a module's fixtures (`module_folders("trained")`, as `tmp_path_factory.mktemp`
    does), removed after the module's last test unless a test failed meanwhile: a module that trains
    miners into stores of their own writes 50-100 MB a fixture, which would otherwise stay to the
    session's end."""
    made: list[Path] = []
    failed = request.session.testsfailed

    def make(name: str) -> Path:
        made.append(tmp_path_factory.mktemp(name))
        return made[-1]

    yield make
    if request.session.testsfailed == failed:
        for folder in made:
            shutil.rmtree(folder, ignore_errors=True)
