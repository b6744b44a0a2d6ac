"""Expected step time: a job's own kernels and layout through reference models, with overlap and sync.

Paper 001 (§IV-B, Algorithm 1) predicts a multi-device step by replaying each rank's work on
two kinds of stream and synchronising them, because the baseline "sum each stream, take the
largest" misses the time a device idles waiting for data it depends on (up to 60 % under):

- a kernel starts no earlier than its launch (the CPU's time) and than the end of the kernel
  before it on its stream;
- intra-rank sync: a kernel that depends on a collective waits for its end;
- inter-rank sync: a collective ends at the same moment on every rank of its group, its last
  member's start plus its transfer time; the step is the latest rank's end.

Two inputs, two compositions:

1. `predict_trace`, from profiler traces (`streams/profiles` parses them; collectives are
   matched across ranks by `analysis/ranks.match_collectives`). Execution traces give the
   paper its data dependencies; a profiler trace has none, so a kernel is taken to depend on
   the kernel of another stream of its rank that ended just before it started (an event wait
   shows exactly so). The CPU timeline is the job's own input: kernels keep their observed
   launch times, shifted by how much earlier or later the CPU's blocking syncs return with
   the predicted kernel times (a sync waits for the device); without launch times (an Ascend
   kernel_details dump) the idle gap before a kernel that no dependency explains is kept as
   host time. Kernel and collective durations come from a `DurationModel` fitted elsewhere
   (leave-one-out: another rank, another step) - never from the kernel itself.
2. `predict_summary_step`, from the always-on kernel summaries and step phases: per rank,
   expected compute = flops / P_bench, expected collective transfer = count x curve(bytes /
   count); the step's own host phases and unmodelled kernels stay as observed; the exposed
   tail (the DP gradient's last bucket, pipeline transfers) scales with its collectives'
   expected over observed transfer; the step is the slowest rank's busy time plus that tail.
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt

from streams.model.collectives import expected_transfer_ns, geomean_error
from streams.model.kernels import bench_for
from streams.model.reference import ReferenceModels
from streams.profiles.analysis.breakdown import breakdown_of, kernel_steps
from streams.profiles.analysis.ranks import match_collectives
from streams.profiles.model import COMMUNICATION, Kernels, Profile, Step

F64 = npt.NDArray[np.float64]
I64 = npt.NDArray[np.int64]

# a kernel that starts within this many µs after another stream's kernel ended waited for it
DEPENDENCY_WINDOW_US = 20.0
# host calls that block the CPU until the device catches up (Kineto runtime names)
_SYNC_CALL = re.compile(r"(Synchronize$)|(^cudaMemcpy$)|(^aclrtSynchronize)")
# a host step ending within this share of its duration after the device's last kernel waited for it
STEP_END_SYNC_SHARE = 0.05
# the communication stream of a rank whose dump names no streams
NO_STREAM_COMM = -2
# a collective kernel and the collective list's entry are one call when their starts are this close
_MATCH_SLACK_US = 50.0


# --- 1. profiler traces ----------------------------------------------------------------------------------------

@dataclass(slots=True)
class RankTasks:
    """One rank's device tasks inside profiler steps, in observed start order (µs on its clock)."""

    rank: int
    ts: F64
    dur: F64
    launch: F64  # host launch time, NaN where unknown
    stream: npt.NDArray[np.int32]
    kind: npt.NDArray[np.int8]
    step: I64  # index into `steps`
    name: list[str]
    nbytes: F64  # a collective's message size per rank, NaN where unknown
    coll: I64  # matched collective id (shared by every rank's kernel of one call), -1: none
    syncs: F64  # [n, 2] blocking host syncs (start, end)
    steps: list[Step]

    occurrence: I64 = field(default_factory=lambda: np.zeros(0, dtype=np.int64))
    end_sync: dict[int, tuple[float, float]] = field(default_factory=dict)  # step index -> its end's sync

    def key(self, i: int) -> str:
        """The duration model's key: the kernel name, and a collective's size when known."""
        b = self.nbytes[i]
        return f"{self.name[i]}|{b:.0f}" if math.isfinite(b) else self.name[i]

    def occurrence_key(self, i: int) -> str:
        """The key and which of its calls in the step this is: a kernel name serves many shapes (one
        GEMM kernel for every layer's projections), and the n-th call of a step is the same layer and
        shape on every rank and in every step of a job."""
        return f"{self.key(i)}#{int(self.occurrence[i])}" if self.occurrence.size else self.key(i)


