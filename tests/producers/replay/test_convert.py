"""producers/replay/convert.py on the real samples: every event valid against the contract, the trace's own
numbers carried through (step ranges, exposed communication, per-rank collective times and bytes)."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest

from producers.replay import Replay, collective_op, from_profiles, load_replay
from schemas import JobEvent, KernelSummary, StepEvent, decode, encode
from streams.profiles.analysis.breakdown import step_breakdowns
from streams.profiles.analysis.ranks import match_collectives
from streams.profiles.importers.kineto import parse_kineto
from streams.profiles.model import COMMUNICATION, COMPUTE, Collective, Kernels, Profile, Step
from streams.profiles.samples import real_samples_dir

REAL = real_samples_dir()
KINETO = (REAL / "kineto-hta" / "trace_filter_sampled_rank-0.json.gz",
          REAL / "kineto-hta" / "trace_filter_sampled_rank-1.json.gz")
ASCEND = REAL / "ascend-torch_npu"
MSPROF = Path(__file__).resolve().parents[3] / "bench" / "data" / "real" / "msprof-advisor-8rank"
NOW = 1_800_000_000_000_000_000


def _roundtrip(replay: Replay) -> list[object]:
    """Every event through the wire codec and the contract's checks: what a worker would decode."""
    return [decode(encode(e)) for e in replay.events()]  # type: ignore[arg-type]


def _steps(replay: Replay) -> list[StepEvent]:
    return [e for s in replay.steps for e in s.events if isinstance(e, StepEvent)]


def _summaries(replay: Replay) -> list[KernelSummary]:
    return [e for s in replay.steps for e in s.events if isinstance(e, KernelSummary)]


def test_kineto_pair_replays_as_a_two_rank_job_with_the_traces_own_figures() -> None:
    replay = load_replay(list(KINETO), "job-k", NOW)
    decoded = _roundtrip(replay)
    assert decoded == replay.events()
    assert (replay.world, replay.ranks, replay.trace_world) == (2, {0: 0, 1: 1}, 128)
    assert "2 of its job's 128 ranks" in replay.notes[0]
    # HTA's trace_filter sample lost different kernels on each rank: 5 of each rank's 10 have no peer
    assert "10 collective kernels are in one rank's trace only" in replay.notes[1]
    assert isinstance(replay.start, JobEvent) and replay.start.kernel_summaries is True
    assert replay.start.parallel == {"dp": 2} and replay.end.last_step == 552
    steps = _steps(replay)
    assert sorted((s.step, s.rank) for s in steps) == [(551, 0), (551, 1), (552, 0), (552, 1)]
    rank0 = parse_kineto(KINETO[0])
    first = next(s for s in steps if (s.step, s.rank) == (551, 0))
    assert first.start_ns == NOW  # rank 0 starts the trace's first step
    assert first.end_ns - first.start_ns == round(rank0.steps[0].dur * 1e3)
    # the breakdown of rank 0's kernels less the SendRecv kernels rank 1's trace lost
    alone = match_collectives([rank0, parse_kineto(KINETO[1])]).alone[0]
    assert len(alone) == 5
    rank0.kernels = rank0.kernels.take(~((rank0.kernels.kind == COMMUNICATION) & np.isin(rank0.kernels.ts,
                                                                                          sorted(alone))))
    exposed = step_breakdowns(rank0)[0].communication_not_overlapped
    assert first.phases.comm_exposed_ms == pytest.approx(exposed / 1e3)
    summary = next(s for s in _summaries(replay) if (s.step, s.rank) == (551, 0))
    comm = next(e for e in summary.entries if e.cat == "comm")
    assert (comm.key, comm.op, comm.domain, comm.group_size) == ("alltoall/dp", "alltoall", "dp", 2)  # SendRecv
    # the trace's collective kernels of that step, summed: 5 SendRecv kernels (the device ran all five)
    assert comm.count == 5
    assert comm.total_ns == pytest.approx(195_327_000, abs=comm.count)


