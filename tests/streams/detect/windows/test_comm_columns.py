"""comm_columns: a frame's collectives as per-key columns over ranks, built once and cached."""

from __future__ import annotations

import math

import numpy as np

from schemas import encode
from streams.detect.combine.chunks import StepColumns
from streams.detect.ingest.decode import decode_batch
from streams.detect.windows.comm_columns import comm_columns
from streams.detect.windows.step_frames import Frame, NameTable, StepFrames, WindowParams
from tests.streams.helpers import kernel_chunk, kernel_rows, step_event


def _frame(world: int = 4) -> Frame:
    frame = Frame.empty(7, world, 0)
    frame.seen[:] = True
    return frame


def test_columns_per_key_with_nan_where_a_rank_or_field_is_missing() -> None:
    frame = _frame()
    # key, cat, count, total_ns, flops, bytes, domain, launch mean, launch mad, direction, longest call
    frame.kernels.append(kernel_rows([
        [0, 7, [["allreduce/dp", "comm", 4, 8_000_000, None, 1 << 20, "dp", None, None, None, 3_000_000],
                ["matmul", "compute", 10, 5_000_000, 1e12, None, None, None, None, None]], 0],
        [2, 7, [["allreduce/dp", "comm", 4, 6_000_000, None, None, "dp"]], 0],
        [3, 7, [["send/pp", "comm", 1, 1_000_000, None, 4096, "pp"]], 0]]))
    cols = comm_columns(frame)
    assert sorted(cols) == ["allreduce/dp", "send/pp"]  # compute kernels are not collectives
    ar = cols["allreduce/dp"]
    assert ar.domain == "dp"
    assert ar.total_ns[0] == 8e6 and ar.total_ns[2] == 6e6
    assert math.isnan(ar.total_ns[1]) and math.isnan(ar.total_ns[3])  # ranks 1 and 3 sent no allreduce
    assert ar.nbytes[0] == float(1 << 20) and math.isnan(ar.nbytes[2])  # rank 2 gave no bytes
    assert ar.longest_ns[0] == 3e6 and math.isnan(ar.longest_ns[2])  # rank 2 gave no longest call
    assert list(ar.calls[[0, 2]]) == [4.0, 4.0]
    assert cols["send/pp"].domain == "pp" and np.flatnonzero(np.isfinite(cols["send/pp"].total_ns)).tolist() == [3]


def test_entries_that_are_not_a_timed_collective_are_left_out() -> None:
    frame = _frame()
    frame.kernels.append(kernel_rows([
        [0, 7, [["allreduce/dp", "comm", 4, 0, None, 1024, "dp"],  # no device time
                ["allreduce/dp", "compute", 4, 5_000, None, 1024, "dp"],  # not a collective
                ["allgather/tp", None, 4, 5_000, None, 1024]], 0],  # no category
        [9, 7, [["allreduce/dp", "comm", 4, 5_000, None, 1024, "dp"]], 0]]))  # beyond the world
    assert comm_columns(frame) == {}


def test_a_key_takes_the_first_domain_its_aggregates_name_and_keys_keep_their_order() -> None:
    frame = _frame()
    frame.kernels.append(kernel_rows([
        [0, 7, [["send/pp", "comm", 1, 1_000, None, 64], ["allreduce/dp", "comm", 4, 5_000, None, 1024, "dp"]], 0],
        [1, 7, [["send/pp", "comm", 1, 1_000, None, 64, "pp"]], 0],
        [2, 7, [["send/pp", "comm", 1, 1_000, None, 64, "tp"]], 0]]))
    cols = comm_columns(frame)
    assert list(cols) == ["send/pp", "allreduce/dp"]
    assert (cols["send/pp"].domain, cols["allreduce/dp"].domain) == ("pp", "dp")


def test_a_rank_twice_in_a_frame_counts_its_later_summary() -> None:
    frame = _frame()
    names = NameTable()
    frame.kernels.append(kernel_rows([[1, 7, [["allreduce/dp", "comm", 4, 5_000, None, 1024, "dp"]], 0]], names))
    frame.kernels.append(kernel_rows([[1, 7, [["allreduce/dp", "comm", 4, 7_000, None, 1024, "dp"]], 0]], names))
    assert comm_columns(frame)["allreduce/dp"].total_ns[1] == 7_000.0


def test_cached_until_the_frame_gets_more_summaries() -> None:
    frame = _frame()
    names = NameTable()
    frame.kernels.append(kernel_rows([[0, 7, [["allreduce/dp", "comm", 4, 8_000_000, None, 1024, "dp"]], 0]], names))
    first = comm_columns(frame)
    assert comm_columns(frame) is first
    frame.comm = None  # what StepFrames does when a rank's summary joins the frame
    frame.kernels.append(kernel_rows([[1, 7, [["allreduce/dp", "comm", 4, 9_000_000, None, 1024, "dp"]], 0]], names))
    again = comm_columns(frame)
    assert again is not first and again["allreduce/dp"].total_ns[1] == 9e6


def test_step_frames_drop_the_cache_when_a_summary_joins_an_open_frame() -> None:
    frames = StepFrames(params=WindowParams(timeout_min_s=5.0))
    chunks, _ = decode_batch([encode(step_event(r, 0, 100.0, world=4, dp_size=4)) for r in range(4)], 1 << 20)
    frames.add_steps(StepColumns(chunks[0]), 0)

    def summaries(ranks: range) -> None:
        frames.add_kernels(kernel_chunk([[r, 0, [["allreduce/dp", "comm", 2, 1_000 + r, None, 64, "dp"]], 0]
                                         for r in ranks]), 0)

    summaries(range(3))
    early = comm_columns(frames.frames[0])  # read while rank 3's summary is still out
    assert np.isnan(early["allreduce/dp"].total_ns[3])
    summaries(range(3, 4))
    cols = comm_columns(frames.frames[0])
    assert cols["allreduce/dp"].total_ns.tolist() == [1_000.0, 1_001.0, 1_002.0, 1_003.0]
