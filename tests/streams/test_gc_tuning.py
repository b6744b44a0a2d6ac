"""The workers' GC tuning: raises the gen-0 threshold, 0 leaves the interpreter's settings alone."""

from __future__ import annotations

import gc
from collections.abc import Iterator

import pytest

from infra.settings import load_settings
from streams.gc_tuning import tune_gc


@pytest.fixture
def restore_gc() -> Iterator[None]:
    before = gc.get_threshold()
    yield
    gc.set_threshold(*before)
    gc.unfreeze()


@pytest.mark.usefixtures("restore_gc")
def test_threshold_is_raised_and_zero_keeps_the_default(monkeypatch: pytest.MonkeyPatch) -> None:
    gc.set_threshold(700, 10, 10)
    tune_gc(0)
    assert gc.get_threshold() == (700, 10, 10)
    monkeypatch.setenv("STEPLENS_WORKER_GC_THRESHOLD", "12345")
    tune_gc(load_settings().worker_gc_threshold)
    assert gc.get_threshold() == (12345, 20, 100) and gc.get_freeze_count() > 0
