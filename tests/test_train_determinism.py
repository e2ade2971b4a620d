"""Determinism switches: thread pinning and the process-wide settings for reproducible steps."""

from __future__ import annotations

import pytest
import torch

from distrai.train.determinism import configure_determinism, fingerprint, pinned_threads


def test_pinned_threads_sets_and_restores():
    previous = torch.get_num_threads()
    torch.set_num_threads(3)
    try:
        with pinned_threads(1):
            assert torch.get_num_threads() == 1
        assert torch.get_num_threads() == 3
        with pinned_threads(None):
            assert torch.get_num_threads() == 3
        with pytest.raises(RuntimeError), pinned_threads(2):
            raise RuntimeError("inside")
        assert torch.get_num_threads() == 3
        with pytest.raises(ValueError, match="at least 1"), pinned_threads(0):
            pass
    finally:
        torch.set_num_threads(previous)


def test_configure_determinism_on_cpu_turns_on_deterministic_algorithms_without_fills():
    before = torch.are_deterministic_algorithms_enabled()
    fills = torch.utils.deterministic.fill_uninitialized_memory
    try:
        torch.utils.deterministic.fill_uninitialized_memory = True
        configure_determinism("cpu")
        assert torch.are_deterministic_algorithms_enabled()
        assert fingerprint("cpu")["deterministic_algorithms"] == "True"
        assert torch.utils.deterministic.fill_uninitialized_memory is False
    finally:
        torch.use_deterministic_algorithms(before)
        torch.utils.deterministic.fill_uninitialized_memory = fills


def test_fingerprint_records_what_bit_equality_depends_on(monkeypatch):
    monkeypatch.setenv("MKL_CBWR", "COMPATIBLE")
    found = fingerprint("cpu")
    assert found["torch"] == torch.__version__
    assert found["cpu_capability"] == torch.backends.cpu.get_cpu_capability()
    assert found["mkl_cbwr"] == "COMPATIBLE"
    assert "gpu" not in found
