"""`steplens demo --paced --alertmanager URL` (issue #46): the demo's incidents fire in a real Alertmanager while
the job runs at its own pace, resolve when it ends, under Prometheus' conventions; the demo writes its HTML report."""

from __future__ import annotations

import json
import re
import threading
import urllib.parse
import urllib.request
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from infra.launcher.alertmanager import AlertmanagerServer
from infra.settings import Settings
from steplens.demo import run

pytestmark = [pytest.mark.integration, pytest.mark.kafka, pytest.mark.alertmanager]


def _active(url: str, job: str) -> list[dict[str, Any]]:
    query = urllib.parse.urlencode({"filter": f'training_job="{job}"'})
    with urllib.request.urlopen(f"{url}/api/v2/alerts?{query}", timeout=10) as resp:
        alerts: list[dict[str, Any]] = json.loads(resp.read())
        return alerts


def test_a_paced_demo_fires_its_alerts_while_it_runs_and_resolves_them_after(
        kafka_settings: Settings, alertmanager_service: AlertmanagerServer, unique_name: str,
        tmp_path: Path) -> None:
    settings = replace(kafka_settings, home=tmp_path, topic_prefix=f"{unique_name}.", app_id=unique_name,
                       topic_partitions=1, clickhouse_url="", chdb_path=tmp_path / "chdb")
    job = f"demo-{unique_name}"
    seen: dict[str, dict[str, Any]] = {}  # alerts seen firing while the demo ran, by incident id
    done = threading.Event()

    def watch() -> None:
        while not done.wait(0.25):
            for alert in _active(alertmanager_service.url, job):
                if alert["status"]["state"] == "active":
                    seen.setdefault(alert["labels"]["incident_id"], alert)

    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    try:
        code = run(settings, steps=30, seed=7, use_server=False, paced=True, alertmanager=alertmanager_service.url,
                   job_id=job, reports_root=tmp_path / "reports")
    finally:
        done.set()
        watcher.join(10)
    assert code == 0  # rank 37 found, every step and dead letter landed
    # the straggler's alert: SLOW_RANK from its steps, or R4 when its kernel summaries showed the slow compute first
    firing = [a for a in seen.values() if a["labels"]["scope"] == "rank" and "rank 37" in a["annotations"]["summary"]]
    assert firing, f"no alert named the straggler while the demo ran: {list(seen)}"
    labels, annotations = firing[0]["labels"], firing[0]["annotations"]
    assert labels["training_job"] == job and "job" not in labels and labels["rule"] in ("SLOW_RANK", "R4")
    assert re.fullmatch(r"Steplens[A-Z][A-Za-z]+", labels["alertname"]), labels["alertname"]  # Prometheus' CamelCase
    assert annotations["runbook_url"] and annotations["description"]
    assert _active(alertmanager_service.url, job) == []  # the job ended: every alert resolved
    assert (tmp_path / "reports" / job / "report.html").stat().st_size > 10_000
