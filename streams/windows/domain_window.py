"""Step-index windows per communication group, closed on completeness or on the ranks' progress.

A group's window for step s collects one record per rank. It closes when all `size`
ranks have reported (the normal case). It closes incomplete only when every rank of the
group has already reported a step at least `lateness_steps` beyond s: each rank's events
arrive in order (they are keyed by rank), so a rank that has moved on will not send s
any more. Measuring lateness per rank, not against the newest step of the group, keeps
windows correct while a worker catches up on a backlog, when the input partitions are
far apart in step index. Ranks that stop reporting altogether are handled by `idle_ns`
(processing time since the window's last record), and `max_open_steps` bounds memory.

Late-data policy: a record for a window that has already closed is not merged into a new
window; it is counted in `stats.late` and left to the sink, which lands every valid step
event whatever its timing. A rank reporting a step twice while the window is open
replaces its record (counted in `stats.duplicates`), so replays are never double-counted.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from streams.records import MIN_GROUP_FOR_VERDICT, DomainStep, GroupStep

GroupKey = tuple[str, str, int]  # job, domain, group


@dataclass(slots=True)
class WindowStats:
    closed_complete: int = 0
    closed_incomplete: int = 0
    late: int = 0
    duplicates: int = 0


@dataclass(slots=True)
class _Window:
    size: int
    world: int
    records: dict[int, DomainStep] = field(default_factory=dict)
    last_arrival_ns: int = 0


@dataclass(slots=True)
class _Group:
    windows: dict[int, _Window] = field(default_factory=dict)
    newest_step: int = -1
    rank_newest: dict[int, int] = field(default_factory=dict)  # each rank's newest step
    closed: set[int] = field(default_factory=set)
    closed_floor: int = -1  # every step <= this is closed (pruned from `closed`)


@dataclass(frozen=True, slots=True)
class VerdictThresholds:
    wait_ratio: float = 0.05
    z: float = 3.0


class DomainStepWindow:
    """Pure processor: DomainStep records in, GroupStep summaries out."""

    def __init__(
        self, lateness_steps: int, idle_ns: int, thresholds: VerdictThresholds, max_open_steps: int = 512
    ) -> None:
        self._lateness = lateness_steps
        self._max_open = max_open_steps
        self._idle_ns = idle_ns
        self._thresholds = thresholds
        self._groups: dict[GroupKey, _Group] = {}
        self.stats = WindowStats()

    def open_windows(self) -> int:
        return sum(len(g.windows) for g in self._groups.values())

    def add(self, record: DomainStep, now_ns: int) -> list[GroupStep]:
        key = (record.job, record.domain, record.group)
        group = self._groups.setdefault(key, _Group())
        if record.step <= group.closed_floor or record.step in group.closed:
            self.stats.late += 1
            return []
        window = group.windows.get(record.step)
        if window is None:
            window = group.windows[record.step] = _Window(size=record.size, world=record.world)
        if record.rank in window.records:
            self.stats.duplicates += 1
        window.records[record.rank] = record
        window.last_arrival_ns = now_ns
        group.newest_step = max(group.newest_step, record.step)
        group.rank_newest[record.rank] = max(group.rank_newest.get(record.rank, -1), record.step)

        out: list[GroupStep] = []
        if len(window.records) >= window.size:
            out.append(self._close(key, group, record.step, complete=True))
        # every rank of the group has moved past these steps: what is missing will not come
        passed = min(group.rank_newest.values()) - self._lateness if len(group.rank_newest) >= window.size else -1
        oldest_allowed = group.newest_step - self._max_open
        for step in sorted(s for s in group.windows if s <= passed or s <= oldest_allowed):
            out.append(self._close(key, group, step, complete=False))
        return out

    def expire(self, now_ns: int) -> list[GroupStep]:
        """Close windows that have waited `idle_ns` without a new record."""
        out: list[GroupStep] = []
        for key, group in list(self._groups.items()):
            for step in sorted(group.windows):
                if now_ns - group.windows[step].last_arrival_ns >= self._idle_ns:
                    out.append(self._close(key, group, step, complete=False))
        return out

    def flush_job(self, job: str) -> list[GroupStep]:
        """Close every open window of `job` (it ended) and forget its groups."""
        out: list[GroupStep] = []
        for key in [k for k in self._groups if k[0] == job]:
            group = self._groups[key]
            for step in sorted(group.windows):
                out.append(self._close(key, group, step, complete=False))
            del self._groups[key]
        return out

    def _close(self, key: GroupKey, group: _Group, step: int, complete: bool) -> GroupStep:
        window = group.windows.pop(step)
        group.closed.add(step)
        floor = min(group.rank_newest.values(), default=-1) - self._lateness - 1
        if floor > group.closed_floor and all(s > floor for s in group.windows):
            group.closed = {s for s in group.closed if s > floor}
            group.closed_floor = floor
        if complete:
            self.stats.closed_complete += 1
        else:
            self.stats.closed_incomplete += 1
        return summarise(key, step, window, self._thresholds)


def summarise(key: GroupKey, step: int, window: _Window, thresholds: VerdictThresholds) -> GroupStep:
    """Hermes' within-domain comparison for one group-step (numpy over the group's ranks)."""
    job, domain, group_id = key
    records = sorted(window.records.values(), key=lambda r: r.rank)
    busy = np.fromiter((r.busy_ms for r in records), dtype=np.float64, count=len(records))
    durations = np.fromiter((r.duration_ms for r in records), dtype=np.float64, count=len(records))
    slowest = int(np.argmax(busy))
    busy_max = float(busy[slowest])
    median = float(np.median(busy))
    mean = float(busy.mean())
    mad = float(np.median(np.abs(busy - median)))
    sigma = max(1.4826 * mad, 0.005 * median, 1e-9)
    z = (busy_max - median) / sigma
    wait_ratio = 1.0 - mean / busy_max if busy_max > 0 else 0.0
    flagged = (
        len(records) >= MIN_GROUP_FOR_VERDICT
        and wait_ratio > thresholds.wait_ratio
        and z > thresholds.z
    )
    phase_names = sorted({name for r in records for name in r.phases})
    phase_max: dict[str, float] = {}
    phase_mean: dict[str, float] = {}
    excess_phase: str | None = None
    best_excess = 0.0
    for name in phase_names:
        values = np.array([r.phases.get(name, 0.0) for r in records], dtype=np.float64)
        phase_max[name] = float(values.max())
        phase_mean[name] = float(values.mean())
        if name != "comm_exposed_ms":
            excess = float(values[slowest] - np.median(values))
            if excess > best_excess:
                best_excess, excess_phase = excess, name
    return GroupStep(
        job=job, domain=domain, group=group_id, size=window.size, world=window.world, step=step,
        reported=len(records),
        missing=max(0, window.size - len(records)),
        start_ns=min(r.start_ns for r in records), end_ns=max(r.end_ns for r in records),
        step_ms=float(durations.max()), busy_max_ms=busy_max, busy_median_ms=median,
        busy_mean_ms=mean, wait_ratio=wait_ratio, slowest_rank=records[slowest].rank,
        slowest_host=records[slowest].host, slowest_z=z, flagged=flagged,
        slowest_excess_phase=excess_phase, phase_max=phase_max, phase_mean=phase_mean,
    )
