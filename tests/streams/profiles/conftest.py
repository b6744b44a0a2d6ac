"""Shared paths and helpers for the profile tests: the real samples are read in place."""

from __future__ import annotations

from pathlib import Path

import pytest

from streams.profiles.samples import real_samples_dir

REAL = real_samples_dir()
KINETO = REAL / "kineto-hta"
ASCEND = REAL / "ascend-torch_npu"
FIXTURES = Path(__file__).parent / "fixtures"


@pytest.fixture(scope="session")
def real_samples() -> Path:
    if not REAL.is_dir():
        raise RuntimeError(f"the real profiler samples are missing: {REAL} (set STEPLENS_REAL_SAMPLES)")
    return REAL
