"""The mitigation stage against a real Slurm (4 slurmd on loopback, infra/launcher/slurm.py), in one file: the
tests change the one partition's node states and jobs, so they run one after the other.

- The mitigator alone: a persistent slow host drains its node with the incident in the reason, a relaunch
  requeues the job off the node, the guard rails hold, and undo resumes the node.
- The worker through Kafka (issue #48's acceptance): a persistent slow host on a job's node is drained once,
  with the incident in the node's reason, through a SIGKILL of the worker and a detect worker's re-sent
  incident; `steplens actions undo` resumes the node; in dry-run nothing changes and the decision is recorded.
"""

from __future__ import annotations

import dataclasses
import os
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator, Mapping
from dataclasses import replace
from pathlib import Path

import pytest
from kafka import KafkaConsumer, KafkaProducer

from infra.clients import kafka_client_config
from infra.launcher.slurm import PARTITION, node_names
from infra.settings import REPO_ROOT, Settings
from schemas import Incident, MitigationAction, Topics, decode_as, encode, job_key
from streams.mitigate.act import Mitigator
from streams.mitigate.guard import GuardParams
from streams.mitigate.policy import JobCosts, PolicyParams
from streams.mitigate.scheduler import Slurm
from streams.mitigate.worker import recorded_actions
from streams.topics_admin import ensure_topics
from tests.streams.helpers import wait_topics_visible
from tests.streams.mitigate.slurm_jobs import hostnames, job_field, reasons, run, slow_host, submit, wait_for

pytestmark = [pytest.mark.integration, pytest.mark.kafka, pytest.mark.slurm]

S = 1_000_000_000
ENABLED = GuardParams(enabled_partitions=frozenset({PARTITION}), max_drained_share=0.25)
LONG_FAULTS = [4 * 3600.0] * 10  # the fleet's history of this class: faults that last hours


def test_a_persistent_slow_host_is_drained_once_with_the_incident_as_reason_and_undo_resumes_it(
    slurm_env: Mapping[str, str],
) -> None:
    slurm = Slurm(slurm_env)
    _, placed = submit(slurm_env, "drain-me")
    culprit, other_node = placed[1], next(n for n in node_names() if n not in placed)
    costs = JobCosts(job_gpus=16, since_checkpoint_s=600.0, relaunch_s=300.0, node_gpus=8)
    incident = slow_host(culprit, "inc-drain")

    young = Mitigator(slurm, PARTITION, PolicyParams(), ENABLED).handle(incident, costs, LONG_FAULTS, 60 * S)
    assert young.verdict == "none" and young.decision.level == "profile"
    assert slurm.nodes(PARTITION)[culprit].available

    dry = Mitigator(slurm, PARTITION, PolicyParams(), replace(ENABLED, enabled_partitions=frozenset()))
    recorded = dry.handle(incident, costs, LONG_FAULTS, 4600 * S)
    assert recorded.verdict == "dry_run" and recorded.decision.level == "drain"
    assert slurm.nodes(PARTITION)[culprit].available  # dry-run: the decision is recorded, nothing changes

    mitigator = Mitigator(slurm, PARTITION, PolicyParams(), ENABLED)
    done = mitigator.handle(incident, costs, LONG_FAULTS, 4600 * S)
    assert done.verdict == "act", done.why
    assert f"{culprit}|steplens inc-drain SLOW_HOST drain" in reasons(slurm_env)
    assert slurm.nodes(PARTITION)[culprit].state in ("draining", "drained", "drng")
    assert mitigator.handle(incident, costs, LONG_FAULTS, 4700 * S).verdict == "none"  # once per key
    restarted = Mitigator(slurm, PARTITION, PolicyParams(), ENABLED)  # remembers nothing: Slurm's reason does
    assert restarted.handle(incident, costs, LONG_FAULTS, 4700 * S).verdict == "none"

    # a second culprit would take 2 of 4 nodes out: refused, that node untouched
    other = mitigator.handle(slow_host(other_node, "inc-other"), costs, LONG_FAULTS, 4600 * S)
    assert other.verdict == "refused" and "2 of 4" in other.why
    assert slurm.nodes(PARTITION)[other_node].available

    undone = mitigator.undo(done.as_action(), by="operator")
    assert undone.verdict == "act"
    wait_for("node resumed", lambda: slurm.nodes(PARTITION)[culprit].available)
    assert culprit not in run(slurm_env, "sinfo", "-R", "--noheader", "--format=%N")