def rank_tasks(profiles: Sequence[Profile]) -> list[RankTasks]:
    """Each rank's kernels inside its profiler steps, with launch times and cross-rank collective ids."""
    matched = match_collectives(list(profiles)).matched if len(profiles) > 1 else {}
    coll_of: dict[int, list[tuple[float, int]]] = {}
    for cid, per_rank in enumerate(matched.values()):
        if len(per_rank) >= 2:
            for r, (c_start, _dur) in per_rank.items():
                coll_of.setdefault(r, []).append((c_start, cid))
    out: list[RankTasks] = []
    for p in profiles:
        rank = p.rank if p.rank is not None else len(out)
        k = p.kernels
        steps = kernel_steps(p)
        if not p.steps:
            steps = np.zeros(len(k), dtype=np.int64)
        keep = np.flatnonzero(steps >= 0)
        keep = keep[np.argsort(k.ts[keep], kind="stable")]
        launch = _launch_times(p)[keep]
        ts, dur = k.ts[keep], k.dur[keep]
        kind = k.kind[keep]
        nbytes = np.full(keep.size, np.nan)
        coll = np.full(keep.size, -1, dtype=np.int64)
        comm = np.flatnonzero(kind == COMMUNICATION)
        if comm.size:
            comm_ts = ts[comm]
            for c in p.collectives:  # a collective's size, on the kernel that ran it
                j = int(np.argmin(np.abs(comm_ts - c.ts)))
                if abs(comm_ts[j] - c.ts) <= max(_MATCH_SLACK_US, 0.5 * c.dur):
                    nbytes[comm[j]] = c.bytes
            for c_ts, cid in coll_of.get(rank, []):
                j = int(np.argmin(np.abs(comm_ts - c_ts)))
                if abs(comm_ts[j] - c_ts) <= _MATCH_SLACK_US:
                    coll[comm[j]] = cid
        rt = p.runtime
        sync_rows = [i for i in range(len(rt)) if _SYNC_CALL.search(p.names[int(rt.name[i])])] if len(rt) else []
        sync_list = [(float(rt.ts[i]), float(rt.ts[i] + rt.dur[i])) for i in sync_rows]
        end_sync: dict[int, tuple[float, float]] = {}
        task_steps = steps[keep]
        for si, st in enumerate(p.steps):
            sel = task_steps == si
            if not sel.any():
                continue
            last = float((ts + dur)[sel].max())
            if last <= st.end <= last + STEP_END_SYNC_SHARE * st.dur:
                # the host's step ended right after the device's last kernel: it waited for it (loss.item(),
                # an optimizer sync). A blocking sync from its last launch (else the step's start) until then.
                launched = launch[sel][np.isfinite(launch[sel])]
                end_sync[si] = (float(launched.max()) if launched.size else st.ts, last)
                sync_list.append(end_sync[si])
        syncs = np.array(sorted(sync_list, key=lambda x: x[1])).reshape(-1, 2)
        # a dump without streams (torch_npu level 0: every task on -1): paper 001's two streams per rank,
        # collectives on their own, else a 70 ms all-reduce would hold every compute kernel behind it
        stream = k.stream[keep].copy()
        stream[(stream < 0) & (kind == COMMUNICATION)] = NO_STREAM_COMM
        task = RankTasks(rank=rank, ts=ts, dur=dur, launch=launch, stream=stream, kind=kind,
                         step=task_steps, end_sync=end_sync, name=[p.names[int(n)] for n in k.name[keep]],
                         nbytes=nbytes, coll=coll,
                         syncs=syncs, steps=list(p.steps) or [Step(0, float(k.ts.min(initial=0.0)), 0.0)])
        seen: dict[tuple[int, str], int] = {}
        occ = np.zeros(ts.size, dtype=np.int64)
        for i in range(ts.size):
            ok = (int(task.step[i]), task.key(i))
            occ[i] = seen.get(ok, 0)
            seen[ok] = int(occ[i]) + 1
        task.occurrence = occ
        out.append(task)
    return out


