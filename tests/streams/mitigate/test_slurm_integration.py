"""The mitigation stage against a real Slurm (4 slurmd on loopback, infra/launcher/slurm.py): a persistent
slow host drains its node with the incident in the reason, a relaunch requeues the job off the node, the guard
rails hold, and undo resumes the node."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace

import pytest

from infra.launcher.slurm import PARTITION, node_names
from streams.mitigate.act import Mitigator
from streams.mitigate.guard import GuardParams
from streams.mitigate.policy import JobCosts, PolicyParams
from streams.mitigate.scheduler import Slurm
from tests.streams.mitigate.slurm_jobs import hostnames, job_field, reasons, run, slow_host, submit, wait_for

pytestmark = [pytest.mark.integration, pytest.mark.slurm]

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
