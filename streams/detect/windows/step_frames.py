"""One job's step windows: every rank's report of a step gathered into one frame over the world.

A frame is keyed by step index and holds a column per field over all ranks (NaN where a
rank has not reported). Closing policy, in this order:

- complete: every rank reported (and every rank that sends kernel summaries sent this step's:
  every reporting rank when the job's start declared summaries, contract 1.3, else the ranks
  seen sending them);
- settled: every missing rank has already reported a LATER step (its report for this step
  was lost or arrived out of contract; a rank's reports come in order, so it never will);
- timeout: no frame waits longer than an adaptive timeout, `timeout_factor` x the median of
  recent step times, clamped to [timeout_min_s, timeout_max_s], counted from its first report,
  and only while the decode stage is current with its input (`input_lagging` false: a
  backlog delays reports, it does not lose them);
- memory cap: at most `max_open_steps` frames stay open.

Frames are released in step order. Late data policy: a report for a step already released
is counted as late and dropped here (the landing worker still stores it); a duplicate
report for an open frame replaces the earlier one.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np
import numpy.typing as npt

from schemas.columns import DOMAINS, PHASES
from streams.detect.combine.chunks import Coded, KernelChunk, StepColumns, column

if TYPE_CHECKING:
    from streams.detect.windows.comm_columns import CommColumn

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]
BoolArray = npt.NDArray[np.bool_]

PHASE_INDEX = {name: i for i, name in enumerate(PHASES)}
SUMMARY_MISS_LIMIT = 3  # frames in a row a declared rank's summary timed out: it does not send them


@dataclass(slots=True)
class KernelRows:
    """Kernel-summary aggregates of one step, one row each in arrival order (a rank's later summary of the
    step after its earlier one): what R4–R9, the slow step and the slow link read, as columns."""

    rank: IntArray
    key: IntArray        # the name's index in the job's `StepFrames.names`
    cat: IntArray        # ... -1: none
    domain: IntArray
    direction: IntArray
    total_ns: FloatArray
    count: FloatArray    # NaN: not usable (chunks.KERNEL_NUMBERS)
    flops: FloatArray
    nbytes: FloatArray
    launch_mean_us: FloatArray
    launch_mad_us: FloatArray
    max_ns: FloatArray
    names: list[str]     # the job's names (shared, grows): what the indices point at

    @staticmethod
    def concat(parts: list[KernelRows]) -> KernelRows:
        if len(parts) == 1:
            return parts[0]
        cols = {name: np.concatenate([getattr(p, name) for p in parts]) for name in _KERNEL_COLUMNS}
        return KernelRows(**cols, names=parts[-1].names)

    def take(self, rows: IntArray) -> KernelRows:
        return KernelRows(**{name: getattr(self, name)[rows] for name in _KERNEL_COLUMNS}, names=self.names)

    def by_name(self, codes: IntArray, sel: BoolArray) -> list[tuple[str, IntArray]]:
        """The selected rows grouped by name (`codes`: a name index per row), names in order of first appearance."""
        idx = np.flatnonzero(sel)
        if idx.size == 0:
            return []
        mine = codes[idx]
        uniq, first = np.unique(mine, return_index=True)
        return [(self.names[int(code)], idx[mine == code]) for code in uniq[np.argsort(first)].tolist()]

    def code(self, name: str) -> int:
        """`name`'s index in `names`; -2 (no row's) when no summary of the job used it."""
        try:
            return self.names.index(name)
        except ValueError:
            return -2


@dataclass(slots=True)
class NameTable:
    """The names one job's kernel summaries used (keys, categories, domains, directions), each once."""

    names: list[str] = field(default_factory=list)
    index: dict[str, int] = field(default_factory=dict)

    def _codes(self, values: Sequence[str | None]) -> IntArray:
        index, names = self.index, self.names
        out = np.empty(len(values), dtype=np.int64)
        for i, value in enumerate(values):
            if value is None:
                out[i] = -1
                continue
            at = index.get(value)
            if at is None:
                at = index[value] = len(names)
                names.append(value)
            out[i] = at
        return out

    def codes(self, values: Sequence[str | None]) -> IntArray:
        """Each value's index in `names` (added when new, in order of first appearance), -1 for None; a column
        that mostly repeats a few values looks each distinct one up once, a dictionary-encoded one (`Coded`, a
        kernel chunk's from a frame) only its names."""
        if isinstance(values, Coded):
            return self._codes(values.names)[values.codes]
        distinct = dict.fromkeys(values)
        if len(distinct) == len(values):
            return self._codes(values)
        codes = dict(zip(distinct, self._codes(list(distinct)).tolist(), strict=True))
        return np.fromiter(map(codes.__getitem__, values), dtype=np.int64, count=len(values))

    def rows(self, chunk: KernelChunk) -> KernelRows:
        """A kernel chunk's aggregates as rows (each with its summary's rank)."""
        owner = np.repeat(np.arange(len(chunk["rank"])), np.asarray(chunk["entries"], dtype=np.int64))
        return KernelRows(
            rank=np.asarray(chunk["rank"], dtype=np.int64)[owner], key=self.codes(chunk["key"]),
            cat=self.codes(chunk["cat"]), domain=self.codes(chunk["domain"]),
            direction=self.codes(chunk["direction"]), total_ns=np.asarray(chunk["total_ns"], dtype=np.float64),
            count=_floats(column(chunk, "count")), flops=_floats(column(chunk, "flops")),
            nbytes=_floats(column(chunk, "bytes")), launch_mean_us=_floats(column(chunk, "launch_mean_us")),
            launch_mad_us=_floats(column(chunk, "launch_mad_us")), max_ns=_floats(column(chunk, "max_ns")),
            names=self.names)