def _launch_times(p: Profile) -> F64:
    """Each kernel's launch call start (by correlation id), NaN where none."""
    k, r = p.kernels, p.runtime
    out = np.full(len(k), np.nan)
    if len(r) == 0 or len(k) == 0:
        return out
    valid = r.corr >= 0
    rc, rts = r.corr[valid], r.ts[valid]
    if rc.size == 0:
        return out
    order = np.argsort(rc, kind="stable")
    rc, rts = rc[order], rts[order]
    pos = np.minimum(np.searchsorted(rc, k.corr), rc.size - 1)
    found = (k.corr >= 0) & (rc[pos] == k.corr)
    out[found] = rts[pos[found]]
    return out


@dataclass(frozen=True, slots=True)
class DurationModel:
    """Kernel durations (µs) learned from other ranks or steps: by (name, size, n-th call in the step),
    by (name, size), by name, by kind, the first that knows the kernel.

    `fitted_on` says what it saw, so a prediction states its provenance.
    """

    by_occurrence: dict[str, float]
    by_key: dict[str, float]
    by_name: dict[str, float]
    by_kind: dict[int, float]
    fitted_on: str

    def predict(self, tasks: RankTasks) -> tuple[F64, npt.NDArray[np.int8]]:
        """Per kernel: its expected duration, and how it was found (3 call, 2 key, 1 name, 0 kind, -1 none)."""
        n = tasks.ts.size
        out = np.full(n, np.nan)
        how = np.full(n, -1, dtype=np.int8)
        for i in range(n):
            occ, key, name = tasks.occurrence_key(i), tasks.key(i), tasks.name[i]
            if occ in self.by_occurrence:
                out[i], how[i] = self.by_occurrence[occ], 3
            elif key in self.by_key:
                out[i], how[i] = self.by_key[key], 2
            elif name in self.by_name:
                out[i], how[i] = self.by_name[name], 1
            elif int(tasks.kind[i]) in self.by_kind:
                out[i], how[i] = self.by_kind[int(tasks.kind[i])], 0
        return out, how


def fit_durations(parts: Sequence[tuple[RankTasks, npt.NDArray[np.bool_]]], fitted_on: str) -> DurationModel:
    """Median durations of the selected kernels of each (tasks, mask)."""
    by_occ: dict[str, list[float]] = {}
    by_key: dict[str, list[float]] = {}
    by_name: dict[str, list[float]] = {}
    by_kind: dict[int, list[float]] = {}
    for tasks, mask in parts:
        for i in np.flatnonzero(mask).tolist():
            d = float(tasks.dur[i])
            by_occ.setdefault(tasks.occurrence_key(i), []).append(d)
            by_key.setdefault(tasks.key(i), []).append(d)
            by_name.setdefault(tasks.name[i], []).append(d)
            by_kind.setdefault(int(tasks.kind[i]), []).append(d)

    def med(d: dict[str, list[float]]) -> dict[str, float]:
        return {k: float(np.median(v)) for k, v in d.items()}

    kinds = {k: float(np.median(v)) for k, v in by_kind.items()}
    return DurationModel(med(by_occ), med(by_key), med(by_name), kinds, fitted_on)


@dataclass(frozen=True, slots=True)
class Schedule:
    """Predicted start and end (µs) of every task of every rank, and each rank's CPU shift at each task."""

    start: list[F64]
    end: list[F64]
    shift: list[F64]  # the CPU's predicted lateness (+) or earliness (-) at each task's launch


