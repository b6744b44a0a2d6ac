"""Self-metrics are served in Prometheus format; kafka-python runs with its C CRC32C."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import urllib.request
from pathlib import Path

import pytest

from infra.settings import REPO_ROOT
from streams.metrics import Announce, DetectMetrics, kafka_has_c_crc32c


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
    assert "process_cpu_seconds_total" in body  # per-stage CPU (infra/launcher/prometheus/rules.yml)


def test_a_worker_serving_metrics_writes_its_own_prometheus_target(tmp_path: Path) -> None:
    port = _free_port()
    path = DetectMetrics().serve(port, Announce(tmp_path / "targets", "node-3"))
    assert path == tmp_path / "targets" / f"detect-node-3-{port}.json"
    assert json.loads(path.read_text()) == [{"targets": [f"node-3:{port}"], "labels": {"role": "detect"}}]
    assert DetectMetrics().serve(0, Announce(tmp_path / "off")) is None and not (tmp_path / "off").exists()


@pytest.mark.parametrize(("ending", "kept"), [("pass", False), ("os._exit(70)", True)])
def test_a_clean_exit_removes_the_target_and_a_crash_keeps_it(tmp_path: Path, ending: str, kept: bool) -> None:
    """Stopped on purpose: Prometheus forgets the worker. Crashed: its target goes down and the worker-down
    alert fires (infra/launcher/prometheus/rules.yml)."""
    port = _free_port()
    code = ("import os; from pathlib import Path; from streams.metrics import Announce, LandMetrics; "
            f"p = LandMetrics().serve({port}, Announce(Path({str(tmp_path)!r}), '127.0.0.1')); "
            f"assert p is not None and p.exists(); {ending}")
    done = subprocess.run([sys.executable, "-c", code], cwd=REPO_ROOT, check=False, timeout=60)
    assert done.returncode == (70 if kept else 0)  # it served and wrote its file before it ended
    assert (tmp_path / f"land-127.0.0.1-{port}.json").exists() is kept
