"""Workers started and stopped many times in a row: every start-up must rejoin, commit and judge right.

One cycle = a start-up of the detect and land workers (an operator's restart, a supervisor's
respawn), one small job sent through them, and a stop (SIGTERM or SIGKILL, alternating). Some
cycles add what a real fleet does meanwhile: a second detect worker joins mid-job and leaves
(a rebalance of both detect groups), or a scale-out: a second detect worker and more
partitions on the input topics, then the job (whose producer writes to the new partitions).
Every few cycles the deployment is fresh (new topics and groups: nothing to restore); the
others restore the snapshots the previous workers left.

After each cycle's last send, judged as an operator would:
- `lag_zero_s`: seconds until every consumer group of the workers (`-detect-decode`, `-detect`,
  `-land`) has committed every record of its topics (target: within `LAG_DEADLINE_S`);
- `slow_rank_incidents`: SLOW_RANK incidents naming the injected slow rank (exactly 1), and
  `other_incidents` (0);
- `decoded_twice`: step reports of the job on the internal partials topic beyond one per
  (rank, step): input the decode stage read twice (0: every batch of a caught-up worker was
  committed before the stop, so a start-up re-reads nothing);
- `lost` / `duplicates`: the job's events that never landed, and rows beyond one per key under
  FINAL (both 0).

Each cycle also records `other_rules` (rule, scope, ranks and steps of every other incident: why a
cycle failed, from the log alone) and `phase_s` (seconds per phase: start, job, lag_zero, incidents,
reports, stop, count; where the test's run time goes).

Used by tests/streams/test_restarts.py (10 start-ups, part of `make test`) and by `make soak`.
"""

from __future__ import annotations

import signal
import threading
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Any

from kafka.admin import KafkaAdminClient, NewPartitions

from bench.chaos import (
    DETECT_DECODE_TOPICS,
    LAND_TOPICS,
    Harness,
    Offsets,
    Rig,
    Sent,
    count,
    emit_job,
    log,
    messages,
    poll_until,
    read_alerts,
    role_groups,
)
from infra.clients import kafka_client_config
from streams.detect.combine import chunks as chunk_codec
from streams.topics_admin import DetectTopics

LAG_DEADLINE_S = 30.0


@dataclass(frozen=True)
class CyclePlan:
    """What one cycle does besides start, send and stop."""

    index: int
    fresh: bool           # a new deployment (topics, groups, no snapshots)
    stop_signal: int      # how the workers are stopped at the end
    second_detect: bool   # a second detect worker joins mid-job and leaves before the end
    grow_partitions: bool  # partitions are added to the input topics mid-job


def plan(cycles: int, fresh_every: int = 5) -> list[CyclePlan]:
    """The cycles of a run: SIGTERM and SIGKILL alternate; in each block of `fresh_every` the
    first is fresh, in the fourth a second detect worker joins mid-job, and the fifth is a
    scale-out: a second detect worker and two more partitions per input topic before the job."""
    out = []
    for i in range(cycles):
        k = i % fresh_every
        out.append(CyclePlan(index=i, fresh=k == 0, stop_signal=signal.SIGTERM if i % 2 == 0 else signal.SIGKILL,
                             second_detect=k in (3, 4), grow_partitions=k == 4))
    return out


