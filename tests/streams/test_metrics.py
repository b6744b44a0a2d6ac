"""Self-metrics are served in Prometheus format; kafka-python runs with its C CRC32C."""

from __future__ import annotations

import socket
import urllib.request

from streams.metrics import DetectMetrics, kafka_has_c_crc32c


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def test_kafka_python_uses_the_c_crc32c() -> None:
    assert kafka_has_c_crc32c(), "install the pinned crc32c package (pyproject)"


def test_metrics_are_served_over_http() -> None:
    metrics = DetectMetrics()
    metrics.events_in.labels("steplens.steps").inc(7)
    metrics.add_rule_times({"R3": 0.25})
    metrics.add_rule_times({"R3": 0.75})
    port = _free_port()
    metrics.serve(port)
    body = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10).read().decode()
    assert 'steplens_detect_events_in_total{topic="steplens.steps"} 7.0' in body
    assert 'steplens_detect_rule_seconds_total{rule="R3"} 0.75' in body
    assert "steplens_kafka_c_crc32c 1.0" in body
    assert "process_cpu_seconds_total" in body  # per-stage CPU (infra/prometheus/rules.yml)
