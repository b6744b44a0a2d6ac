"""Shared paths and helpers for the profile tests: the real samples are read in place."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

REAL = Path(os.environ.get("STEPLENS_REAL_SAMPLES", "/work/shared/data/real"))
KINETO = REAL / "kineto-hta"
ASCEND = REAL / "ascend-torch_npu"
FIXTURES = Path(__file__).parent / "fixtures"


@pytest.fixture(scope="session")
def real_samples() -> Path:
    if not REAL.is_dir():
        raise RuntimeError(f"the real profiler samples are missing: {REAL} (set STEPLENS_REAL_SAMPLES)")
    return REAL