def _dependencies(t: RankTasks) -> I64:
    """Per task, the task of another stream it waited for (ended at most `DEPENDENCY_WINDOW_US` before
    it started), -1 where none."""
    n = t.ts.size
    end = t.ts + t.dur
    dep = np.full(n, -1, dtype=np.int64)
    best = np.full(n, -np.inf)
    for s in np.unique(t.stream).tolist():
        idx = np.flatnonzero(t.stream == s)
        order = idx[np.argsort(end[idx], kind="stable")]
        ends = end[order]
        pos = np.searchsorted(ends, t.ts + 1e-6, side="right") - 1
        ok = (pos >= 0) & (t.stream != s)
        cand = np.where(ok, order[np.maximum(pos, 0)], -1)
        cand_end = np.where(ok, ends[np.maximum(pos, 0)], -np.inf)
        better = ok & (cand_end >= t.ts - DEPENDENCY_WINDOW_US) & (cand_end > best)
        dep[better], best[better] = cand[better], cand_end[better]
    return dep


def simulate(tasks: Sequence[RankTasks], dur: Sequence[F64]) -> Schedule:
    """Algorithm 1 on every rank together: stream order, launch times, intra- and inter-rank sync.

    `dur[r][i]`: task i's expected duration on rank r; for a matched collective, its transfer (the
    call ends at the latest member's start plus the least of the members' expected times). A collective
    whose members are not all in `tasks` (ranks absent from the trace set) waits only for those
    present: the absent ranks are taken to arrive in time.
    """
    n_r = len(tasks)
    start = [np.full(t.ts.size, np.nan) for t in tasks]
    end = [np.full(t.ts.size, np.nan) for t in tasks]
    shift = [np.zeros(t.ts.size) for t in tasks]
    deps = [_dependencies(t) for t in tasks]
    prev_on_stream: list[I64] = []
    for t in tasks:
        prev = np.full(t.ts.size, -1, dtype=np.int64)
        last: dict[int, int] = {}
        for i, s in enumerate(t.stream.tolist()):
            prev[i] = last.get(s, -1)
            last[s] = i
        prev_on_stream.append(prev)
    members: dict[int, list[tuple[int, int]]] = {}
    for r, t in enumerate(tasks):
        for i in np.flatnonzero(t.coll >= 0).tolist():
            members.setdefault(int(t.coll[i]), []).append((r, i))
    obs_end = [t.ts + t.dur for t in tasks]
    cursor = [0] * n_r
    sync_cursor = [0] * n_r
    delta = [0.0] * n_r
    arrived: dict[int, dict[int, float]] = {}
    closed: dict[int, float] = {}  # calls closed without every member (lost events): their end

    def ready_time(r: int, i: int) -> float:
        t = tasks[r]
        # the CPU's blocking syncs before this launch move it by the device's predicted lateness
        host = t.launch[i] if math.isfinite(t.launch[i]) else t.ts[i]
        while sync_cursor[r] < t.syncs.shape[0] and t.syncs[sync_cursor[r], 1] <= host:
            s0, s1 = t.syncs[sync_cursor[r]]
            awaited = np.flatnonzero(obs_end[r][:i] <= s1 + 1.0)
            device = float(np.nanmax(end[r][awaited])) if awaited.size else -math.inf
            delta[r] = max(s0 + delta[r], device) - s1
            sync_cursor[r] += 1
        shift[r][i] = delta[r]
        ready = -math.inf
        p = int(prev_on_stream[r][i])
        if p >= 0:
            ready = float(end[r][p])
        if math.isfinite(t.launch[i]):
            ready = max(ready, t.launch[i] + delta[r])
        d = int(deps[r][i])
        if d >= 0:
            ready = max(ready, float(end[r][d]))
        if not math.isfinite(t.launch[i]):
            # no launch time: the observed idle before the task that neither its stream nor a dependency
            # explains is host time, kept
            explained = max(obs_end[r][p] if p >= 0 else -math.inf, obs_end[r][d] if d >= 0 else -math.inf)
            if math.isfinite(explained):
                ready = max(ready, (end[r][p] if p >= 0 else ready) + max(0.0, t.ts[i] - explained))
            else:
                ready = max(ready, t.ts[i])  # the first task of its rank: its observed start
        return ready if math.isfinite(ready) else float(t.ts[i])

    while True:
        progressed = False
        for r, t in enumerate(tasks):
            while cursor[r] < t.ts.size:
                i = cursor[r]
                cid = int(t.coll[i])
                if cid < 0:
                    start[r][i] = ready_time(r, i)
                    end[r][i] = start[r][i] + dur[r][i]
                    cursor[r] += 1
                    progressed = True
                    continue
                got = arrived.setdefault(cid, {})
                if r not in got:
                    start[r][i] = ready_time(r, i)
                    got[r] = float(start[r][i])
                    progressed = True
                if cid in closed:  # arrived after the call was closed without it: it runs on its own
                    end[r][i] = max(closed[cid], start[r][i] + dur[r][i])
                    cursor[r] += 1
                    continue
                if len(got) < len(members[cid]):
                    break  # wait for the group
                _finish(cid, members[cid], got, dur, end)
                cursor[r] += 1
                progressed = True
        if all(cursor[r] >= tasks[r].ts.size for r in range(n_r)):
            break
        if not progressed:  # members that never arrive (lost events): close the earliest open call
            open_ids = [int(tasks[r].coll[cursor[r]]) for r in range(n_r) if cursor[r] < tasks[r].ts.size]
            cid = min(open_ids, key=lambda c: min(arrived.get(c, {}).values(), default=math.inf))
            got = arrived.setdefault(cid, {})
            present = [(r, i) for r, i in members[cid] if r in got]
            _finish(cid, present, got, dur, end)
            for r, i in present:
                if cursor[r] == i:
                    cursor[r] += 1
            closed[cid] = float(end[present[0][0]][present[0][1]])
    return Schedule(start, end, shift)