def test_a_relaunch_requeues_the_job_onto_nodes_without_the_culprit(slurm_env: Mapping[str, str]) -> None:
    slurm = Slurm(slurm_env)
    job, (_, culprit) = submit(slurm_env, "relaunch-me")
    # a large job, a recent checkpoint, a host that halves its throughput: waiting costs more than relaunching
    costs = JobCosts(job_gpus=1024, since_checkpoint_s=60.0, relaunch_s=120.0, node_gpus=8)
    record = Mitigator(slurm, PARTITION, PolicyParams(), ENABLED).handle(
        slow_host(culprit, "inc-relaunch", observed=2.0), costs, LONG_FAULTS, 900 * S, scheduler_job=job)
    assert record.verdict == "act" and record.decision.level == "relaunch", record
    wait_for("job restarted", lambda: job_field(slurm_env, job, "Restarts") == "1")
    wait_for("job running again", lambda: job_field(slurm_env, job, "JobState") == "RUNNING", timeout=120)
    placed = hostnames(slurm_env, job_field(slurm_env, job, "NodeList"))
    assert culprit not in placed and len(placed) == 2, placed


# --- the worker through Kafka -------------------------------------------------------------------------------

@pytest.fixture
def settings(kafka_settings: Settings, tmp_path: Path) -> Iterator[Settings]:
    prefix = f"mit{uuid.uuid4().hex[:8]}."
    s = dataclasses.replace(kafka_settings, topic_prefix=prefix, app_id=f"mit-{prefix[3:11]}", home=tmp_path,
                            topic_partitions=2, mitigate_partition=PARTITION, mitigate_max_drained_share=0.25,
                            mitigate_interval_s=0.5)
    ensure_topics(s, Topics(prefix), s.topic_partitions)
    t = Topics(prefix)
    wait_topics_visible(s, (t.incidents, t.jobs, t.actions))
    yield s


def env_of(s: Settings, slurm_env: Mapping[str, str], enabled: bool) -> dict[str, str]:
    return {**os.environ, **slurm_env, "STEPLENS_HOME": str(s.home), "STEPLENS_SECRETS_DIR": str(s.secrets_path),
            "STEPLENS_KAFKA_BOOTSTRAP": s.kafka_bootstrap, "STEPLENS_TOPIC_PREFIX": s.topic_prefix,
            "STEPLENS_APP_ID": s.app_id, "STEPLENS_TOPIC_PARTITIONS": str(s.topic_partitions),
            "STEPLENS_MITIGATE_PARTITION": PARTITION, "STEPLENS_MITIGATE_ENABLED": PARTITION if enabled else "",
            "STEPLENS_MITIGATE_MAX_DRAINED_SHARE": "0.25", "STEPLENS_MITIGATE_INTERVAL_S": "0.5"}


def start_worker(env: Mapping[str, str], log: Path) -> subprocess.Popen[bytes]:
    out = open(log, "ab")  # noqa: SIM115 - lives as long as the process
    return subprocess.Popen([sys.executable, "-m", "streams", "worker", "--role", "mitigate"], cwd=REPO_ROOT,
                            env=dict(env), stdout=out, stderr=subprocess.STDOUT, start_new_session=True)


def publish(s: Settings, incidents: list[tuple[Incident, int]]) -> None:
    """Incidents as the detect worker writes them (as admin: only detect and parse may), each at its time."""
    producer = KafkaProducer(**kafka_client_config(s, "admin"), acks="all")
    try:
        for incident, at_ns in incidents:
            producer.send(Topics(s.topic_prefix).incidents, key=job_key(incident.job), value=encode(incident),
                          timestamp_ms=at_ns // 1_000_000)
        producer.flush(timeout=30)
    finally:
        producer.close()


def history(job: str, now_ns: int) -> list[tuple[Incident, int]]:
    """The fleet's past slow hosts: ten that lasted four hours (opened, then resolved)."""
    past = []
    for i in range(10):
        opened = slow_host("old-node", f"SLOW_HOST:{job}:old-{i}", detected_ns=now_ns - 30 * 3600 * S, job=job)
        past += [(opened, opened.detected_ns), (dataclasses.replace(opened, state="resolved"),
                                                opened.detected_ns + 4 * 3600 * S)]
    return past


def actions_of(s: Settings, incident_id: str) -> list[MitigationAction]:
    """Every record of the incident's actions on the topic, duplicates included."""
    consumer = KafkaConsumer(Topics(s.topic_prefix).actions, **kafka_client_config(s, "admin"),
                             auto_offset_reset="earliest", enable_auto_commit=False, consumer_timeout_ms=2000)
    try:
        found = [decode_as(MitigationAction, m.value) for m in consumer]
    finally:
        consumer.close()
    return [a for a in found if a.incident_id == incident_id]


def steplens(env: Mapping[str, str], *argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "steplens", *argv], cwd=REPO_ROOT, env=dict(env),
                          capture_output=True, text=True, timeout=120)


