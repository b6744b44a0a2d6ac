"""Prometheus self-metrics of the workers, served over HTTP (prometheus-client).

One metrics object per worker, on its own registry (no global state), each with the
process collector (`process_cpu_seconds_total`, memory, open files: the per-stage CPU of
infra/launcher/prometheus/rules.yml). `DetectMetrics`: events in and out per topic, batch sizes,
per-rule evaluation time, open windows and incidents, late and bad input, snapshot writes,
lag of the internal topic. `LandMetrics`: messages, dead letters, consumer lag and the
commit clock (a batch read but not committed for long is a stalled landing).
`AlertsMetrics`: the Alertmanager bridge's posts and failures. `MitigateMetrics`: the mitigation
worker's rounds, the actions it recorded by verdict and level, and its scheduler's failures.
"""

from __future__ import annotations

import atexit
import socket
from dataclasses import dataclass
from pathlib import Path

from kafka.record import util as kafka_record_util
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, ProcessCollector, start_http_server

from infra.scrape_targets import target_file_name, write_target_file
from infra.settings import Settings


def kafka_has_c_crc32c() -> bool:
    """kafka-python computes CRC32C in pure Python (~10k events/s cap) unless `crc32c` is installed."""
    return getattr(kafka_record_util, "crc32c_c", None) is not None


def _registry() -> CollectorRegistry:
    """A worker's own registry, with the process metrics (CPU seconds, memory) of this process."""
    registry = CollectorRegistry()
    ProcessCollector(registry=registry)
    return registry


@dataclass(frozen=True, slots=True)
class Announce:
    """Where a worker serving metrics writes its Prometheus target file, and the host name it gives
    (infra/scrape_targets.py; settings ``metrics_targets_dir``, ``metrics_host``)."""

    targets_dir: Path
    host: str = ""

    @classmethod
    def from_settings(cls, settings: Settings) -> Announce:
        return cls(settings.metrics_targets_path, settings.metrics_host)


def serve(registry: CollectorRegistry, port: int, role: str, announce: Announce | None = None) -> Path | None:
    """Serve ``registry`` on ``port`` (all interfaces: Prometheus scrapes from elsewhere); 0 = off. With
    ``announce``, write this worker's target file and delete it at a clean exit (a crash keeps it: its
    target goes down and the worker-down alert fires). Returns the file."""
    if port <= 0:
        return None
    start_http_server(port, registry=registry)
    if announce is None:
        return None
    host = announce.host or socket.gethostname()
    path = write_target_file(announce.targets_dir, target_file_name(role, host, port), role, [f"{host}:{port}"])
    atexit.register(path.unlink, missing_ok=True)
    return path


class DetectMetrics:
    def __init__(self) -> None:
        self.registry = _registry()
        r = self.registry
        self.events_in = Counter("steplens_detect_events_in", "Messages consumed", ["topic"], registry=r)
        self.events_out = Counter("steplens_detect_events_out", "Messages produced", ["topic"], registry=r)
        self.bad = Counter("steplens_detect_bad_input", "Input skipped as out of contract", registry=r)
        self.late = Counter("steplens_detect_late", "Reports for steps already evaluated", registry=r)
        self.batch = Histogram("steplens_detect_batch_size", "Messages per take()", ["stage"], registry=r,
                               buckets=(1, 10, 100, 1000, 5000, 10000, 50000))
        self.rule_seconds = Counter("steplens_detect_rule_seconds", "Evaluation time per rule/scope", ["rule"],
                                    registry=r)
        self.open_windows = Gauge("steplens_detect_open_windows", "Open step frames", registry=r)
        self.open_incidents = Gauge("steplens_detect_open_incidents", "Open incidents", registry=r)
        self.jobs = Gauge("steplens_detect_jobs", "Jobs tracked by this worker", registry=r)
        self.snapshots = Counter("steplens_detect_snapshots", "State snapshots written", registry=r)
        self.snapshot_seconds = Counter("steplens_detect_snapshot_seconds", "CPU seconds spent encoding snapshots",
                                        registry=r)
        self.lag = Gauge("steplens_detect_partials_lag", "Chunks received but not yet acknowledged", registry=r)
        self.crc32c = Gauge("steplens_kafka_c_crc32c", "1 when kafka-python uses the C CRC32C", registry=r)
        self.crc32c.set(1.0 if kafka_has_c_crc32c() else 0.0)
        self._rule_seen: dict[str, float] = {}

    def serve(self, port: int, announce: Announce | None = None) -> Path | None:
        return serve(self.registry, port, "detect", announce)

    def add_rule_times(self, totals: dict[str, float]) -> None:
        """Engine keeps cumulative seconds per rule; export the increase since last call."""
        for rule, total in totals.items():
            delta = total - self._rule_seen.get(rule, 0.0)
            if delta > 0:
                self.rule_seconds.labels(rule).inc(delta)
            self._rule_seen[rule] = total