def _finish(cid: int, group: list[tuple[int, int]], got: dict[int, float], dur: Sequence[F64],
            end: list[F64]) -> None:
    """Inter-rank sync: every member ends at the last arrival plus the call's transfer, the least of the
    members' expected times (a duration learned from a kernel holds that kernel's wait; the least-waiting
    member's is the closest to the transfer alone, as `comm_columns.transfer_ns` reads it)."""
    transfer = float(np.nanmin([dur[r][i] for r, i in group]))
    done = max(got.values()) + transfer
    for r, i in group:
        end[r][i] = done


@dataclass(frozen=True, slots=True)
class PhaseFigures:
    """One rank-step's phases, ms: compute, exposed communication, the rest (host, idle, memory)."""

    step_ms: float
    compute_ms: float
    comm_exposed_ms: float
    host_idle_ms: float


@dataclass(frozen=True, slots=True)
class StepPrediction:
    """Expected vs observed for one rank-step of a trace."""

    rank: int
    step: int
    observed: PhaseFigures
    expected: PhaseFigures
    baseline_ms: float  # max over streams of their summed expected durations (no sync): paper's baseline
    coverage: float  # share of the observed device time whose duration came from a name match
    host_bound: bool = False  # the observed step ended with the host's step, after its last kernel

    @property
    def error(self) -> float:
        return abs(self.expected.step_ms - self.observed.step_ms) / self.observed.step_ms


def _phases(t: RankTasks, sel: npt.NDArray[np.bool_], ts: F64, dur: F64, lo: float, hi: float) -> PhaseFigures:
    k = Kernels(ts[sel], np.maximum(dur[sel], 0.0), t.kind[sel], t.stream[sel], np.zeros(int(sel.sum()), np.int32),
                np.full(int(sel.sum()), -1, np.int64))
    b = breakdown_of(k, window=(lo, hi))
    span = hi - lo
    return PhaseFigures(span / 1e3, b.compute / 1e3, b.communication_not_overlapped / 1e3,
                        (span - b.compute - b.communication_not_overlapped) / 1e3)


