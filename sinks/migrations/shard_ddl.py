"""An ALTER of a replicated table, run on one replica of each shard of a cluster.

Why: ``ALTER ... ON CLUSTER`` of a replicated table has every replica of a shard race for the shard's lock
in the distributed DDL queue, and ClickHouse 18.16 can end a replica's DDL worker over that race
(`sinks.migrations.cluster`). A replicated ALTER needs no queue: the replica that runs it writes the new
structure to ZooKeeper and waits (``replication_alter_columns_timeout``) for the shard's other replicas to
apply it, so its answer may take that long (``ANSWER_S`` is the socket's wait for it). The runner sends it to
the first replica of each shard it can reach; a replica down, or whose answer does not come in time, hands
it to the next of its shard, and an ADD COLUMN whose column is there
already (an earlier try that timed out after making it, a crashed run) counts as done on that shard. Any
other error is the statement's own and is raised.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from clickhouse_driver import errors as ch_errors  # type: ignore[import-untyped,unused-ignore]

from sinks.backend import SinkError
from sinks.migrations.ddl import column_already_added

if TYPE_CHECKING:
    from sinks.server import ServerBackend

ANSWER_S = 90.0  # a replicated ALTER waits up to replication_alter_columns_timeout (60 s) for the other replicas


def shard_replicas(rows: Sequence[tuple[Any, ...]]) -> dict[int, list[tuple[str, int]]]:
    """Pure: ``system.clusters`` rows (shard_num, replica_num, host_address, port) -> each shard's replicas
    (host, port) in replica order."""
    out: dict[int, list[tuple[int, str, int]]] = {}
    for shard, replica, host, port in rows:
        out.setdefault(int(shard), []).append((int(replica), str(host), int(port)))
    return {shard: [(h, p) for _, h, p in sorted(replicas)] for shard, replicas in sorted(out.items())}


def unreachable(exc: SinkError) -> bool:
    """The node gave no answer (refused, dropped, timed out), as against the server's own error."""
    return not isinstance(exc.__cause__, ch_errors.ServerException)


def run_once_per_shard(backend: ServerBackend, statement: str, cluster: str) -> None:
    """Run `statement` on one replica of each shard of `cluster` (module docstring)."""
    rows = backend.query("SELECT shard_num, replica_num, host_address, port FROM system.clusters "
                         "WHERE cluster = %(c)s", {"c": cluster})
    if not rows:
        raise SinkError(backend.name, "execute", f"no cluster {cluster!r} in the server's system.clusters")
    for shard, replicas in shard_replicas(rows).items():
        missed: list[str] = []
        for host, port in replicas:
            try:
                node = backend.on_node(host, port, send_receive_timeout=ANSWER_S)
            except SinkError as exc:
                missed.append(str(exc))
                continue
            try:
                node.execute(statement)
                break
            except SinkError as exc:
                if column_already_added(statement, exc):
                    break
                if not unreachable(exc):
                    raise
                missed.append(str(exc))
            finally:
                node.close()
        else:
            raise SinkError(backend.name, "execute", f"shard {shard}: no replica answered "
                                                     f"{statement[:80]!r}: {'; '.join(missed)}")