def test_ascend_pair_carries_collective_bytes_from_communication_json() -> None:
    replay = load_replay([ASCEND], "job-a", NOW)
    assert _roundtrip(replay) == replay.events()
    assert replay.world == 2 and [s.step for s in replay.steps] == [50]
    assert not any("trace only" in n for n in replay.notes)  # a complete pair: every collective has its peer
    for summary in _summaries(replay):
        comm = [e for e in summary.entries if e.cat == "comm"]
        assert [e.key for e in comm] == ["allreduce/dp"]
        assert comm[0].count == 4 and comm[0].bytes is not None and comm[0].bytes > 4e8
    exposed = {s.rank: s.phases.comm_exposed_ms for s in _steps(replay)}
    assert exposed[0] == pytest.approx(101.96, abs=0.01) and exposed[1] == pytest.approx(96.36, abs=0.01)


def test_msprof_cluster_table_gives_eight_ranks_from_the_step_rows() -> None:
    replay = load_replay([MSPROF], "job-m", NOW)
    assert _roundtrip(replay) == replay.events()
    assert replay.world == 8 and replay.format == "msprof"
    steps = {s.rank: s for s in _steps(replay)}
    assert steps[1].duration_ms == pytest.approx(1702.43175)
    assert steps[1].phases.comm_exposed_ms == pytest.approx(133.386, abs=1e-3)
    assert {s.start_ns for s in steps.values()} == {NOW}  # the table has no start times
    # cluster_communication.json covers ranks 0 and 1 only: no summaries (R7 would read them as 5 % kernels)
    assert _summaries(replay) == [] and replay.start.kernel_summaries is False
    assert any("covers ranks [0, 1] of 8" in n for n in replay.notes)


def test_repeats_continue_step_numbers_and_time() -> None:
    once = load_replay(list(KINETO), "job-r", NOW)
    thrice = load_replay(list(KINETO), "job-r", NOW, repeats=3)
    assert [s.step for s in thrice.steps] == [551, 552, 553, 554, 555, 556]
    assert thrice.repeats == 3 and thrice.end.last_step == 556
    span = once.end.ts_ns - once.start.ts_ns
    s0 = {(e.rank): e.start_ns for e in thrice.steps[0].events if isinstance(e, StepEvent)}
    s2 = {(e.rank): e.start_ns for e in thrice.steps[2].events if isinstance(e, StepEvent)}
    assert all(s2[r] - s0[r] == span for r in s0)
    offsets = [s.end_offset_ns for s in thrice.steps]
    assert offsets == sorted(offsets) and offsets[-1] == 3 * span


def _profile(rank: int, world: int, kernels: bool = True) -> Profile:
    p = Profile(source=f"r{rank}", format="kineto", rank=rank, world=world)
    if kernels:  # one compute kernel per step, no launch correlation (stepped by its own start)
        p.names.id("gemm")
        p.kernels = Kernels(np.array([1_100.0, 1_600.0]), np.array([10.0, 20.0]), np.zeros(2, np.int8),
                            np.zeros(2, np.int32), np.zeros(2, np.int32), np.full(2, -1, np.int64))
    p.steps = [Step(7, 1_000.0, 500.0), Step(8, 1_500.0, 500.0)]
    p.collectives = [Collective("ncclKernel_AllReduce", "allreduce", 1_200.0, 50.0, 4096.0, "pg", 0),
                     Collective("ncclKernel_AllReduce", "allreduce", 1_700.0, 70.0, math.nan, "pg", 1)]
    return p


def _comm_profile(rank: int, spans: list[tuple[float, float]]) -> Profile:
    """Step 7 (1,000-1,500 µs): one compute kernel, then all-reduce kernels at `spans` (start, duration)."""
    p = Profile(source=f"r{rank}", format="kineto", rank=rank, world=2)
    p.names.id("gemm")
    ts = np.array([1_100.0, *(s for s, _ in spans)])
    dur = np.array([10.0, *(d for _, d in spans)])
    kind = np.array([COMPUTE, *([COMMUNICATION] * len(spans))], np.int8)
    n = ts.size
    p.kernels = Kernels(ts, dur, kind, np.zeros(n, np.int32), np.zeros(n, np.int32), np.full(n, -1, np.int64))
    p.steps = [Step(7, 1_000.0, 500.0)]
    p.collectives = [Collective("ncclKernel_AllReduce", "allreduce", s, d, 1024.0, "pg", i)
                     for i, (s, d) in enumerate(spans)]
    return p