def predict_trace(tasks: Sequence[RankTasks], dur: Sequence[F64], how: Sequence[npt.NDArray[np.int8]],
                  ) -> list[StepPrediction]:
    """Every rank-step's expected vs observed time and phases, given each task's expected duration.

    A step runs from its host start (the `ProfilerStep` annotation) to the later of its host end and
    its last kernel's end; predicted, both host ends move with the CPU's predicted shift. A host step
    that ended right after its last kernel (`RankTasks.end_sync`) waited for the device: predicted, it
    ends when the predicted device does (or the CPU's last launch, if later) plus the host's own tail.
    """
    sched = simulate(tasks, dur)
    out: list[StepPrediction] = []
    for r, t in enumerate(tasks):
        obs_end = t.ts + t.dur
        for si, step in enumerate(t.steps):
            sel = t.step == si
            if not sel.any():
                continue
            idx = np.flatnonzero(sel)
            shift_start = float(sched.shift[r][idx[0]])
            shift_end = float(sched.shift[r][idx[-1]])
            lo_obs, hi_obs = step.ts, max(step.end, float(obs_end[sel].max()))
            lo_exp = step.ts + (shift_start if si > 0 else 0.0)
            last_exp = float(sched.end[r][sel].max())
            if si in t.end_sync:
                s0, s1 = t.end_sync[si]
                shift_end = max(s0 + shift_end, last_exp) - s1
            hi_exp = max(step.end + shift_end, last_exp)
            observed = _phases(t, sel, t.ts, t.dur, lo_obs, hi_obs)
            expected = _phases(t, sel, sched.start[r], sched.end[r] - sched.start[r], lo_exp, hi_exp)
            sums = [float(np.nansum(dur[r][sel & (t.stream == s)])) for s in np.unique(t.stream[sel]).tolist()]
            named = sel & (how[r] >= 1)
            cover = float(t.dur[named].sum() / max(float(t.dur[sel].sum()), 1e-9))
            out.append(StepPrediction(t.rank, step.number, observed, expected, max(sums) / 1e3, cover,
                                      step.end >= float(obs_end[sel].max())))
    return out


def held_out_predictions(tasks: Sequence[RankTasks]) -> list[tuple[StepPrediction, str]]:
    """Every rank-step predicted by durations that never saw it, with what they were fitted on.

    Several ranks: leave-one-rank-out, the other ranks' durations for EVERY rank of the replay (were the
    partner's tasks given the target's durations, the target's own kernel times would come back through
    a collective's shared end). One rank: leave-one-step-out. One rank and one step: nothing (empty).
    """
    out: list[tuple[StepPrediction, str]] = []
    if len(tasks) > 1:
        for r, t in enumerate(tasks):
            others = [(o, np.ones(o.ts.size, dtype=bool)) for q, o in enumerate(tasks) if q != r]
            label = ("kernel durations of rank(s) " + ", ".join(str(o.rank) for o, _ in others)
                     + " of the same job, for every rank of the replay")
            model = fit_durations(others, label)
            pairs = [model.predict(q) for q in tasks]
            preds = predict_trace(tasks, [d for d, _ in pairs], [h for _, h in pairs])
            out += [(p, label) for p in preds if p.rank == t.rank]
        return out
    if not tasks or len(tasks[0].steps) < 2:
        return out
    one = tasks[0]
    label = "kernel durations of the same rank's other profiler steps (leave-one-step-out)"
    for s, step in enumerate(one.steps):
        d, h = fit_durations([(one, one.step != s)], label).predict(one)
        out += [(p, label) for p in predict_trace([one], [d], [h]) if p.step == step.number]
    return out


# --- 2. live kernel summaries ----------------------------------------------------------------------------------

