"""Device findings are dated by their samples' time, not by when the step topic caught up (streams/detect/engine.py)."""

from __future__ import annotations

import numpy as np

from streams.detect.config import DetectionConfig
from streams.detect.engine import JobEngine
from streams.detect.scopes.finding import Finding
from streams.detect.windows.step_frames import Frame

S = 1_000_000_000


def _frame(step: int, end_s: float, world: int = 4) -> Frame:
    frame = Frame.empty(step, world, 0)
    frame.seen[:] = True
    frame.start_ns[:] = int((end_s - 1.0) * S)
    frame.end_ns[:] = int(end_s * S)
    return frame


def _pending(engine: JobEngine, sample_s: list[float]) -> None:
    for i, t in enumerate(sample_s):
        engine.signals.pending.append((int(t * S), Finding(rule="R2", key=f"device:node-0/{i}", scope="rank",
                                                           step=-1, summary=f"sample at {t}s")))


def test_a_sample_taken_after_the_step_waits_for_the_step_of_its_own_time() -> None:
    engine = JobEngine.create("j", DetectionConfig())
    _pending(engine, [29.5, 61.2, 75.0])  # device topic ahead: samples from steps 30, 61 and 75 already in
    first = engine._device_findings_until(_frame(30, end_s=30.0))
    assert [f.summary for f in first] == ["sample at 29.5s"] and first[0].step == 30
    assert engine._device_findings_until(_frame(31, end_s=31.0)) == [], "nothing of step 31's time"
    later = engine._device_findings_until(_frame(61, end_s=62.0))
    assert [(f.summary, f.step) for f in later] == [("sample at 61.2s", 61)]
    assert [(ts, f.summary) for ts, f in engine.signals.pending] == [(75 * S, "sample at 75.0s")]


def test_a_late_sample_joins_the_step_being_evaluated() -> None:
    engine = JobEngine.create("j", DetectionConfig())
    _pending(engine, [10.0])  # behind the steps: the earliest open step takes it
    out = engine._device_findings_until(_frame(40, end_s=40.0))
    assert [f.step for f in out] == [40] and engine.signals.pending == []


def test_a_late_sample_is_dated_by_its_own_time() -> None:
    # step 40 ran 39-40 s: a sample of 10.0 s is 29 steps of its length behind, one of 38.5 s one step, one
    # taken during step 40 is on time; the book reads the date (a sample from before an incident resolved)
    engine = JobEngine.create("j", DetectionConfig())
    _pending(engine, [10.0, 38.5, 39.5])
    out = engine._device_findings_until(_frame(40, end_s=40.0))
    assert [(f.step, f.since_step) for f in out] == [(40, 11), (40, 39), (40, None)]
    # recent steps of 2 s (a slowdown): counted back in the longest, never dated before the sample's own step
    engine.frames.recent_ms = [2_000.0, 2_000.0, 1_000.0]
    _pending(engine, [10.0])
    assert [f.since_step for f in engine._device_findings_until(_frame(41, end_s=41.0))] == [26]


def test_a_frame_without_reports_takes_everything_pending() -> None:
    engine = JobEngine.create("j", DetectionConfig())
    _pending(engine, [5.0, 500.0])
    empty = Frame.empty(7, 4, 0)
    assert np.count_nonzero(empty.seen) == 0
    assert [f.step for f in engine._device_findings_until(empty)] == [7, 7]
