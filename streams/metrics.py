"""Prometheus self-metrics of the detect worker, served over HTTP (prometheus-client).

One `DetectMetrics` per worker, on its own registry (no global state): events in and out
per topic, batch sizes, per-rule evaluation time, open windows and incidents, late and
bad input, snapshot writes, consumer lag of the internal topic.
"""

from __future__ import annotations

from kafka.record import util as kafka_record_util
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, start_http_server


def kafka_has_c_crc32c() -> bool:
    """kafka-python computes CRC32C in pure Python (~10k events/s cap) unless `crc32c` is installed."""
    return getattr(kafka_record_util, "crc32c_c", None) is not None


class DetectMetrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry()
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
        self.lag = Gauge("steplens_detect_partials_lag", "Chunks received but not yet acknowledged", registry=r)
        self.crc32c = Gauge("steplens_kafka_c_crc32c", "1 when kafka-python uses the C CRC32C", registry=r)
        self.crc32c.set(1.0 if kafka_has_c_crc32c() else 0.0)
        self._rule_seen: dict[str, float] = {}

    def serve(self, port: int) -> None:
        if port > 0:
            start_http_server(port, registry=self.registry)

    def add_rule_times(self, totals: dict[str, float]) -> None:
        """Engine keeps cumulative seconds per rule; export the increase since last call."""
        for rule, total in totals.items():
            delta = total - self._rule_seen.get(rule, 0.0)
            if delta > 0:
                self.rule_seconds.labels(rule).inc(delta)
            self._rule_seen[rule] = total