@dataclass(slots=True)
class SummaryStep:
    """One step of a live job: every rank's kernel aggregates (one row each) and busy phases.

    Aggregate columns (one entry per row): `rank`, `key`, `cat` ("compute", "comm", other),
    `count`, `total_ns`, `flops` (the row's total), `nbytes` (the row's total), `op`, `link`,
    `group_size`, `in_phase` (its time sits inside the rank's busy phases, e.g. TP all-reduce
    inside forward/backward; else it runs in the step's exposed tail, e.g. the DP gradient
    all-reduce), `transfer_ns` (the row's time with the wait removed, `comm_columns.transfer_ns`;
    NaN: use `total_ns`). Per rank: `busy_ms` (the sum of its busy phases, host ones included),
    `host_ms` (data loading, GC, inter-step CPU). `step_ms`: the observed step time.
    """

    device_kind: str
    step_ms: float
    busy_ms: F64
    host_ms: F64
    rank: I64
    key: list[str]
    cat: list[str]
    count: F64
    total_ns: F64
    flops: F64
    nbytes: F64
    op: list[str | None]
    link: list[str | None]
    group_size: I64
    in_phase: npt.NDArray[np.bool_]
    transfer_ns: F64 = field(default_factory=lambda: np.zeros(0))


@dataclass(frozen=True, slots=True)
class SummaryPrediction:
    """Expected vs observed of one live step, ms (phases: the ranks' means)."""

    observed: PhaseFigures
    expected: PhaseFigures
    modelled_share: float  # share of the observed kernel time a reference model predicted
    worst: list[tuple[str, float]]  # (key, observed / expected transfer or compute), worst first


def expected_kernel_ns(s: SummaryStep, models: ReferenceModels) -> tuple[F64, npt.NDArray[np.bool_]]:
    """Per aggregate row: its expected time (ns) from the reference models, and whether a model gave it
    (compute: flops / the bench's p50; collective: count x curve(bytes / count)); else its observed time."""
    n = s.total_ns.size
    exp = np.asarray(s.total_ns, dtype=np.float64).copy()
    ok = np.zeros(n, dtype=bool)
    for i in range(n):
        if s.cat[i] == "compute" and s.flops[i] > 0:
            bench = bench_for(models, s.key[i], s.device_kind)
            if bench is not None and bench.p50 > 0:
                exp[i], ok[i] = s.flops[i] / bench.p50 * 1e9, True
        elif s.cat[i] == "comm" and s.count[i] > 0 and s.nbytes[i] > 0 and s.op[i] and s.link[i]:
            t = expected_transfer_ns(models, str(s.op[i]), str(s.link[i]), int(s.group_size[i]),
                                     float(s.nbytes[i] / s.count[i]))
            if math.isfinite(t):
                exp[i], ok[i] = s.count[i] * t, True
    return exp, ok


def expected_max_z(n: int) -> float:
    """E[max of n standard normals] (Blom's approximation; 0 for one): how far the slowest of n
    alike ranks runs above their typical one, in standard deviations."""
    if n <= 1:
        return 0.0
    p = (n - 0.375) / (n + 0.25)
    # Acklam-free: the inverse normal CDF by bisection on erf, exact enough for a spread
    lo, hi = 0.0, 8.0
    for _ in range(60):
        mid = (lo + hi) / 2.0
        if 0.5 * (1.0 + math.erf(mid / math.sqrt(2.0))) < p:
            lo = mid
        else:
            hi = mid
    return (lo + hi) / 2.0


def _rank_kernel_ns(s: SummaryStep, exp: F64, obs: F64) -> tuple[F64, F64]:
    """Per rank, the in-phase kernel time expected and observed (ns)."""
    world = s.busy_ms.size
    e, o = np.zeros(world), np.zeros(world)
    np.add.at(e, s.rank[s.in_phase], exp[s.in_phase])
    np.add.at(o, s.rank[s.in_phase], obs[s.in_phase])
    return e, o


