"""The migrations' cluster form on the real loopback cluster (2 shards x 2 replicas of ClickHouse 18.16).

`tests/sinks/migrations/test_cluster.py` checks the DDL text; here it runs: every table is a
Replicated local on all four servers behind a Distributed table, and a replayed landing batch
(the same rows, the same dedup token, as the land worker re-inserts after a crash) lands once,
without FINAL: the replicated tables drop the repeated blocks. The same holds for the land worker's
Arrow blocks, which the server backend inserts column by column through the Distributed table.
"""

from __future__ import annotations

import datetime as dt
import os
import signal
from dataclasses import replace

import pyarrow as pa
import pytest

from bench.chaos import poll_until
from bench.land_split import batches, blocks
from infra.launcher.cluster import Cluster
from infra.secrets import CLICKHOUSE_DEFAULT
from sinks import open_backend
from sinks.backend import arrow_rows, column_list
from sinks.migrations import MIGRATIONS
from sinks.migrations.runner import migrate
from sinks.rows import STEP_COLUMNS
from sinks.server import ServerBackend

pytestmark = [pytest.mark.integration, pytest.mark.clickhouse, pytest.mark.cluster, pytest.mark.exclusive]

JOBS_COLUMNS = ("job", "phase", "world", "ts_ns", "parallel_keys", "parallel_values", "last_step", "model",
                "event_date")


def _on_every_node(cluster: Cluster, sql: str) -> list[list[tuple[object, ...]]]:
    from clickhouse_driver import Client  # type: ignore[import-untyped,unused-ignore]

    out = []
    for node in cluster.clickhouse.nodes:
        client = Client(host="127.0.0.1", port=node.tcp_port, user=CLICKHOUSE_DEFAULT,
                        password=node.password(CLICKHOUSE_DEFAULT))
        try:
            out.append([tuple(r) for r in client.execute(sql)])
        finally:
            client.disconnect()
    return out


def test_migrate_creates_replicated_locals_and_distributed_tables_on_every_node(
        loopback_cluster: Cluster, unique_name: str) -> None:
    settings = replace(loopback_cluster.client_settings(), clickhouse_database=unique_name)
    backend = open_backend(settings)
    try:
        assert migrate(backend, cluster=settings.clickhouse_cluster) == [m.id for m in MIGRATIONS]
        # each record is on both replicas of its shard when migrate returns (insert_quorum), so the next
        # runner sees it whichever replica it reads
        records = [r[0][0] for r in _on_every_node(
            loopback_cluster, f"SELECT count() FROM `{unique_name}`.`schema_migrations_local`")]
        assert records[0] == records[1] and records[2] == records[3], records
        assert records[0] + records[2] == len(MIGRATIONS)
        for _ in range(3):
            assert migrate(backend, cluster=settings.clickhouse_cluster) == []  # recorded once, cluster-wide
    finally:
        backend.close()
    engines = _on_every_node(loopback_cluster, f"SELECT name, engine FROM system.tables "
                                               f"WHERE database = '{unique_name}' ORDER BY name")
    assert all(e == engines[0] for e in engines), "the nodes disagree on the schema"
    tables = dict(engines[0])  # type: ignore[arg-type]
    assert tables["steps_local"] == "ReplicatedReplacingMergeTree"
    assert tables["steps"] == "Distributed"
    assert tables["schema_migrations_local"] == "ReplicatedReplacingMergeTree"
    assert sum(1 for e in tables.values() if e == "MaterializedView") == 6
    # the columns later migrations add reached every replica, and none of their ALTERs went through the DDL
    # queue (ON CLUSTER, the shard's replicas race for its lock, and 18.16 can end the loser's DDL worker)
    added = _on_every_node(loopback_cluster, f"SELECT table, name FROM system.columns WHERE database = "
                                             f"'{unique_name}' AND name IN ('attempt', 'mem_capacity_bytes') "
                                             f"ORDER BY table, name")
    assert all(a == added[0] for a in added), added
    assert {("jobs_local", "attempt"), ("jobs", "attempt"), ("steps_local", "mem_capacity_bytes"),
            ("steps", "mem_capacity_bytes")} <= set(added[0])  # type: ignore[arg-type]
    queued = _on_every_node(loopback_cluster, f"SELECT count() FROM system.zookeeper WHERE path = "
                                              f"'/clickhouse/task_queue/ddl' "
                                              f"AND value LIKE '%ALTER TABLE %{unique_name}%'")
    assert queued[0] == [(0,)], queued[0]
    macros = _on_every_node(loopback_cluster, "SELECT substitution FROM system.macros ORDER BY macro")
    assert sorted(tuple(m) for m in macros) == [(("r1",), ("01",)), (("r1",), ("02",)), (("r2",), ("01",)),
                                                (("r2",), ("02",))]


