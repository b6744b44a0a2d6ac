"""A job through 2 detect + 2 land workers on the loopback cluster while a broker and a replica die (issue #24).

The cluster of `python -m infra.launcher up --cluster`: 3 KRaft nodes (topics with 3 replicas,
min.insync.replicas=2), ZooKeeper and 2 shards x 2 ClickHouse replicas with the migrations'
cluster DDL (Replicated locals behind Distributed tables). Mid-job one Kafka node and one
ClickHouse replica get SIGKILL and come back. Then, through the Distributed tables: every
step and job event the producer delivered landed, none twice under FINAL, the slow rank is
one incident, and the killed replica caught up with its shard.
"""

from __future__ import annotations

import signal
import threading
from dataclasses import replace
from pathlib import Path

import pytest

from bench.chaos import Offsets, Rig, Sent, count, emit_job, poll_until, wait_caught_up
from infra.launcher.cluster import Cluster
from infra.secrets import CLICKHOUSE_DEFAULT
from producers.simulator.catalogue import straggler
from producers.simulator.fleet import FleetJob
from producers.simulator.topology import Topology
from schemas import Topics
from sinks import open_backend
from sinks.migrations.runner import migrate
from streams.topics_admin import ensure_topics

pytestmark = [pytest.mark.integration, pytest.mark.kafka, pytest.mark.clickhouse, pytest.mark.cluster,
              pytest.mark.exclusive]

KILLED_BROKER = 2
KILLED_REPLICA = 2  # of the job's shard: no worker's entry node (replica 1 of each shard), so inserts fail over
STEPS = 700
PACE_S = 0.05
SLOW_RANK = 5


def _ask(cluster: Cluster, shard: int, replica: int, sql: str) -> int:
    from clickhouse_driver import Client  # type: ignore[import-untyped,unused-ignore]

    node = cluster.clickhouse.node(shard, replica)
    client = Client(host="127.0.0.1", port=node.tcp_port, user=CLICKHOUSE_DEFAULT,
                    password=node.password(CLICKHOUSE_DEFAULT))
    try:
        return int(client.execute(sql)[0][0])
    finally:
        client.disconnect()


def _job_shard(cluster: Cluster, job: str) -> int:
    """The shard the Distributed tables put `job` on: cityHash64(job) over the 2 shards of weight 1."""
    return _ask(cluster, 1, 1, f"SELECT cityHash64('{job}') % 2") + 1


def test_broker_and_replica_killed_mid_job_lose_nothing(loopback_cluster: Cluster, tmp_path: Path,
                                                        unique_name: str) -> None:
    cluster = loopback_cluster
    settings = replace(cluster.client_settings(), home=tmp_path, topic_prefix=f"{unique_name}.", app_id=unique_name,
                       topic_partitions=4, clickhouse_database=unique_name)
    assert settings.topic_replication_factor == 3 and settings.topic_min_insync_replicas == 2
    ensure_topics(settings, Topics(settings.topic_prefix), settings.topic_partitions)
    backend = open_backend(settings)
    try:
        migrate(backend, cluster=settings.clickhouse_cluster)  # once, before two land workers start
    finally:
        backend.close()
    rig = Rig(unique_name, settings, tmp_path)
    other_entry = {"STEPLENS_CLICKHOUSE_URL": cluster.clickhouse.node(2, 1).url}
    rig.start("detect", "detect1")
    rig.start("detect", "detect2")
    rig.start("land", "land1")
    rig.start("land", "land2", env=other_entry)
    offsets = Offsets(settings)
    try:
        assert rig.wait_ready(("detect1", "detect2", "land1", "land2")), f"workers not ready; logs in {tmp_path}"
        topo = Topology(dp=4, tp=2, pp=1)
        job = FleetJob(f"cluster-{unique_name}", topo, STEPS, [straggler(topo, SLOW_RANK, 1.4)], seed=11)
        shard = _job_shard(cluster, job.job_id)
        sent = Sent()
        producer = threading.Thread(target=emit_job, args=(rig, job, sent, PACE_S), daemon=True)
        producer.start()
        # mid-job: steps are flowing, batches and windows are open
        assert poll_until(lambda: len(sent.steps) >= 8 * STEPS // 4, 60.0, every=0.1)
        cluster.kafka.kill_node(KILLED_BROKER, signal.SIGKILL)
        cluster.clickhouse.kill_node(shard, KILLED_REPLICA, signal.SIGKILL)
        assert poll_until(lambda: len(sent.steps) >= 8 * STEPS // 2, 90.0, every=0.1)  # the job goes on without them
        cluster.kafka.start_node(KILLED_BROKER)
        cluster.clickhouse.start_node(shard, KILLED_REPLICA)
        producer.join(timeout=300)
        assert not producer.is_alive()
        assert wait_caught_up(rig, offsets), f"workers did not catch up; logs in {tmp_path}"
        alive = rig.alive()
    finally:
        offsets.close()
        codes = rig.stop()
    # the killed replica fetched what its shard got meanwhile: both replicas hold every step (and the
    # count below, reading either replica through the Distributed tables, sees everything landed)
    keys = (f"SELECT (SELECT uniqExact(job, step, rank) FROM `{unique_name}`.`steps_local`)"
            f" + (SELECT uniqExact(job, phase) FROM `{unique_name}`.`jobs_local`)")
    assert poll_until(lambda: _ask(cluster, shard, 1, keys) == _ask(cluster, shard, 2, keys), 60.0), \
        f"the restarted replica did not catch up: {_ask(cluster, shard, 1, keys)} != {_ask(cluster, shard, 2, keys)}"
    result = count(rig, sent, job.ground_truth().slow_ranks(), job.job_id)
    assert alive, codes
    assert result["producer_dropped"] == 0 and result["producer_pending"] == 0, result
    assert result["sent"] == 8 * STEPS + 2
    assert result["lost"] == 0, result
    assert result["duplicates"] == 0, result
    assert result["slow_rank_found"] == [SLOW_RANK], result
    assert result["duplicate_incidents"] == 0, result
