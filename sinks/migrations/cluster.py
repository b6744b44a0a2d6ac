"""Cluster mode: the same migrations, rewritten for a named ClickHouse cluster.

For each table ``t`` a migration creates, the cluster variant creates on every node
(``ON CLUSTER``):

- ``t_local``: the same columns with the Replicated form of the engine, its replicas
  coordinated through ZooKeeper/Keeper under ``/clickhouse/tables/{shard}/<db>/t_local``
  (``{shard}`` and ``{replica}`` are each server's macros);
- ``t``: a ``Distributed`` table over the ``t_local`` tables, under the original name, so
  the writer and every query run unchanged against any node.

The sharding key is the replacing key's leading column (``job``, or ``host`` for device
tables, ``topic`` for dead letters): all versions of a row meet on one shard, where
ReplacingMergeTree and FINAL collapse them, and a job's rollups stay shard-local.
Materialized views are created per node on the local tables (inserts through the
Distributed table reach the local tables, whose views feed the local rollups).
Replicated tables deduplicate inserted blocks by themselves (tokens included), so the
non-replicated deduplication window setting is dropped.

An ALTER of a replicated local is the one statement without ``ON CLUSTER``: the runner sends it to one
replica of each shard (``sinks.migrations.shard_ddl``), and the replicated table carries it to the shard's
other replicas. ``ON CLUSTER`` would have every replica of the shard race for the shard's lock in the DDL
queue, and ClickHouse 18.16 loses that race now and then: the loser, finding the "executed" node the winner
made between its check and its lock, gets "Node exists" from ZooKeeper, and its DDL worker thread ends
("Unexpected ZooKeeper error ... Terminating"): that node runs no distributed DDL again until restarted.
"""

from __future__ import annotations

import re

from sinks.backend import quote_identifier
from sinks.features import Features
from sinks.migrations import Migration

LOCAL_SUFFIX = "_local"
_CREATE = re.compile(r"^CREATE TABLE IF NOT EXISTS `(?P<db>[^`]+)`\.`(?P<table>[^`]+)`\n(?P<body>\(.*\))\n"
                     r"ENGINE = (?P<engine>\w+)\((?P<args>[^)]*)\)(?P<rest>.*)$", re.S)
_VIEW = re.compile(r"^CREATE MATERIALIZED VIEW IF NOT EXISTS `(?P<db>[^`]+)`\.`(?P<view>[^`]+)` "
                   r"TO `[^`]+`\.`(?P<target>[^`]+)`\nAS (?P<select>.*)$", re.S)
_ALTER = re.compile(r"^ALTER TABLE `(?P<db>[^`]+)`\.`(?P<table>[^`]+)` (?P<rest>.*)$", re.S)
_DROP = re.compile(r"^DROP TABLE IF EXISTS `(?P<db>[^`]+)`\.`(?P<table>[^`]+)`$")
_DEDUP = re.compile(r"\nSETTINGS non_replicated_deduplication_window = \d+")

SHARD_KEYS = {"device_samples": "host", "host_health": "host", "dead_letters": "topic", "schema_migrations": "id",
              "reference_models": "version"}


def _lit(text: str) -> str:
    return "'" + text.replace("\\", "\\\\").replace("'", "\\'") + "'"


def _q(db: str, table: str) -> str:
    return f"{quote_identifier(db)}.{quote_identifier(table)}"


def cluster_statements(migration: Migration, db: str, features: Features, cluster: str) -> list[str]:
    """The migration's statements for `cluster` (see the module docstring)."""
    on = f"ON CLUSTER {quote_identifier(cluster)}"
    out: list[str] = []
    for sql in migration.statements(db, features):
        if (m := _CREATE.match(sql)) is not None:
            table, local = m["table"], m["table"] + LOCAL_SUFFIX
            path = f"'/clickhouse/tables/{{shard}}/{db}/{local}', '{{replica}}'"
            args = path + (f", {m['args']}" if m["args"].strip() else "")
            rest = _DEDUP.sub("", m["rest"])
            out.append(f"CREATE TABLE IF NOT EXISTS {_q(db, local)} {on}\n{m['body']}\n"
                       f"ENGINE = Replicated{m['engine']}({args}){rest}")
            out.append(_distributed(db, table, cluster, on))
        elif (m := _VIEW.match(sql)) is not None:
            select = re.sub(rf"FROM `{re.escape(db)}`\.`([^`]+)`", rf"FROM `{db}`.`\1{LOCAL_SUFFIX}`", m["select"])
            out.append(f"CREATE MATERIALIZED VIEW IF NOT EXISTS {_q(db, m['view'])} {on} "
                       f"TO {_q(db, m['target'] + LOCAL_SUFFIX)}\nAS {select}")
        elif (m := _ALTER.match(sql)) is not None:
            if "non_replicated_deduplication_window" in m["rest"]:
                continue  # replicated tables deduplicate by themselves
            rest = m["rest"]
            if rest.startswith("ADD COLUMN "):
                # 18.16 refuses MODIFY ORDER BY on Replicated tables ("Unsupported type of ALTER query"): the
                # cluster gets the column without the longer sort key, so on a cluster two attempts' rows of
                # one (job, step, rank) still collapse under FINAL (docs/deployment.md); the Distributed table
                # gets the column by being made again over the altered local (18.16 refuses ALTER ON CLUSTER of a
                # table that is not replicated on a cluster whose shards are)
                rest = rest.split(", MODIFY ", 1)[0]
                out.append(f"ALTER TABLE {_q(db, m['table'] + LOCAL_SUFFIX)} {rest}")
                out.append(f"DROP TABLE IF EXISTS {_q(db, m['table'])} {on}")
                out.append(_distributed(db, m["table"], cluster, on))
            else:
                out.append(f"ALTER TABLE {_q(db, m['table'] + LOCAL_SUFFIX)} {rest}")
        elif (m := _DROP.match(sql)) is not None:  # a view replaced: per node, like its creation
            out.append(f"DROP TABLE IF EXISTS {_q(db, m['table'])} {on}")
        else:
            raise ValueError(f"migration {migration.id}: no cluster form for statement {sql[:60]!r}")
    return out


def once_per_shard(statement: str) -> bool:
    """Whether a cluster statement goes to one replica of each shard (an ALTER of a replicated local)
    rather than ``ON CLUSTER`` to every node (module docstring)."""
    return statement.startswith("ALTER TABLE ") and " ON CLUSTER " not in statement


def _distributed(db: str, table: str, cluster: str, on: str) -> str:
    """The Distributed table over `table`'s replicated local, sharded by its SHARD_KEYS column."""
    local = table + LOCAL_SUFFIX
    key = SHARD_KEYS.get(table, "job")
    return (f"CREATE TABLE IF NOT EXISTS {_q(db, table)} {on} AS {_q(db, local)}\n"
            f"ENGINE = Distributed({_lit(cluster)}, {_lit(db)}, {_lit(local)}, cityHash64({quote_identifier(key)}))")