@dataclass
class CycleResult:
    index: int
    fresh: bool
    stop_signal: str
    second_detect: bool
    grow_partitions: bool
    ready_s: float | None = None
    lag_zero_s: float | None = None
    slow_rank_incidents: int = 0
    other_incidents: int = 0
    other_rules: list[str] = field(default_factory=list)  # "RULE ranks" of each other incident: why, at a glance
    decoded_twice: int = 0
    step_reports: int = 0
    sent: int = 0                  # the job's valid events produced
    landed: int = 0                # ... of them in the deployment's database after the workers stopped
    dead_lettered: int = 0         # the deployment's dead letters (nothing malformed is sent: 0)
    lost: int | None = None        # the job's events never landed (after the workers stopped)
    duplicates: int | None = None  # rows beyond one per key under FINAL, in the deployment's database
    lagging_groups: dict[str, int] = field(default_factory=dict)
    phase_s: dict[str, float] = field(default_factory=dict)  # where the cycle's time went (the test's run time)
    exit_codes: dict[str, int | None] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return (self.lag_zero_s is not None and self.lag_zero_s <= LAG_DEADLINE_S and self.slow_rank_incidents == 1
                and self.other_incidents == 0 and self.decoded_twice == 0 and self.lost == 0
                and self.duplicates == 0 and self.dead_lettered == 0)

    def as_dict(self) -> dict[str, Any]:
        return {**asdict(self), "ok": self.ok}


def groups(rig: Rig) -> dict[str, list[str]]:
    """Every consumer group the workers commit in, with the topics it reads."""
    return {**role_groups(rig, "detect"), **role_groups(rig, "land")}


def uncommitted(rig: Rig, offsets: Offsets) -> dict[str, int]:
    """Records per group not committed yet (0 for each when caught up)."""
    out = {}
    for group, names in groups(rig).items():
        ends = offsets.ends(names)
        done = offsets.committed(group)
        out[group] = sum(max(0, end - done.get(tp, 0)) for tp, end in ends.items())
    return out


def step_reports(rig: Rig, job: str) -> tuple[int, int]:
    """(step reports of `job` on the partials topic, distinct (rank, step) among them)."""
    total = 0
    seen: set[tuple[int, int]] = set()
    for msg in messages(rig, DetectTopics(rig.settings.topic_prefix).partials, idle_ms=2000):
        try:
            chunk = chunk_codec.loads(msg.value)
        except ValueError:
            continue
        if not chunk_codec.is_steps(chunk) or chunk.get("job") != job:
            continue
        pairs = list(zip(chunk["rank"], chunk["step"], strict=True))
        total += len(pairs)
        seen.update(pairs)
    return total, len(seen)


def grow_partitions(rig: Rig, by: int = 2) -> None:
    """Add `by` partitions to every input topic (a scale-out while the workers run)."""
    admin = KafkaAdminClient(**kafka_client_config(rig.settings, "admin"))
    try:
        names = [getattr(rig.topics, n) for n in sorted(set(DETECT_DECODE_TOPICS) | set(LAND_TOPICS))]
        described = admin.describe_topics(names)
        counts = {d["name"]: len(d["partitions"]) for d in described}
        admin.create_partitions({n: NewPartitions(counts[n] + by) for n in names})
    finally:
        admin.close()


class _Laps:
    """Seconds since the previous lap, recorded under each lap's name."""

    def __init__(self, into: dict[str, float]) -> None:
        self.into = into
        self.t = time.monotonic()

    def __call__(self, name: str) -> None:
        now = time.monotonic()
        self.into[name] = round(now - self.t, 1)
        self.t = now