_KERNEL_COLUMNS = ("rank", "key", "cat", "domain", "direction", "total_ns", "count", "flops", "nbytes",
                   "launch_mean_us", "launch_mad_us", "max_ns")


@dataclass(slots=True)
class Frame:
    """One step of one job, columns over ranks."""

    step: int
    first_ns: int
    seen: BoolArray
    start_ns: IntArray
    end_ns: IntArray
    phases: FloatArray   # (len(PHASES), world) ms
    samples: FloatArray
    batch: FloatArray
    kernel_ns: FloatArray  # monitored kernel time per rank (kernel summaries), NaN if none
    kernels: list[KernelRows] = field(default_factory=list)  # in arrival order; `kernel_rows` joins them
    closed_by: str = ""
    comm: dict[str, CommColumn] | None = None  # `comm_columns(frame)`'s cache; None: not built since kernels changed
    memory: FloatArray | None = None  # (3, world) peak, reserved, capacity bytes (contract 1.5); None: no rank sent

    @classmethod
    def empty(cls, step: int, world: int, now_ns: int) -> Frame:
        nan = np.full(world, np.nan)
        return cls(step=step, first_ns=now_ns, seen=np.zeros(world, dtype=bool),
                   start_ns=np.zeros(world, dtype=np.int64), end_ns=np.zeros(world, dtype=np.int64),
                   phases=np.full((len(PHASES), world), np.nan), samples=nan.copy(), batch=nan.copy(),
                   kernel_ns=nan.copy())

    def kernel_rows(self) -> KernelRows | None:
        """Every kernel-summary aggregate of the step as one block (None: no summary yet)."""
        if not self.kernels:
            return None
        if len(self.kernels) > 1:
            self.kernels = [KernelRows.concat(self.kernels)]
        return self.kernels[0]

    @property
    def duration_ms(self) -> FloatArray:
        out = np.full(self.seen.size, np.nan)
        out[self.seen] = (self.end_ns[self.seen] - self.start_ns[self.seen]) / 1e6
        return out

    @property
    def busy_ms(self) -> FloatArray:
        """Time each rank worked rather than waited: step time minus exposed communication."""
        comm = self.phases[PHASE_INDEX["comm_exposed_ms"]]
        busy: FloatArray = np.maximum(self.duration_ms - np.nan_to_num(comm), 0.0)
        return busy