def _replicas_agree(cluster: Cluster, db: str, rows: int, table: str = "jobs") -> bool:
    """Both replicas of each shard hold the same rows, some, `rows` in all (replication is asynchronous:
    a Distributed insert returns once ONE replica of each shard has the block)."""
    local = [int(r[0][0]) for r in _on_every_node(cluster, f"SELECT count() FROM `{db}`.`{table}_local`")]  # type: ignore[call-overload]
    return local[0] == local[1] > 0 and local[2] == local[3] > 0 and local[0] + local[2] == rows  # both shards


def test_a_replayed_batch_lands_once_through_the_distributed_table(loopback_cluster: Cluster,
                                                                   unique_name: str) -> None:
    settings = replace(loopback_cluster.client_settings(), clickhouse_database=unique_name)
    backend = open_backend(settings)
    today = dt.date.today()
    batch = [(f"job-{i}", "start", 8, 1_000 + i, ["dp"], [8], None, None, today) for i in range(12)]
    table = f"`{unique_name}`.`jobs`"
    try:
        migrate(backend, cluster=settings.clickhouse_cluster)
        backend.insert("jobs", JOBS_COLUMNS, batch, dedup_token="land-0-100")
        backend.insert("jobs", JOBS_COLUMNS, batch, dedup_token="land-0-100")  # the replay after a crash
        # the replica each shard's blocks went to holds any repeat at once; agreeing on 12 rules it out
        assert poll_until(lambda: _replicas_agree(loopback_cluster, unique_name, 12), 30.0, every=0.2)
        assert backend.query(f"SELECT count() FROM {table}") == [(12,)]
        backend.insert("jobs", JOBS_COLUMNS, batch[:5], dedup_token="land-100-105")  # another batch does land
        assert poll_until(lambda: _replicas_agree(loopback_cluster, unique_name, 17), 30.0, every=0.2)
        assert backend.query(f"SELECT count() FROM {table}") == [(17,)]
        assert backend.query(f"SELECT count() FROM {table} FINAL") == [(12,)]
    finally:
        backend.close()


def test_a_replayed_arrow_block_lands_once_through_the_distributed_table(loopback_cluster: Cluster,
                                                                         unique_name: str) -> None:
    settings = replace(loopback_cluster.client_settings(), clickhouse_database=unique_name)
    backend = open_backend(settings)
    assert isinstance(backend, ServerBackend)
    # six jobs' step blocks (land-4 ... land-9), as the land worker builds them: rows on both shards
    data = pa.concat_tables([b.data for ranks in range(4, 10) for b in blocks(batches(ranks, 1, "step"))])
    table = f"`{unique_name}`.`steps`"
    try:
        migrate(backend, cluster=settings.clickhouse_cluster)
        backend.insert_arrow("steps", STEP_COLUMNS, data, dedup_token="land-0-5")
        backend.insert_arrow("steps", STEP_COLUMNS, data, dedup_token="land-0-5")  # the replay after a crash
        assert backend.inserts_by_kind["numpy"] == 2
        assert poll_until(lambda: _replicas_agree(loopback_cluster, unique_name, data.num_rows, "steps"), 30.0,
                          every=0.2)
        stored = backend.query(f"SELECT {column_list(STEP_COLUMNS)} FROM {table}")
        assert sorted(stored, key=repr) == sorted(arrow_rows(data), key=repr)
    finally:
        backend.close()


def test_a_node_that_stalls_on_a_ddl_delays_the_migration_instead_of_failing_it(
        loopback_cluster: Cluster, unique_name: str) -> None:
    # s2r2 is stopped (SIGSTOP) before the first ON CLUSTER statement: the server cannot answer it, and the
    # client's socket gives up after 5 s. The runner finds the statement's task in the DDL queue, resumes
    # the node through `on_slow_ddl`, and goes on once every node ran it: the migration completes (before,
    # the socket's timeout failed it, while the stalled node still ran the statement later).
    from infra.clients import clickhouse_credentials

    settings = replace(loopback_cluster.client_settings(), clickhouse_database=unique_name)
    creds = clickhouse_credentials(settings, "write")
    assert creds is not None
    backend = ServerBackend(settings.clickhouse_url, unique_name, user=creds[0], password=creds[1],
                            send_receive_timeout=5.0, create_database=False)
    stalled = loopback_cluster.clickhouse.node(2, 2)
    pid = stalled.pid()
    assert pid is not None
    slow: list[str] = []

    def resume(task: str) -> None:
        slow.append(task)
        os.kill(pid, signal.SIGCONT)

    os.kill(pid, signal.SIGSTOP)
    try:
        assert migrate(backend, cluster=settings.clickhouse_cluster, on_slow_ddl=resume) == [m.id for m in MIGRATIONS]
    finally:
        os.kill(pid, signal.SIGCONT)
        backend.close()
    assert len(slow) == 1 and slow[0].startswith("/clickhouse/task_queue/ddl/query-")
    tables = _on_every_node(loopback_cluster, f"SELECT count() FROM system.tables WHERE database = '{unique_name}'")
    assert len({t[0][0] for t in tables}) == 1 and tables[0][0][0] > 0, tables
