"""Ten start-ups of the detect and land workers in a row (issue #20), against the real broker: two blocks of
`bench.restarts.plan`, so every kind of cycle is run once under SIGTERM and once under SIGKILL (`make soak`
restarts every role for half an hour).

SIGTERM and SIGKILL alternate; some start-ups restore snapshots, some are fresh deployments; in
some a second detect worker joins mid-job and leaves, in some partitions are added mid-job.
After every cycle each consumer group commits everything within 30 s of the last send, the job's
slow rank is one incident, and the decode stage read nothing twice (bench/restarts.py).

On b29ce28 this failed: a cycle that grew the partitions with two detect workers left the decode
group with records uncommitted (kafka-python's rejoin hole, infra/consumer_group.py; and added
partitions went unread for the 5-minute metadata age).
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from bench.chaos import Harness
from bench.restarts import RestartRun, plan
from infra.launcher import InfraConfig
from infra.settings import Settings, load_settings

pytestmark = [pytest.mark.integration, pytest.mark.kafka]

START_UPS = 10


def test_ten_start_ups_rejoin_commit_and_judge_right(kafka_settings: Settings, infra_config: InfraConfig,
                                                        tmp_path: Path, unique_name: str) -> None:
    base = replace(load_settings({}), home=tmp_path, kafka_bootstrap=kafka_settings.kafka_bootstrap,
                   secrets_dir=kafka_settings.secrets_path)
    run_dir = tmp_path / unique_name  # its name prefixes the topics and groups: unique per run
    run_dir.mkdir()
    results = RestartRun(Harness(base, infra_config, run_dir, quick=True)).run(plan(START_UPS))
    bad = [r.as_dict() for r in results if not r.ok]
    assert not bad, f"{len(bad)} of {START_UPS} cycles failed (logs in {run_dir}): {bad}"