@dataclass(slots=True)
class ReportedLayout:
    """What the job's reports say about its layout (learned from step events, grows with world)."""

    world: int = 0
    host_of: IntArray = field(default_factory=lambda: np.zeros(0, dtype=np.int64))
    hosts: list[str] = field(default_factory=list)
    host_index: dict[str, int] = field(default_factory=dict)
    groups: IntArray = field(default_factory=lambda: np.zeros((len(DOMAINS), 0), dtype=np.int64))
    sizes: IntArray = field(default_factory=lambda: np.zeros((len(DOMAINS), 0), dtype=np.int64))
    stage: IntArray = field(default_factory=lambda: np.zeros(0, dtype=np.int64))

    def grow(self, world: int) -> None:
        if world <= self.world:
            return
        extra = world - self.world
        self.host_of = np.concatenate([self.host_of, np.full(extra, -1, dtype=np.int64)])
        self.groups = np.concatenate([self.groups, np.full((len(DOMAINS), extra), -1, dtype=np.int64)], axis=1)
        self.sizes = np.concatenate([self.sizes, np.zeros((len(DOMAINS), extra), dtype=np.int64)], axis=1)
        self.stage = np.concatenate([self.stage, np.full(extra, -1, dtype=np.int64)])
        self.world = world

    def learn(self, cols: StepColumns) -> None:
        self.grow(cols.world)
        for host in dict.fromkeys(cols.host):  # new hosts numbered in order of first appearance
            if host not in self.host_index:
                self.host_index[host] = len(self.hosts)
                self.hosts.append(host)
        self.host_of[cols.rank] = np.fromiter(map(self.host_index.__getitem__, cols.host), dtype=np.int64,
                                              count=len(cols))
        self.groups[:, cols.rank] = cols.groups
        self.sizes[:, cols.rank] = cols.sizes
        self.stage[cols.rank] = cols.stage

    def ranks_of_host(self, host: int) -> IntArray:
        return np.flatnonzero(self.host_of == host)


@dataclass(slots=True)
class WindowParams:
    timeout_factor: float = 3.0
    timeout_min_s: float = 2.0
    timeout_max_s: float = 60.0
    max_open_steps: int = 64


@dataclass(slots=True)
class WindowStats:
    released: int = 0
    incomplete: int = 0
    late: int = 0
    duplicates: int = 0