def test_a_collective_that_only_one_ranks_trace_holds_is_left_out_of_its_exposed_communication() -> None:
    # rank 1's trace lost the middle all-reduce (sampled): the ranks leave the other two together (ends 1,250
    # and 1,440); rank 0's 50 µs in the lost one has no peer figure to compare with
    rank0 = _comm_profile(0, [(1_200.0, 50.0), (1_300.0, 50.0), (1_400.0, 40.0)])
    rank1 = _comm_profile(1, [(1_220.0, 30.0), (1_410.0, 30.0)])
    replay = from_profiles([rank0, rank1], "job-l", NOW)
    assert any("1 collective kernels are in one rank's trace only" in n and "left out" in n for n in replay.notes)
    exposed = {s.rank: s.phases.comm_exposed_ms for s in _steps(replay)}
    assert exposed == {0: pytest.approx(0.090), 1: pytest.approx(0.060)}  # not 0.140 for rank 0
    # the kernel summaries keep what each device ran
    comm = {s.rank: next(e for e in s.entries if e.cat == "comm") for s in _summaries(replay)}
    assert (comm[0].count, comm[0].total_ns, comm[0].bytes) == (3, 140_000, 3072)
    assert (comm[1].count, comm[1].total_ns) == (2, 60_000)
    assert _roundtrip(replay) == replay.events()


def _late_profile(rank: int, step_start: float, compute: tuple[float, float], reduce: tuple[float, float]) -> Profile:
    """Step 7 ends at 1,500 µs on every rank; a compute kernel, then the all-reduce that ends at 1,300."""
    p = _comm_profile(rank, [reduce])
    p.world = 3
    p.kernels.ts[0], p.kernels.dur[0] = compute
    p.steps = [Step(7, step_start, 1_500.0 - step_start)]
    return p


def test_a_late_arrivers_work_before_its_own_step_range_is_its_steps() -> None:
    """Ranks 0 and 1 compute 90 µs and wait in the all-reduce for rank 2, which computes 180 µs from the same
    release (1,010 µs) but opens its own step range only at 1,090 µs: the steps end together and start apart.
    Before, rank 2's step began at 1,090 and its busy time (step − exposed communication) was 300 µs, its
    peers' too: no straggler. Every rank's step now starts when the first began it."""
    peers = [_late_profile(r, 1_000.0, (1_010.0, 90.0), (1_100.0, 200.0)) for r in (0, 1)]
    late = _late_profile(2, 1_090.0, (1_010.0, 180.0), (1_190.0, 110.0))
    replay = from_profiles([*peers, late], "job-late", NOW)
    steps = {e.rank: e for e in _steps(replay)}
    assert {e.start_ns for e in steps.values()} == {NOW} and {e.end_ns for e in steps.values()} == {NOW + 500_000}
    busy = {r: (e.end_ns - e.start_ns) / 1e6 - (e.phases.comm_exposed_ms or 0.0) for r, e in steps.items()}
    assert busy[0] == pytest.approx(0.300) and busy[1] == pytest.approx(0.300)
    assert busy[2] == pytest.approx(0.390)  # the 90 µs its peers waited for, now its own
    assert any("1 rank-steps began before their rank's step range" in n for n in replay.notes)
    compute = next(e for e in _summaries(replay) if e.rank == 2).entries
    assert any(e.key == "compute" and e.total_ns == 180_000 for e in compute)  # its kernel is in its step


def test_the_sampled_kineto_pairs_steps_compare_the_collectives_both_traces_hold() -> None:
    # HTA names rank 1 (the later starter at every all-to-all both traces hold); with the lost kernels counted,
    # step 552's waits named rank 0 (its peer "waited" in kernels rank 0's trace lacks)
    replay = load_replay(list(KINETO), "job-k", NOW)
    late = {}
    for step in replay.steps:
        by_rank = {e.rank: e.phases.comm_exposed_ms for e in step.events if isinstance(e, StepEvent)}
        late[step.step] = min(by_rank, key=lambda r: by_rank[r])  # the late arriver waits least
    assert late == {551: 1, 552: 1}