class LandMetrics:
    """The land loop's progress; `pending_since` is what SteplensLandCommitsStalled watches."""

    def __init__(self) -> None:
        self.registry = r = _registry()
        self.messages = Counter("steplens_land_messages", "Records landed (rows or dead letters)", registry=r)
        self.batches = Counter("steplens_land_batches", "Batches landed and committed", registry=r)
        self.dead_letters = Counter("steplens_land_dead_letters", "Records sent to the dead-letter topic",
                                    registry=r)
        self.commit_retries = Counter("steplens_land_commit_retries", "Commits retried while the broker was away",
                                      registry=r)
        self.last_commit = Gauge("steplens_land_last_commit_timestamp_seconds",
                                 "Unix time of the last committed batch", registry=r)
        self.pending_since = Gauge("steplens_land_pending_since_timestamp_seconds",
                                   "Unix time the oldest record read but not committed was read (0: none)",
                                   registry=r)
        self.lag = Gauge("steplens_land_consumer_lag", "Records behind the ends of the assigned partitions",
                         registry=r)

    def serve(self, port: int, announce: Announce | None = None) -> Path | None:
        return serve(self.registry, port, "land", announce)


class _ReaderMetrics:
    """A worker that reads low-volume topics whole (the bridge, the mitigation worker): what it read and what
    it skipped as none of its events, `steplens_<role>_events` and `_skipped`, served under its role."""

    role = ""

    def __init__(self, events_help: str, skipped_help: str) -> None:
        self.registry = _registry()
        self.events = Counter(f"steplens_{self.role}_events", events_help, registry=self.registry)
        self.skipped = Counter(f"steplens_{self.role}_skipped", skipped_help, registry=self.registry)

    def serve(self, port: int, announce: Announce | None = None) -> Path | None:
        return serve(self.registry, port, self.role, announce)


class AlertsMetrics(_ReaderMetrics):
    """The Alertmanager bridge: what it read, posted and failed to post."""

    role = "alerts"

    def __init__(self) -> None:
        super().__init__("Incident events read from the incidents topic",
                         "Records of the incidents topic that are no incident")
        r = self.registry
        self.posts = Counter("steplens_alerts_posts", "Alerts Alertmanager accepted (re-sends included)",
                             registry=r)
        self.post_failures = Counter("steplens_alerts_post_failures", "Posts Alertmanager did not accept",
                                     registry=r)
        self.firing = Gauge("steplens_alerts_firing", "Incidents firing (re-sent until resolved)", registry=r)
        self.last_post = Gauge("steplens_alerts_last_post_timestamp_seconds", "Unix time of the last accepted post",
                               registry=r)


class MitigateMetrics(_ReaderMetrics):
    """The mitigation worker: what it read, how often it weighed, what it recorded and did, and the scheduler
    commands that failed (a drain that cannot reach slurmctld is retried every round, never dropped)."""

    role = "mitigate"

    def __init__(self) -> None:
        super().__init__("Incidents, job events and actions read", "Records of its topics that are none of those")
        r = self.registry
        self.rounds = Counter("steplens_mitigate_rounds", "Rounds of weighing the open culprit incidents",
                              registry=r)
        self.actions = Counter("steplens_mitigate_actions", "Decisions recorded on the actions topic",
                               ["verdict", "level"], registry=r)
        self.scheduler_errors = Counter("steplens_mitigate_scheduler_errors",
                                        "Scheduler commands that failed (weighed again next round)", registry=r)
        self.open_incidents = Gauge("steplens_mitigate_open_incidents", "Open culprit incidents it weighs",
                                    registry=r)
        self.replaying = Gauge("steplens_mitigate_replaying", "1 while it reads its topics back after a start",
                               registry=r)
        self.last_round = Gauge("steplens_mitigate_last_round_timestamp_seconds", "Unix time of the last round",
                                registry=r)