class RestartRun:
    """Cycles on one harness; a fresh cycle starts a new rig (topics, groups, database)."""

    def __init__(self, harness: Harness, steps: int = 30, pace_s: float = 0.05,
                 slow_rank: int = 3, on_cycle: Callable[[CycleResult], None] | None = None) -> None:
        self.harness = harness
        self.steps = steps
        self.pace_s = pace_s
        self.slow_rank = slow_rank
        self.on_cycle = on_cycle
        self.rig: Rig | None = None
        self.offsets: Offsets | None = None
        self.deployments = 0

    def _fresh(self) -> tuple[Rig, Offsets]:
        if self.offsets is not None:
            self.offsets.close()
        self.deployments += 1
        self.rig = self.harness.rig(f"restarts{self.deployments}")
        self.offsets = Offsets(self.rig.settings)
        return self.rig, self.offsets

    def cycle(self, p: CyclePlan) -> CycleResult:
        rig, offsets = self._fresh() if p.fresh or self.rig is None or self.offsets is None else (self.rig,
                                                                                                 self.offsets)
        result = CycleResult(p.index, p.fresh, signal.Signals(p.stop_signal).name, p.second_detect,
                             p.grow_partitions)
        t0 = time.monotonic()
        lap = _Laps(result.phase_s)
        rig.start("detect")
        rig.start("land")
        if rig.wait_ready(("detect", "land")):
            result.ready_s = round(time.monotonic() - t0, 1)
        lap("start")
        if p.grow_partitions:  # a scale-out: a second detect worker and more partitions, then the job
            rig.start("detect", name="detect2")
            rig.wait_ready(("detect2",))
            grow_partitions(rig)
            offsets.reset()  # its metadata must see the new partitions
        job = self.harness.job(f"r{self.deployments}c{p.index}", steps=self.steps, slow_rank=self.slow_rank)
        sent = Sent()
        midway = threading.Event()
        sender = threading.Thread(target=emit_job, args=(rig, job, sent, self.pace_s),
                                  kwargs={"on_step": lambda i: midway.set() if i == self.steps // 3 else None},
                                  daemon=True)
        sender.start()  # its producer's metadata is fresh: the job's ranks land on the new partitions too
        if p.second_detect and not p.grow_partitions:
            midway.wait(60)
            rig.start("detect", name="detect2")
            rig.wait_ready(("detect2",))
        sender.join(600)
        last_send = time.monotonic()
        lap("job")
        if p.second_detect:  # leaves after the job's last send, while its input may still be in flight
            result.exit_codes["detect2"] = rig.kill("detect2", signal.SIGTERM)
            rig.procs.pop("detect2")
        caught = poll_until(lambda: not any(uncommitted(rig, offsets).values()), LAG_DEADLINE_S * 3, every=0.5)
        if caught:
            result.lag_zero_s = round(time.monotonic() - last_send, 1)
        else:
            result.lagging_groups = {g: n for g, n in uncommitted(rig, offsets).items() if n}
        lap("lag_zero")
        # incidents: detect publishes the slow rank's incident once its windows are judged
        poll_until(lambda: self._judge_incidents(rig, job.job_id, result), 20.0, every=1.0)
        lap("incidents")
        total, distinct = step_reports(rig, job.job_id)
        result.step_reports = total
        result.decoded_twice = total - distinct
        lap("reports")
        result.exit_codes.update(rig.kill_all(("detect", "land"), p.stop_signal))
        lap("stop")
        landed = count(rig, sent, {self.slow_rank}, job.job_id)  # the sink is free once land stopped
        result.lost, result.duplicates = landed["lost"], landed["duplicates"]
        result.sent, result.landed, result.dead_lettered = landed["sent"], landed["landed"], landed["dead_lettered"]
        lap("count")
        log(f"cycle {p.index}: {result.as_dict()}")
        if self.on_cycle is not None:
            self.on_cycle(result)
        return result

    def _judge_incidents(self, rig: Rig, job: str, result: CycleResult) -> bool:
        alerts, _ = read_alerts(rig, job)
        ids_slow = {a.incident_id for a in alerts if "SLOW_RANK" in (a.rules or [a.rule])
                    and self.slow_rank in a.ranks}
        ids_other = {a.incident_id for a in alerts} - ids_slow
        result.slow_rank_incidents = len(ids_slow)
        result.other_incidents = len(ids_other)
        firsts = {a.incident_id: a for a in reversed(alerts) if a.incident_id in ids_other}
        result.other_rules = sorted(f"{'+'.join(a.rules or [a.rule])} {a.scope} ranks {a.ranks[:8]} "
                                   f"steps {a.step_first}-{a.step_last}" for a in firsts.values())
        return len(ids_slow) >= 1

    def run(self, plans: list[CyclePlan]) -> list[CycleResult]:
        try:
            return [self.cycle(p) for p in plans]
        finally:
            if self.rig is not None:
                self.rig.stop()
            if self.offsets is not None:
                self.offsets.close()