def test_ranks_are_renumbered_when_the_trace_holds_a_slice_of_its_job() -> None:
    replay = from_profiles([_profile(70, 128), _profile(5, 128)], "job-s", NOW)
    assert replay.ranks == {5: 0, 70: 1} and replay.world == 2 and replay.trace_rank(1) == 70
    assert _roundtrip(replay) == replay.events()
    by_step = {(s.step, s.rank): s for s in _summaries(replay)}
    comm, compute = by_step[(7, 1)].entries
    assert (comm.count, comm.total_ns, comm.bytes) == (1, 50_000, 4096)  # stepped by start time: not a kernel row
    assert (compute.key, compute.count, compute.total_ns) == ("compute", 1, 10_000)
    assert by_step[(8, 1)].entries[0].bytes is None  # an unknown size stays unknown
    odd = _profile(2, 4)
    odd.collectives.append(Collective("ncclKernel_Custom", "custom", 1_300.0, 30.0, math.nan, "pg", 2))
    custom = {s.step: s for s in _summaries(from_profiles([odd], "job-s", NOW))}[7]
    assert (custom.other_count, custom.other_ns) == (1, 30_000)  # a collective of no contract op: other kernels
    bare = from_profiles([_profile(0, 2, kernels=False), _profile(1, 2, kernels=False)], "job-s", NOW)
    assert _summaries(bare) == [] and bare.start.kernel_summaries is False  # no device kernels: no summaries
    with pytest.raises(ValueError, match="same rank"):
        from_profiles([_profile(3, 8), _profile(3, 8)], "job-s", NOW)


def test_keep_time_keeps_an_epoch_clock() -> None:
    replay = load_replay(list(KINETO), "job-t", NOW, keep_time=True)
    rank0 = parse_kineto(KINETO[0])
    assert replay.start.ts_ns == round(float(np.min([s.ts for s in rank0.steps])) * 1e3)


@pytest.mark.parametrize(("name", "op"), [
    ("allreduce", "allreduce"), ("hcom_allReduce_", "allreduce"), ("hcom_broadcast__501_0", "broadcast"),
    ("SendRecv", "alltoall"), ("all_gather", "allgather"), ("reduce_scatter", "reducescatter"),
    ("receive", "recv"), ("something", None),
])
def test_collective_names_map_to_contract_ops(name: str, op: str | None) -> None:
    assert collective_op(name) == op


def test_without_communication_json_the_communication_kernels_are_the_collectives() -> None:
    """torch_npu level 0 writes no communication.json: the HCCL kernels of the trace still give each rank's time."""
    replay = load_replay([MSPROF.parent / "msinsight-torch_npu-level0"], "job-l0", NOW)
    assert _roundtrip(replay) == replay.events()
    comm = {s.rank: next(e for e in s.entries if e.cat == "comm") for s in _summaries(replay)}
    assert {r: (c.key, c.count, c.bytes) for r, c in comm.items()} == {0: ("allreduce/dp", 4, None),
                                                                        1: ("allreduce/dp", 4, None)}
    assert comm[0].total_ns == pytest.approx(85_516_889, rel=1e-6) and comm[1].total_ns == pytest.approx(68_605_711,
                                                                                                         rel=1e-6)


def test_a_pipeline_stages_receive_bubble_is_part_of_its_step_so_busy_time_is_never_negative(tmp_path: Path) -> None:
    """msprof-analyze's `Stage` leaves out the receive operators (its `Bubble`), `Communication(Not Overlapped)`
    includes them: a stage-1 rank waiting 33 ms in receive had a step shorter than its exposed communication."""
    header = ["Step", "Type", "Index", "Computing", "Communication(Not Overlapped)", "Overlapped", "Communication",
              "Free", "Stage", "Bubble", "Communication(Not Overlapped and Exclude Receive)", "Preparing"]
    rows = []
    for rank in range(4):
        bubble = 33_000.0 if rank >= 2 else 0.0  # ranks 2-3: stage 1, waiting for stage 0's activations
        computing, comm_no, free = 60_000.0, 8_000.0 + bubble, 2_000.0
        rows.append([3, "rank", rank, computing, comm_no, 1_000.0, comm_no + 1_000.0, free,
                     computing + comm_no + free - bubble, bubble, comm_no - bubble, 500.0])
    out = tmp_path / "cluster_analysis_output"
    out.mkdir()
    (out / "cluster_step_trace_time.csv").write_text(
        "\n".join(",".join(str(v) for v in row) for row in [header, *rows]) + "\n")
    replay = load_replay([out], "job-pp", NOW)
    steps = {s.rank: s for s in _steps(replay)}
    for rank, step in steps.items():
        busy = step.duration_ms - (step.phases.comm_exposed_ms or 0.0)
        assert busy == pytest.approx(62.0), (rank, step.duration_ms, step.phases.comm_exposed_ms)
    assert steps[2].duration_ms == pytest.approx(103.0)  # Stage 70 ms + Bubble 33 ms
