"""A frame complete in steps waits for the kernel summaries of ranks that send them."""

from __future__ import annotations

from schemas import encode
from streams.detect.combine.chunks import StepColumns
from streams.detect.ingest.decode import decode_batch
from streams.detect.windows.step_frames import SUMMARY_MISS_LIMIT, Frame, StepFrames, WindowParams
from tests.streams.helpers import kernel_chunk, step_event

S = 1_000_000_000


def _steps(frames: StepFrames, step: int, now: int) -> None:
    chunks, _ = decode_batch([encode(step_event(r, step, 100.0, world=4, dp_size=4)) for r in range(4)], 1 << 20)
    frames.add_steps(StepColumns(chunks[0]), now)


def _kernels(frames: StepFrames, step: int, ranks: range, now: int) -> None:
    rows: list[list[object]] = [[r, step, [["mm", "compute", 1, 1000, None, None, None, None, None, None]], 0]
                                for r in ranks]
    frames.add_kernels(kernel_chunk(rows), now)


def _ranks(frame: Frame) -> list[int]:
    rows = frame.kernel_rows()
    return [] if rows is None else sorted(rows.rank.tolist())


def test_frame_waits_for_summaries_once_ranks_send_them() -> None:
    frames = StepFrames(params=WindowParams(timeout_min_s=5.0))
    _steps(frames, 0, 0)
    assert [f.step for f in frames.release(0)] == [0], "no rank sends summaries yet: steps complete it"
    _kernels(frames, 0, range(4), 0)  # late for step 0, but now the job is known to send them
    _steps(frames, 1, 0)
    assert frames.release(0) == []
    _kernels(frames, 1, range(3), 0)
    assert frames.release(0) == [], "rank 3's summary still missing"
    _kernels(frames, 1, range(3, 4), 0)
    released = frames.release(0)
    assert [f.step for f in released] == [1] and _ranks(released[0]) == [0, 1, 2, 3]


def test_a_rank_already_past_the_step_does_not_hold_it() -> None:
    frames = StepFrames(params=WindowParams(timeout_min_s=5.0))
    _steps(frames, 0, 0)
    _kernels(frames, 0, range(4), 0)
    _steps(frames, 1, 0)
    _kernels(frames, 1, range(4), 0)
    assert [f.step for f in frames.release(0)] == [0, 1]
    _steps(frames, 2, 0)
    _kernels(frames, 3, range(4), 0)  # step 2's summaries were lost; step 3's came
    assert [f.step for f in frames.release(0)] == [2]


def test_missing_summaries_time_out() -> None:
    frames = StepFrames(params=WindowParams(timeout_min_s=5.0))
    _steps(frames, 0, 0)
    _kernels(frames, 0, range(4), 0)
    assert [f.step for f in frames.release(0)] == [0]
    _steps(frames, 1, 0)
    assert frames.release(1 * S) == []
    assert [(f.step, f.closed_by) for f in frames.release(6 * S)] == [(1, "timeout")]


def test_a_declared_job_awaits_summaries_its_backlog_still_holds() -> None:
    """Contract 1.3: steps read minutes ahead of the first summary (a backlog) wait for them."""
    frames = StepFrames(params=WindowParams(timeout_min_s=5.0), summaries_declared=True, input_lagging=True)
    for step in range(3):
        _steps(frames, step, 0)
    assert frames.release(10 * S) == [], "no summary seen yet, but the job declared them and the input lags"
    _kernels(frames, 0, range(4), 11 * S)
    _kernels(frames, 1, range(2), 11 * S)
    released = frames.release(11 * S)
    assert [(f.step, f.closed_by, _ranks(f)) for f in released] == [(0, "complete", [0, 1, 2, 3])]


def test_a_declared_job_awaits_every_rank_until_one_proves_it_sends_none() -> None:
    """Declared (1.3): a frame awaits each reporting rank's summary even with the input current (a
    partition read ahead must not leave R6 judging part of the hosts); a rank whose summary timed
    out SUMMARY_MISS_LIMIT frames in a row is no longer awaited."""
    frames = StepFrames(params=WindowParams(timeout_min_s=5.0), summaries_declared=True)
    now = 0
    for step in range(SUMMARY_MISS_LIMIT):
        _steps(frames, step, now)
        _kernels(frames, step, range(3), now)  # rank 3 never sends summaries (its hook cannot see kernels)
        assert frames.release(now) == [], "rank 3 declared, its summary may still come"
        now += 6 * S
        assert [(f.step, f.closed_by) for f in frames.release(now)] == [(step, "timeout")]
    _steps(frames, SUMMARY_MISS_LIMIT, now)
    _kernels(frames, SUMMARY_MISS_LIMIT, range(3), now)
    assert [(f.step, f.closed_by) for f in frames.release(now)] == [(SUMMARY_MISS_LIMIT, "complete")]


def test_an_undeclared_job_lagging_learns_as_before() -> None:
    frames = StepFrames(params=WindowParams(timeout_min_s=5.0), input_lagging=True)
    _steps(frames, 0, 0)
    assert [f.step for f in frames.release(0)] == [0], "nothing says summaries will come"


def test_summaries_before_any_step_open_the_frame_at_their_world() -> None:
    """A job's summaries read before its first step report are kept (not dropped for an unknown
    world): the frame completes the moment the steps arrive."""
    frames = StepFrames(params=WindowParams(timeout_min_s=5.0), summaries_declared=True)
    frames.add_kernels(kernel_chunk([[r, 0, [["mm", "compute", 1, 1000, None, None, None, None, None, None]], 0]
                                     for r in range(4)], world=4), 0)
    assert frames.release(0) == [], "no step reported yet"
    _steps(frames, 0, 0)
    released = frames.release(0)
    assert [(f.step, f.closed_by, _ranks(f)) for f in released] == [(0, "complete", [0, 1, 2, 3])]
    assert frames.stats.late == 0


def test_a_summary_for_a_rank_outside_the_world_is_counted_not_kept() -> None:
    frames = StepFrames(params=WindowParams(timeout_min_s=5.0))
    _steps(frames, 0, 0)
    frames.add_kernels(kernel_chunk([[7, 0, [["mm", "compute", 1, 1000, None, None, None, None, None, None]], 0]]), 0)
    assert frames.stats.late == 1 and frames.topo.world == 4
