"""The bridge against the real broker and a real Alertmanager (Debian's, started by infra/).

Incidents go onto a per-test incidents topic as detect writes them (keyed by job); the
bridge runs with `once` (until everything on the topic is posted and committed); the
alerts are read back through Alertmanager's v2 API.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
import urllib.parse
import urllib.request
from dataclasses import replace
from typing import Any

import pytest
from kafka import KafkaConsumer, KafkaProducer, TopicPartition

from infra.clients import kafka_client_config
from infra.launcher.alertmanager import AlertmanagerServer
from infra.settings import REPO_ROOT, Settings
from schemas import Incident, MitigationAction, Topics, job_key
from schemas.codec import encode
from steplens.demo import build_job
from streams.alerts.bridge import AlertBridge, alerts_group
from streams.topics_admin import ensure_topics
from tests.sinks.samples import incident
from tests.streams.helpers import incidents, run_engine

pytestmark = [pytest.mark.integration, pytest.mark.kafka, pytest.mark.alertmanager]


def _settings(kafka_settings: Settings, name: str) -> Settings:
    settings = replace(kafka_settings, topic_prefix=f"{name}.", app_id=name, topic_partitions=2)
    ensure_topics(settings, Topics(settings.topic_prefix), 2)
    return settings


def _produce(settings: Settings, events: list[Incident]) -> None:
    producer = KafkaProducer(**kafka_client_config(settings, "admin"), acks="all")
    try:
        for event in events:
            producer.send(Topics(settings.topic_prefix).incidents, key=job_key(event.job), value=encode(event))
        producer.flush(timeout=30)
    finally:
        producer.close()


def _get(url: str, path: str, **query: Any) -> Any:
    full = f"{url}{path}?{urllib.parse.urlencode(query, doseq=True)}"
    with urllib.request.urlopen(full, timeout=10) as resp:
        return json.loads(resp.read())


def _alerts(url: str, job: str) -> dict[str, dict[str, Any]]:
    """Active alerts of `job` by incident id (asserting one alert per incident)."""
    alerts = _get(url, "/api/v2/alerts", filter=f'training_job="{job}"')
    ids = [a["labels"]["incident_id"] for a in alerts]
    assert len(ids) == len(set(ids)), f"two alerts for one incident: {ids}"
    return {a["labels"]["incident_id"]: a for a in alerts}


def _committed(settings: Settings) -> dict[int, int | None]:
    consumer = KafkaConsumer(**kafka_client_config(settings, "admin"), group_id=alerts_group(settings),
                             enable_auto_commit=False)
    try:
        topic = Topics(settings.topic_prefix).incidents
        return {p: consumer.committed(TopicPartition(topic, p)) for p in sorted(consumer.partitions_for_topic(topic))}
    finally:
        consumer.close()


def _pair(job: str) -> tuple[Incident, Incident]:
    now = time.time_ns()
    a = incident(incident_id=f"{job}-a", job=job, ranks=[3], host="node-1", detected_ns=now,
                 summary="rank 3 is slow", cause="straggler", suggestion="check node-1")
    b = incident(incident_id=f"{job}-b", job=job, ranks=[5], host="node-2", detected_ns=now,
                 summary="rank 5 is slow", cause="straggler", suggestion="check node-2")
    return a, b


def test_incidents_appear_grouped_update_resolve_and_survive_a_restart_without_duplicates(
    kafka_settings: Settings, alertmanager_service: AlertmanagerServer, unique_name: str
) -> None:
    settings = _settings(kafka_settings, unique_name)
    url = alertmanager_service.url
    job = unique_name
    a, b = _pair(job)
    _produce(settings, [a, b])

    first = AlertBridge(settings, url, once=True).run()
    assert (first.events, first.replayed, first.posted, first.post_failures) == (2, 0, 2, 0)
    alerts = _alerts(url, job)
    assert sorted(alerts) == [a.incident_id, b.incident_id]
    got = alerts[a.incident_id]
    assert got["labels"] == {"alertname": "SteplensSlowRank", "rule": "SLOW_RANK", "training_job": job,
                             "scope": "rank", "severity": "warning", "incident_id": a.incident_id, "host": "node-1",
                             "rank": "3", "group": "dp/1", "device": "3"}
    assert got["annotations"]["runbook_url"].endswith("docs/runbooks.md#slow_rank")
    assert got["annotations"]["description"].startswith("rank 3 is slow\n")
    assert got["annotations"]["summary"] == "rank 3 is slow"
    assert got["annotations"]["cause"] == "straggler" and got["annotations"]["suggestion"] == "check node-1"
    assert got["annotations"]["report"] == f"steplens incidents --job {job} --rule SLOW_RANK"
    assert got["status"]["state"] == "active"
    # grouped by rule and training job: one group holding both
    groups = [g for g in _get(url, "/api/v2/alerts/groups", filter=f'training_job="{job}"')]
    assert [(g["labels"], len(g["alerts"])) for g in groups] == [
        ({"alertname": "SteplensSlowRank", "training_job": job}, 2)]
    assert {r["name"] for a in alerts.values() for r in a["receivers"]} == {"steplens-training"}

    # a worsens (an update: severity and summary change), b resolves
    later = time.time_ns()
    _produce(settings, [replace(a, state="update", severity="critical", summary="rank 3 is slower",
                                detected_ns=later),
                        replace(b, state="resolved", summary="rank 5 recovered", detected_ns=later)])
    second = AlertBridge(settings, url, once=True).run()
    assert (second.replayed, second.events) == (2, 2)
    alerts = _alerts(url, job)
    assert sorted(alerts) == [a.incident_id]  # b resolved: its endsAt passed, no longer active
    assert alerts[a.incident_id]["labels"]["severity"] == "warning"  # labels fixed by the first event ...
    assert alerts[a.incident_id]["annotations"]["severity"] == "critical"  # ... the news is in annotations
    assert alerts[a.incident_id]["annotations"]["summary"] == "rank 3 is slower"

    # a restart (through the CLI) with nothing new: the book is rebuilt from the topic; a is refreshed,
    # b stays resolved
    env = {**os.environ, "STEPLENS_KAFKA_BOOTSTRAP": settings.kafka_bootstrap,
           "STEPLENS_SECRETS_DIR": str(settings.secrets_path), "STEPLENS_TOPIC_PREFIX": settings.topic_prefix,
           "STEPLENS_APP_ID": settings.app_id, "STEPLENS_ALERTMANAGER_URL": url}
    third = subprocess.run([sys.executable, "-m", "steplens.cli", "alerts", "forward", "--once"], cwd=REPO_ROOT,
                           env=env, capture_output=True, text=True, timeout=60, check=False)
    assert third.returncode == 0, third.stderr[-3000:]
    assert "0 incident events read (4 replayed), 1 alerts posted, 0 posts retried" in third.stderr
    assert sorted(_alerts(url, job)) == [a.incident_id]
    assert sum(o or 0 for o in _committed(settings).values()) == 4  # everything read is committed


def test_an_alertmanager_outage_delays_the_alerts_and_drops_none(
    kafka_settings: Settings, alertmanager_service: AlertmanagerServer, unique_name: str
) -> None:
    settings = _settings(kafka_settings, unique_name)
    url = alertmanager_service.url
    a, b = _pair(unique_name)
    _produce(settings, [a, b])
    alertmanager_service.stop()
    try:
        bridge = AlertBridge(settings, url, once=True, post_backoff_s=(0.2, 0.5))
        thread = threading.Thread(target=bridge.run, daemon=True)
        thread.start()
        deadline = time.monotonic() + 30
        while bridge.stats.post_failures < 3:  # it keeps trying ...
            assert time.monotonic() < deadline and thread.is_alive(), "the bridge gave up or never tried"
            time.sleep(0.05)
        assert set(_committed(settings).values()) == {None}  # ... and commits nothing meanwhile
    finally:
        alertmanager_service.start()
    thread.join(60)
    assert not thread.is_alive()
    assert (bridge.stats.events, bridge.stats.posted) == (2, 2)
    assert sorted(_alerts(url, unique_name)) == [a.incident_id, b.incident_id]
    assert sum(o or 0 for o in _committed(settings).values()) == 2


def test_the_demo_jobs_incidents_appear_grouped_and_resolve(
    kafka_settings: Settings, alertmanager_service: AlertmanagerServer, unique_name: str
) -> None:
    """`make demo`'s job (straggler, data stall, GC storm) through the detection engine, its incident
    events through the bridge: first everything but the resolutions, then those."""
    settings = _settings(kafka_settings, unique_name)
    url = alertmanager_service.url
    events = [e for e in incidents(run_engine(build_job(unique_name, steps=120, seed=7))) if isinstance(e, Incident)]
    ids = {e.incident_id for e in events}
    rules = {e.incident_id: e.rule for e in events}
    assert sorted(rules.values()) == ["SLOW_RANK", "SLOW_STEP", "SLOW_STEP"]  # the demo's three faults

    _produce(settings, [e for e in events if e.state != "resolved"])
    AlertBridge(settings, url, once=True).run()
    assert set(_alerts(url, unique_name)) == ids
    groups = _get(url, "/api/v2/alerts/groups", filter=f'training_job="{unique_name}"')
    assert sorted((g["labels"]["alertname"], len(g["alerts"])) for g in groups) == [("SteplensSlowRank", 1),
                                                                                     ("SteplensSlowStep", 2)]
    [straggler] = [a for a in _alerts(url, unique_name).values() if a["labels"]["rule"] == "SLOW_RANK"]
    assert straggler["labels"]["rank"] == "37" and straggler["labels"]["host"] == "node-4"

    _produce(settings, [e for e in events if e.state == "resolved"])
    AlertBridge(settings, url, once=True).run()
    assert _alerts(url, unique_name) == {}  # every incident resolved: no alert of the job is active


def test_routes_on_training_job_and_on_the_scrape_job_stay_apart(
    kafka_settings: Settings, alertmanager_service: AlertmanagerServer, unique_name: str
) -> None:
    """An incident's alert reaches the route matching `training_job`; steplens' own worker alert,
    labelled `job="steplens"` as Prometheus labels its scrape job, reaches the workers' route only
    (with the training job under `job`, as before, a route on `job` took both)."""
    settings = _settings(kafka_settings, unique_name)
    url = alertmanager_service.url
    a, _ = _pair(unique_name)
    _produce(settings, [a])
    AlertBridge(settings, url, once=True).run()
    worker = [{"labels": {"alertname": "SteplensWorkerDown", "job": "steplens", "instance": f"{unique_name}:9465",
                          "severity": "critical"},
               "annotations": {"summary": "a steplens worker is down"}}]
    request = urllib.request.Request(f"{url}/api/v2/alerts", data=json.dumps(worker).encode(), method="POST",
                                     headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=10) as resp:
        assert resp.status == 200
    [incident_alert] = _alerts(url, unique_name).values()
    assert [r["name"] for r in incident_alert["receivers"]] == ["steplens-training"]
    assert "job" not in incident_alert["labels"]
    [worker_alert] = _get(url, "/api/v2/alerts", filter=f'instance="{unique_name}:9465"')
    assert [r["name"] for r in worker_alert["receivers"]] == ["steplens-workers"]


def test_a_mitigation_action_is_an_alert_until_it_is_undone(
    kafka_settings: Settings, alertmanager_service: AlertmanagerServer, unique_name: str
) -> None:
    """The actions topic beside the incidents: a drain done is a `SteplensMitigation` alert naming the action and
    the command that undoes it; the undo record ends it."""
    settings = _settings(kafka_settings, unique_name)
    url = alertmanager_service.url
    job = unique_name
    a, _ = _pair(job)
    now = time.time_ns()
    drained = MitigationAction(action_id=f"{a.incident_id}/drain", incident_id=a.incident_id, job=job,
                               level="drain", verdict="act", why="within the guard rails",
                               reason="expected to last 3600 s more", partition="gpu", by="steplens policy",
                               at_ns=now, host="node-1", rule="SLOW_RANK", slowdown=0.2)
    _produce(settings, [a])
    producer = KafkaProducer(**kafka_client_config(settings, "admin"), acks="all")
    try:
        producer.send(Topics(settings.topic_prefix).actions, key=drained.incident_id.encode(), value=encode(drained))
        producer.flush(timeout=30)
        AlertBridge(settings, url, once=True).run()
        actions = _get(url, "/api/v2/alerts", filter=['alertname="SteplensMitigation"', f'training_job="{job}"'])
        assert [x["labels"]["action_id"] for x in actions] == [drained.action_id]
        assert actions[0]["labels"]["severity"] == "warning" and actions[0]["labels"]["host"] == "node-1"
        assert actions[0]["annotations"]["command"] == f"steplens actions undo {drained.action_id}"
        undo = replace(drained, action_id=f"{drained.action_id}/undo", level="undo", undoes=drained.action_id,
                       by="oncall", at_ns=time.time_ns())
        producer.send(Topics(settings.topic_prefix).actions, key=undo.incident_id.encode(), value=encode(undo))
        producer.flush(timeout=30)
    finally:
        producer.close()
    second = AlertBridge(settings, url, once=True).run()
    assert (second.replayed, second.events) == (2, 1), second
    assert _get(url, "/api/v2/alerts", filter=['alertname="SteplensMitigation"', f'training_job="{job}"']) == []
    assert [x["labels"]["alertname"] for x in _get(url, "/api/v2/alerts", filter=f'training_job="{job}"')] == [
        "SteplensSlowRank"]  # the incident still fires
