"""sinks/migrations/shard_ddl.py's pure parts: each shard's replicas from system.clusters, and which errors
hand the statement to the shard's next replica (the runs themselves: tests/cluster/test_migrations.py)."""

from __future__ import annotations

from clickhouse_driver import errors as ch_errors  # type: ignore[import-untyped,unused-ignore]

from sinks.backend import SinkError
from sinks.migrations.shard_ddl import shard_replicas, unreachable


def test_replicas_are_grouped_by_shard_in_replica_order() -> None:
    rows = [(2, 2, "127.0.0.1", 29003), (1, 2, "127.0.0.1", 29001), (2, 1, "127.0.0.1", 29002),
            (1, 1, "127.0.0.1", 29000)]
    assert shard_replicas(rows) == {1: [("127.0.0.1", 29000), ("127.0.0.1", 29001)],
                                    2: [("127.0.0.1", 29002), ("127.0.0.1", 29003)]}


def _raised(cause: Exception) -> SinkError:
    try:
        raise SinkError("server", "execute", str(cause)) from cause
    except SinkError as exc:
        return exc


def test_no_answer_moves_on_and_the_servers_own_error_does_not() -> None:
    assert unreachable(_raised(ch_errors.NetworkError("Connection refused (127.0.0.1:29000)")))
    assert unreachable(_raised(ch_errors.SocketTimeoutError("timed out")))
    assert unreachable(_raised(EOFError("Unexpected EOF while reading bytes")))
    assert not unreachable(_raised(ch_errors.ServerException("Cannot add column `attempt`", code=44)))