@dataclass(slots=True)
class StepFrames:
    """Open frames of one job and the release cursor (plain data: snapshotted as a whole)."""

    params: WindowParams
    topo: ReportedLayout = field(default_factory=ReportedLayout)
    frames: dict[int, Frame] = field(default_factory=dict)
    next_step: int | None = None
    newest_of: IntArray = field(default_factory=lambda: np.zeros(0, dtype=np.int64))  # per rank newest step
    kernel_newest_of: IntArray = field(default_factory=lambda: np.zeros(0, dtype=np.int64))  # ... newest summary
    recent_ms: list[float] = field(default_factory=list)
    stats: WindowStats = field(default_factory=WindowStats)
    last_input_ns: int = 0
    input_lagging: bool = False  # the decode stage is behind: missing reports are still in the backlog
    summaries_declared: bool = False  # the job's start says every rank sends kernel summaries (1.3)
    summary_misses: IntArray = field(default_factory=lambda: np.zeros(0, dtype=np.int64))  # per rank, in a row
    # per rank: the engine's clock when its newest step report arrived, or when the job's reports first counted
    # it in the world (a rank not heard yet is silent since then, not since 1970); hung.py reads the silence
    heard_ns: IntArray = field(default_factory=lambda: np.zeros(0, dtype=np.int64))
    names: NameTable = field(default_factory=NameTable)  # what the kernel summaries' KernelRows index

    def _ensure_world(self, world: int, now_ns: int) -> None:
        """Every per-rank array covers `world` ranks (a job's reports may reveal its world in any order).

        A rank the job's reports count in the world but that has not reported yet (its partition read
        later than its peers': a rebalance, partitions added) is heard as of `now_ns`: its silence
        counts from there, so it is hung only after `hang_silence_s` of it, like any other rank.
        """
        self.topo.grow(world)
        world = self.topo.world
        self.newest_of = _grown(self.newest_of, world, -1)
        self.kernel_newest_of = _grown(self.kernel_newest_of, world, -1)
        self.summary_misses = _grown(self.summary_misses, world, 0)
        # a snapshot from before the field existed has no heard_ns: its ranks count as heard now
        self.heard_ns = _grown(getattr(self, "heard_ns", np.zeros(0, dtype=np.int64)), world, now_ns)

    def add_steps(self, cols: StepColumns, now_ns: int) -> None:
        self.topo.learn(cols)
        self._ensure_world(self.topo.world, now_ns)
        world = self.topo.world
        self.last_input_ns = now_ns
        np.maximum.at(self.newest_of, cols.rank, cols.step)
        self.heard_ns[cols.rank] = now_ns
        for step in np.unique(cols.step).tolist():
            sel = np.flatnonzero(cols.step == step)
            if self.next_step is not None and step < self.next_step:
                self.stats.late += int(sel.size)
                continue
            frame = self.frames.get(step)
            if frame is None:
                frame = self.frames[step] = Frame.empty(step, world, now_ns)
            elif frame.seen.size < world:
                self._grow_frame(frame, world)
            ranks = cols.rank[sel]
            self.stats.duplicates += int(frame.seen[ranks].sum())
            frame.seen[ranks] = True
            frame.start_ns[ranks] = cols.start_ns[sel]
            frame.end_ns[ranks] = cols.end_ns[sel]
            frame.phases[:, ranks] = cols.phases[:, sel]
            frame.samples[ranks] = cols.samples[sel]
            frame.batch[ranks] = cols.batch[sel]
            if cols.memory is not None:
                if frame.memory is None:
                    frame.memory = np.full((3, frame.seen.size), np.nan)
                frame.memory[:, ranks] = cols.memory[:, sel]

    def add_kernels(self, chunk: KernelChunk, now_ns: int) -> None:
        """Kernel summaries join their step's frame (R4–R9 evaluate on release).

        The chunk's `world`: the job's world as the summaries state it (contract: rank < world). Summaries
        can arrive before any step report of the job (their own topic, read in any order): they open the
        frame at that world and wait there for the steps, never dropped for it.
        """
        self._ensure_world(int(chunk.get("world") or 0), now_ns)
        world = self.topo.world
        rank = np.asarray(chunk["rank"], dtype=np.int64)
        step = np.asarray(chunk["step"], dtype=np.int64)
        entries = np.asarray(chunk["entries"], dtype=np.int64)
        if rank.size == 0:
            return
        inside = (rank >= 0) & (rank < world)
        self.stats.late += int((~inside).sum())  # a rank outside every world this job stated
        # these ranks send summaries: their frames wait for them
        np.maximum.at(self.kernel_newest_of, rank[inside], step[inside])
        self.summary_misses[rank[inside]] = 0
        keep = inside.copy()
        if self.next_step is not None:
            late = inside & (step < self.next_step)
            self.stats.late += int(late.sum())
            keep &= ~late
        if not keep.any():
            return
        owner = np.repeat(np.arange(rank.size), entries)  # each aggregate's summary
        rows = self.names.rows(chunk)
        sums = np.bincount(owner, weights=rows.total_ns, minlength=rank.size)  # each summary's monitored kernel time
        for s in np.unique(step[keep]).tolist():
            mine = keep & (step == s)
            frame = self.frames.get(s)
            if frame is None:
                frame = self.frames[s] = Frame.empty(s, world, now_ns)
            elif frame.seen.size < world:
                self._grow_frame(frame, world)
            frame.kernel_ns[rank[mine]] = sums[mine]  # a rank's later summary of the step replaces its earlier
            frame.kernels.append(rows if mine.all() else rows.take(np.flatnonzero(mine[owner])))
            frame.comm = None

    @staticmethod
    def _grow_frame(frame: Frame, world: int) -> None:
        fresh = Frame.empty(frame.step, world, frame.first_ns)
        n = frame.seen.size
        fresh.seen[:n] = frame.seen
        fresh.start_ns[:n] = frame.start_ns
        fresh.end_ns[:n] = frame.end_ns
        fresh.phases[:, :n] = frame.phases
        fresh.samples[:n] = frame.samples
        fresh.batch[:n] = frame.batch
        fresh.kernel_ns[:n] = frame.kernel_ns
        fresh.kernels = frame.kernels
        if frame.memory is not None:
            fresh.memory = np.full((3, world), np.nan)
            fresh.memory[:, :n] = frame.memory
            frame.memory = fresh.memory
        frame.comm = None
        frame.seen, frame.start_ns, frame.end_ns = fresh.seen, fresh.start_ns, fresh.end_ns
        frame.phases, frame.samples, frame.batch, frame.kernel_ns = (fresh.phases, fresh.samples, fresh.batch,
                                                                     fresh.kernel_ns)

    def timeout_ns(self) -> int:
        p = self.params
        seconds = p.timeout_factor * float(np.median(self.recent_ms)) / 1000.0 if self.recent_ms else p.timeout_min_s
        return int(min(max(seconds, p.timeout_min_s), p.timeout_max_s) * 1e9)

    def _closable(self, frame: Frame, now_ns: int, force: bool) -> str:
        if frame.seen.size and frame.seen.all() and self._kernels_in(frame):
            return "complete"
        missing = np.flatnonzero(~frame.seen)
        if missing.size and frame.seen.any() and (self.newest_of[missing] > frame.step).all():
            return "settled"
        if force:
            return "forced"
        if now_ns - frame.first_ns > self.timeout_ns():
            if self.input_lagging:
                frame.first_ns = now_ns  # a backlog is not a hang: wait again once the input is current
                return ""
            return "timeout"
        if len(self.frames) > self.params.max_open_steps * (4 if self.input_lagging else 1):
            return "capacity"  # while the input lags, frames wait longer for the reports still queued
        return ""

    def _kernels_in(self, frame: Frame) -> bool:
        """Every rank that sends kernel summaries has sent this step's, or already a later one.

        Summaries travel on their own topic; a frame complete in steps waits for them (R4–R9 and
        the slow-link scope read them, and judged on part of the hosts they see groups that are
        not there), up to the same timeout as missing steps. A job whose start declared them
        (1.3) awaits every reporting rank's summary: a backlog, or a partition read ahead, can
        deliver a job's steps long before its first summary. A declared rank whose summary was
        missing from SUMMARY_MISS_LIMIT frames in a row, closed on their timeout, is waited for
        only while the input lags (it does not send them after all: no timeout on every step).
        Otherwise which ranks send them is learned from the summaries seen.
        """
        world = frame.seen.size
        k = self.kernel_newest_of[:world]
        sends = k >= 0
        if self.summaries_declared:
            sends |= frame.seen & ((self.summary_misses[:world] < SUMMARY_MISS_LIMIT) | self.input_lagging)
        waiting = sends & (k <= frame.step) & np.isnan(frame.kernel_ns)
        return not bool(waiting.any())

    def _count_misses(self, frame: Frame) -> None:
        """A frame closed without some reporting ranks' summaries: one more miss each."""
        self.summary_misses[:frame.seen.size][frame.seen & np.isnan(frame.kernel_ns)] += 1

    def release(self, now_ns: int, force: bool = False) -> list[Frame]:
        """Frames ready to evaluate, in step order (`force`: everything, e.g. at job end)."""
        out: list[Frame] = []
        self._ensure_world(self.topo.world, now_ns)  # a snapshot from before a field existed may hold it short
        while self.frames:
            if self.next_step is None or self.next_step not in self.frames:
                self.next_step = min(self.frames)
            frame = self.frames[self.next_step]
            reason = self._closable(frame, now_ns, force)
            if not reason:
                break
            del self.frames[self.next_step]
            frame.closed_by = reason
            self.stats.released += 1
            if reason not in ("complete", "settled"):
                self.stats.incomplete += 1
                if self.summaries_declared and reason == "timeout":
                    self._count_misses(frame)
            if frame.seen.any():
                self.recent_ms.append(float(np.nanmax(frame.duration_ms)))
                del self.recent_ms[:-20]
            self.next_step += 1
            out.append(frame)
        return out


def _floats(values: list[float | None]) -> FloatArray:
    return np.asarray(values, dtype=np.float64)  # None (NaN on the wire) is NaN


def _grown(arr: IntArray, size: int, fill: int) -> IntArray:
    """`arr` extended to `size` entries with `fill` (unchanged when already that long)."""
    if arr.size >= size:
        return arr
    return np.concatenate([arr, np.full(size - arr.size, fill, dtype=arr.dtype)])
