"""Apply the missing migrations, recording each in `schema_migrations`.

ClickHouse has no transactions, so a migration is made safe to repeat instead: its
statements use IF NOT EXISTS (an ALTER that adds a column, which 18.16 cannot spell with IF
NOT EXISTS, is skipped when the column is already there), and it is recorded only after all
of them succeeded. A crash
in between leaves it unrecorded and the next run re-applies it harmlessly.

Run migrations from one process at a time (the sink worker on start-up): two runners
racing could both apply a migration, which IF NOT EXISTS tolerates, and both record it,
which the ReplacingMergeTree record table collapses.

On a ClickHouse cluster (``cluster``: a ``remote_servers`` name, setting ``clickhouse_cluster``)
the same migrations run in their cluster form (``sinks.migrations.cluster``): the database,
the record table and every migration's tables are created ``ON CLUSTER``, as replicated
``<t>_local`` tables behind Distributed ``<t>`` tables, through any one node.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

from sinks.backend import Backend, qualified, quote_identifier
from sinks.features import Features
from sinks.migrations import MIGRATIONS, Migration
from sinks.migrations.cluster import cluster_statements, once_per_shard
from sinks.migrations.cluster_ddl import BACKGROUND_TIMEOUT_S, run_on_cluster
from sinks.migrations.ddl import column_already_added, create_table
from sinks.migrations.shard_ddl import run_once_per_shard

if TYPE_CHECKING:
    from sinks.server import ServerBackend

log = logging.getLogger(__name__)

RECORD_TABLE = "schema_migrations"
RECORD_COLUMNS = ("id", "description", "applied_ns")


def applied_ids(backend: Backend) -> set[str]:
    rows = backend.query(f"SELECT DISTINCT id FROM {qualified(backend.database, RECORD_TABLE)}")
    return {str(row[0]) for row in rows}


def _record_table(db: str, _features: Features) -> list[str]:
    return [create_table(db, RECORD_TABLE, [("id", "String"), ("description", "String"), ("applied_ns", "Int64")],
                         "ReplacingMergeTree(applied_ns)\nORDER BY id")]


RECORD = Migration("0000", "the record of applied migrations", _record_table)


def _exists(backend: Backend, table: str) -> bool:
    rows = backend.query("SELECT count() FROM system.tables WHERE database = %(db)s AND name = %(table)s",
                         {"db": backend.database, "table": table})
    return bool(rows and rows[0][0])


def _record_on_every_replica(backend: Backend, migration: Migration, cluster: str) -> None:
    """Record `migration` with ``insert_quorum`` = the shard's replicas: the record is on each of them
    before this returns, so the next runner, reading through the Distributed table from whichever
    replica, sees it (a record on one replica only made the next start re-run the DDL ON CLUSTER,
    which waits for every node)."""
    backend = _server(backend)
    replicas = backend.query("SELECT max(replica_num) FROM system.clusters WHERE cluster = %(c)s", {"c": cluster})
    quorum = int(replicas[0][0]) if replicas and replicas[0][0] else 0
    backend.insert(RECORD_TABLE, RECORD_COLUMNS, [(migration.id, migration.description, time.time_ns())],
                   settings={"insert_quorum": quorum} if quorum > 1 else None)


def _server(backend: Backend) -> ServerBackend:
    from sinks.server import ServerBackend

    if not isinstance(backend, ServerBackend):
        raise ValueError("a ClickHouse cluster needs the ClickHouse server backend (clickhouse_url)")
    return backend


def _log_slow(task: str) -> None:
    log.warning("%s: a node has not run it yet; waiting for it (up to %.0f s)", task, BACKGROUND_TIMEOUT_S)


def migrate(backend: Backend, migrations: Sequence[Migration] = MIGRATIONS, cluster: str = "",
            on_slow_ddl: Callable[[str], None] = _log_slow) -> list[str]:
    """Apply every migration not yet recorded, in order; return the ids applied (empty: up to date).

    `cluster`: apply the cluster form on that ClickHouse cluster (module docstring); each ``ON CLUSTER``
    statement is waited for until every node ran it (`cluster_ddl.run_on_cluster`), `on_slow_ddl` told
    of a statement whose answer did not come in time; an ALTER of a replicated local runs on one replica
    of each shard (`shard_ddl.run_once_per_shard`).
    """
    ids = [m.id for m in migrations]
    if ids != sorted(ids) or len(set(ids)) != len(ids):
        raise ValueError(f"migration ids must be unique and in order, got {ids}")
    db = backend.database
    features = Features.for_version(backend.version())

    def statements(migration: Migration) -> list[str]:
        if cluster:
            return cluster_statements(migration, db, features, cluster)
        return migration.statements(db, features)

    def run(statement: str) -> None:
        if cluster and once_per_shard(statement):
            run_once_per_shard(_server(backend), statement, cluster)
        elif cluster:
            run_on_cluster(_server(backend), statement, on_slow=on_slow_ddl)
        else:
            backend.execute(statement)

    if cluster:
        # ON CLUSTER DDL waits for every node: skipped once done, so a later start with a replica down works
        if not _exists(backend, RECORD_TABLE):
            run(f"CREATE DATABASE IF NOT EXISTS {quote_identifier(db)} ON CLUSTER {quote_identifier(cluster)}")
            for statement in statements(RECORD):
                run(statement)
    elif not _exists(backend, RECORD_TABLE):  # checked first: a reader of an up-to-date store writes nothing
        for statement in statements(RECORD):
            backend.execute(statement)
    done = applied_ids(backend)
    applied: list[str] = []
    for migration in migrations:
        if migration.id in done:
            continue
        for statement in statements(migration):
            try:
                run(statement)
            except Exception as exc:
                if not column_already_added(statement, exc):
                    raise
        if cluster:
            _record_on_every_replica(backend, migration, cluster)
        else:
            backend.insert(RECORD_TABLE, RECORD_COLUMNS, [(migration.id, migration.description, time.time_ns())])
        applied.append(migration.id)
    return applied