def fit_rank_spread(steps: Sequence[SummaryStep], models: ReferenceModels) -> float:
    """The fleet's healthy rank-to-rank spread: the median over steps of the coefficient of variation
    across ranks of (observed / expected in-phase kernel time). Healthy ranks differ by a few percent
    (clocks, thermals, data), and a synchronous step runs at its slowest rank's pace, so a step composed
    of typical kernel times alone comes out short by the expected maximum of that spread."""
    cvs = []
    for s in steps:
        exp, obs = _observed_expected(s, models)[:2]
        e, o = _rank_kernel_ns(s, exp, obs)
        ok = e > 0
        if ok.sum() >= 2:
            ratio = o[ok] / e[ok]
            cvs.append(float(np.std(ratio) / np.mean(ratio)))
    return float(np.median(cvs)) if cvs else 0.0


def _observed_expected(s: SummaryStep, models: ReferenceModels) -> tuple[F64, F64, npt.NDArray[np.bool_]]:
    exp, ok = expected_kernel_ns(s, models)
    obs = np.where(np.isfinite(s.transfer_ns), s.transfer_ns, s.total_ns) if s.transfer_ns.size else s.total_ns
    exp = np.where(ok, exp, obs)  # what no model predicts stays as observed (its transfer, wait removed)
    return exp, obs, ok


def predict_summary_step(s: SummaryStep, models: ReferenceModels, rank_spread: float = 0.0) -> SummaryPrediction:
    """The coarse composition: per rank, busy = observed busy - observed + expected kernel time of the
    rows inside the phases, the typical rank's kernels raised by the expected maximum of the fleet's
    healthy `rank_spread` over the job's ranks (`fit_rank_spread`); the tail = observed tail x (expected
    / observed transfer of the rows outside the phases); step = max over ranks of busy + tail (the
    inter-rank sync at the step's end)."""
    exp, obs, ok = _observed_expected(s, models)
    world = s.busy_ms.size
    e_rank, o_rank = _rank_kernel_ns(s, exp, obs)
    busy_exp = s.busy_ms + (e_rank - o_rank) / 1e6 + e_rank / 1e6 * rank_spread * expected_max_z(world)
    out_rows = ~s.in_phase & np.array([c == "comm" for c in s.cat], dtype=bool)
    tail_obs = max(0.0, s.step_ms - float(s.busy_ms.max()))
    obs_out, exp_out = float(obs[out_rows].sum()), float(exp[out_rows].sum())
    tail_exp = tail_obs * (exp_out / obs_out) if obs_out > 0 else tail_obs
    step_exp = float(busy_exp.max()) + tail_exp
    comp = np.array([c == "compute" for c in s.cat], dtype=bool)
    comp_obs = np.zeros(world)
    comp_exp = np.zeros(world)
    np.add.at(comp_obs, s.rank[comp], s.total_ns[comp] / 1e6)
    np.add.at(comp_exp, s.rank[comp], exp[comp] / 1e6)
    observed = PhaseFigures(s.step_ms, float(comp_obs.mean()), float(np.mean(s.step_ms - s.busy_ms)),
                            float(s.host_ms.mean()))
    expected = PhaseFigures(step_exp, float(comp_exp.mean()), float(np.mean(step_exp - busy_exp)),
                            float(s.host_ms.mean()))
    total = float(s.total_ns.sum())
    share = float(s.total_ns[ok].sum() / total) if total > 0 else 0.0
    ratio: dict[str, list[float]] = {}
    for i in np.flatnonzero(ok & (exp > 0)).tolist():
        ratio.setdefault(s.key[i], []).append(float(obs[i] / exp[i]))
    worst = sorted(((k, float(np.median(v))) for k, v in ratio.items()), key=lambda kv: -kv[1])
    return SummaryPrediction(observed, expected, share, worst)


def step_time_error(expected_ms: Sequence[float], observed_ms: Sequence[float]) -> float:
    """The geomean relative error of expected against observed step times (`geomean_error`)."""
    return geomean_error(np.asarray(expected_ms, dtype=np.float64), np.asarray(observed_ms, dtype=np.float64))
