"""Cluster mode: the DDL the same migrations generate for a named cluster (text only: no cluster here)."""

from __future__ import annotations

import re

from sinks.features import Features
from sinks.migrations import MIGRATIONS
from sinks.migrations.cluster import cluster_statements, once_per_shard

NEW = Features.for_version((26, 9, 2))


def all_statements(features: Features = NEW) -> list[str]:
    return [sql for m in MIGRATIONS for sql in cluster_statements(m, "db", features, "fleet")]


def test_every_table_becomes_replicated_local_plus_distributed() -> None:
    statements = all_statements()
    tables = {m.group(1) for sql in (s for m in MIGRATIONS for s in m.statements("db", NEW))
              if (m := re.match(r"CREATE TABLE IF NOT EXISTS `db`\.`(\w+)`", sql))}
    assert {"steps", "kernels", "device_samples", "steps_by_minute", "topology"} <= tables
    for table in tables:
        local = [s for s in statements if s.startswith(f"CREATE TABLE IF NOT EXISTS `db`.`{table}_local` ON CLUSTER")]
        assert len(local) == 1, table
        assert re.search(rf"ENGINE = Replicated\w*MergeTree\('/clickhouse/tables/{{shard}}/db/{table}_local', "
                         r"'\{replica\}'", local[0]), local[0]
        dist = [s for s in statements if s.startswith(f"CREATE TABLE IF NOT EXISTS `db`.`{table}` ON CLUSTER")]
        # a table that gains a column (m0014, m0017) has its Distributed table made again over the altered local,
        # once per ALTER
        alters = [s for s in statements if s.startswith(f"ALTER TABLE `db`.`{table}_local` ADD")]
        assert len(dist) == 1 + len(alters) and all(f"AS `db`.`{table}_local`" in d for d in dist), table
        shard_key = r"cityHash64\(`(job|host|topic|version)`\)"
        assert re.search(rf"Distributed\('fleet', 'db', '{table}_local', {shard_key}\)", dist[0])
    assert not any("non_replicated_deduplication_window" in s for s in statements)


def test_views_read_and_write_local_tables_and_keep_the_replacing_version() -> None:
    statements = all_statements()
    views = [s for s in statements if s.startswith("CREATE MATERIALIZED VIEW")]
    assert len({re.findall(r"`db`\.`(\w+)`", v)[0] for v in views}) == 6  # steps_by_step_mv twice (0014 recreates it)
    for view in views:
        assert "ON CLUSTER `fleet`" in view
        assert re.search(r"TO `db`\.`\w+_local`", view)
        assert re.findall(r"FROM `db`\.`(\w+)`", view) and all(
            t.endswith("_local") for t in re.findall(r"FROM `db`\.`(\w+)`", view))
    steps = next(s for s in statements if "`steps_local` ON CLUSTER" in s)
    engine = "ReplicatedReplacingMergeTree('/clickhouse/tables/{shard}/db/steps_local', '{replica}', ingested_ns)"
    assert engine in steps


def test_old_engines_get_cluster_ddl_without_newer_features() -> None:
    for sql in all_statements(Features.for_version((18, 16, 1))):
        for newer in ("LowCardinality", "CODEC", "TTL", "SETTINGS non_replicated"):
            assert newer not in sql


def test_attempt_columns_reach_local_and_distributed_tables_and_the_view_is_recreated_per_node() -> None:
    statements = all_statements()
    for table in ("steps", "kernel_summaries", "jobs", "steps_by_step"):
        local = [s for s in statements if s.startswith(f"ALTER TABLE `db`.`{table}_local` ADD") and "`attempt`" in s]
        # 18.16 refuses MODIFY ORDER BY on Replicated tables: the cluster's locals get the column only
        assert local == [f"ALTER TABLE `db`.`{table}_local` ADD COLUMN `attempt` UInt16"]
        # and ALTER ON CLUSTER of the (unreplicated) Distributed table: it is made again over the local
        at = statements.index(local[0])
        assert statements[at + 1] == f"DROP TABLE IF EXISTS `db`.`{table}` ON CLUSTER `fleet`"
        assert statements[at + 2].startswith(f"CREATE TABLE IF NOT EXISTS `db`.`{table}` ON CLUSTER `fleet` AS "
                                             f"`db`.`{table}_local`")
    assert "DROP TABLE IF EXISTS `db`.`steps_by_step_mv` ON CLUSTER `fleet`" in statements


def test_an_alter_of_a_replicated_local_goes_once_per_shard_and_everything_else_on_cluster() -> None:
    # ALTER ... ON CLUSTER of a replicated table has the shard's replicas race for its lock in the DDL queue,
    # and 18.16 ends the loser's DDL worker ("Node exists" ... "Terminating"): the runner sends these to one
    # replica per shard instead, and the replicated table carries them to the others
    for features in (NEW, Features.for_version((18, 16, 1))):
        statements = all_statements(features)
        alters = [s for s in statements if s.startswith("ALTER TABLE")]
        assert alters and all(re.match(r"ALTER TABLE `db`\.`\w+_local` ", s) for s in alters)
        assert all(once_per_shard(s) for s in alters)
        assert all("ON CLUSTER `fleet`" in s and not once_per_shard(s) for s in statements if s not in alters)
