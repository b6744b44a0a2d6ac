"""A real Prometheus with the shipped config and rules scrapes a real detect worker, and
SteplensWorkerDown fires once that worker crashes, and reaches the real Alertmanager.

Prometheus runs as infra/ starts it (infra/launcher/prometheus.py: 1 s scrapes and evaluations, the
rules' `for:` cut to 2 s); the worker writes its own target file where that Prometheus looks
(infra/scrape_targets.py), nobody lists its port by hand.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.parse
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from infra.launcher.alertmanager import AlertmanagerServer
from infra.launcher.prometheus import PrometheusServer
from infra.settings import REPO_ROOT, Settings

pytestmark = [pytest.mark.integration, pytest.mark.kafka, pytest.mark.prometheus, pytest.mark.alertmanager]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _api(prometheus: PrometheusServer, path: str, **query: str) -> Any:
    url = f"{prometheus.url}{path}?{urllib.parse.urlencode(query)}"
    with urllib.request.urlopen(url, timeout=10) as resp:
        body = json.loads(resp.read())
    assert body["status"] == "success", body
    return body["data"]


def _wait(what: str, check: Callable[[], Any], timeout: float, log: Path) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        found = check()
        if found:
            return found
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}; worker log:\n"
                                 f"{log.read_text(errors='replace')[-2000:] if log.exists() else '-'}")
        time.sleep(0.25)


def test_a_stopped_worker_fires_the_worker_down_alert(
    kafka_settings: Settings, prometheus_service: PrometheusServer, alertmanager_service: AlertmanagerServer,
    unique_name: str, tmp_path: Path
) -> None:
    port = _free_port()
    env = {**os.environ, "STEPLENS_HOME": str(tmp_path), "STEPLENS_SECRETS_DIR": str(kafka_settings.secrets_path),
           "STEPLENS_KAFKA_BOOTSTRAP": kafka_settings.kafka_bootstrap, "STEPLENS_TOPIC_PREFIX": f"{unique_name}.",
           "STEPLENS_APP_ID": unique_name, "STEPLENS_TOPIC_PARTITIONS": "1",
           "STEPLENS_DETECTION_METRICS_PORT": str(port),
           # the worker announces itself to this Prometheus: nobody writes its target by hand
           "STEPLENS_METRICS_TARGETS_DIR": str(prometheus_service.targets_dir), "STEPLENS_METRICS_HOST": "127.0.0.1"}
    log = tmp_path / "worker.log"
    with log.open("wb") as out:
        worker = subprocess.Popen([sys.executable, "-m", "streams", "worker", "--role", "detect"], cwd=REPO_ROOT,
                                  env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
    instance = f"127.0.0.1:{port}"
    selector = f'{{job="steplens",instance="{instance}"}}'
    target = prometheus_service.targets_dir / f"detect-127.0.0.1-{port}.json"
    try:
        _wait("the worker's own target file", target.exists, 60, log)

        def up() -> list[Any]:
            return [r for r in _api(prometheus_service, "/api/v1/query", query=f"up{selector}")["result"]
                    if r["value"][1] == "1"]

        [sample] = _wait("Prometheus to scrape the worker (up == 1)", up, 60, log)
        assert sample["metric"]["role"] == "detect"
        # the per-stage CPU series of the rules is recorded from the worker's process metrics
        cpu = f'steplens:process_cpu:rate1m{{role="detect",instance="127.0.0.1:{port}"}}'
        _wait("the per-stage CPU recording rule", lambda: _api(prometheus_service, "/api/v1/query",
                                                                query=cpu)["result"], 30, log)

        os.killpg(worker.pid, signal.SIGKILL)  # a crash: its target file stays, so its target goes down
        worker.wait(60)
        assert target.exists()

        def firing() -> list[Any]:
            alerts = _api(prometheus_service, "/api/v1/alerts")["alerts"]
            return [a for a in alerts if a["labels"].get("alertname") == "SteplensWorkerDown"
                    and a["labels"].get("instance") == instance and a["state"] == "firing"]

        [alert] = _wait("SteplensWorkerDown to fire", firing, 30, log)
        assert alert["labels"]["role"] == "detect" and alert["labels"]["severity"] == "critical"
        assert alert["labels"]["instance"] == instance

        def in_alertmanager() -> list[Any]:  # the shipped config sends alerts to Alertmanager
            query = urllib.parse.urlencode({"filter": f'instance="{instance}"'})
            with urllib.request.urlopen(f"{alertmanager_service.url}/api/v2/alerts?{query}", timeout=10) as resp:
                return [a for a in json.loads(resp.read()) if a["labels"]["alertname"] == "SteplensWorkerDown"]

        _wait("SteplensWorkerDown in Alertmanager", in_alertmanager, 30, log)
    finally:
        target.unlink(missing_ok=True)
        if worker.poll() is None:
            os.killpg(worker.pid, signal.SIGKILL)
            worker.wait()