def stop(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(timeout=30)


def slow_job(settings: Settings, slurm_env: Mapping[str, str], name: str) -> tuple[str, Incident, int]:
    """A 2-node Slurm job named like its steplens job, and a slow host on one of its nodes two hours old (past
    its break-even), published with the fleet's history of the class; (the job, the incident, now)."""
    job = f"{name}-{settings.topic_prefix[3:11]}"
    _, placed = submit(slurm_env, job)
    now = time.time_ns()
    incident = slow_host(placed[1], f"SLOW_HOST:{job}:{placed[1]}", detected_ns=now - 7200 * S, job=job)
    publish(settings, [*history(job, now), (incident, incident.detected_ns)])
    return job, incident, now


def test_a_persistent_slow_host_is_drained_once_through_a_sigkill_and_undone_from_the_cli(
    settings: Settings, slurm_env: Mapping[str, str], tmp_path: Path,
) -> None:
    job, incident, now = slow_job(settings, slurm_env, "train")
    culprit = incident.host
    assert culprit is not None
    env = env_of(settings, slurm_env, enabled=True)
    log = tmp_path / "mitigate.log"
    worker = start_worker(env, log)
    try:
        wait_for("the node drained", lambda: f"{culprit}|steplens {incident.incident_id} SLOW_HOST drain"
                 in reasons(slurm_env), timeout=90)
        wait_for("the drain recorded", lambda: any(a.verdict == "act" for a in actions_of(settings,
                                                                                           incident.incident_id)))
        os.killpg(worker.pid, signal.SIGKILL)
        worker.wait(timeout=30)
        # a detect worker killed meanwhile re-sends the incident; a second culprit (a node outside the job's
        # partition) marks a round of the restarted worker that weighed both
        stranger = slow_host("not-a-node", f"SLOW_HOST:{job}:stranger", detected_ns=now - 7100 * S, job=job)
        publish(settings, [(incident, time.time_ns()), (stranger, stranger.detected_ns)])
        worker = start_worker(env, log)
        wait_for("the restarted worker's round", lambda: actions_of(settings, stranger.incident_id), timeout=90)
    finally:
        stop(worker)
    done = [a for a in actions_of(settings, incident.incident_id) if a.level == "drain"]
    assert [(a.verdict, a.by, a.host) for a in done] == [("act", "steplens policy", culprit)], log.read_text()[-3000:]
    assert done[0].keep_cost_gpu_h > 0 and done[0].history_n == 10
    assert actions_of(settings, stranger.incident_id)[0].verdict == "refused"
    log_text = log.read_text()
    assert log_text.count(f"act drain on {culprit}") == 1, log_text[-3000:]

    undone = steplens(env, "actions", "undo", done[0].action_id, "--by", "oncall")
    assert undone.returncode == 0, undone.stderr
    wait_for("node resumed", lambda: Slurm(slurm_env).nodes(PARTITION)[culprit].available)
    undo = recorded_actions(settings)[f"{done[0].action_id}/undo"]
    assert (undo.verdict, undo.by, undo.undoes) == ("act", "oncall", done[0].action_id)


def test_in_dry_run_the_decision_is_recorded_nothing_changes_and_an_operator_can_approve_it(
    settings: Settings, slurm_env: Mapping[str, str], tmp_path: Path,
) -> None:
    _, incident, _ = slow_job(settings, slurm_env, "dry")
    culprit = incident.host
    assert culprit is not None
    env = env_of(settings, slurm_env, enabled=False)
    worker = start_worker(env, tmp_path / "mitigate.log")
    try:
        wait_for("the decision recorded", lambda: actions_of(settings, incident.incident_id), timeout=90)
    finally:
        stop(worker)
    (recorded,) = actions_of(settings, incident.incident_id)
    assert (recorded.level, recorded.verdict) == ("drain", "dry_run")
    assert all(n.available for n in Slurm(slurm_env).nodes(PARTITION).values())
    assert set(Slurm(slurm_env).nodes(PARTITION)) == set(node_names())

    approved = steplens(env, "actions", "approve", recorded.action_id, "--by", "oncall")
    assert approved.returncode == 0, approved.stderr
    assert f"{culprit}|steplens {incident.incident_id} SLOW_HOST drain" in reasons(slurm_env)
    assert recorded_actions(settings)[recorded.action_id].by == "oncall"
