"""One ``ON CLUSTER`` statement, waited for until every node has run it, however long a slow node takes.

Why: ClickHouse answers an ``ON CLUSTER`` statement once every node of the cluster has run it from the
distributed DDL queue in ZooKeeper. A node that is slow to get to it (busy with an earlier task, paused,
starting; an ALTER of a replicated table waits up to ``replication_alter_columns_timeout``, 60 s, for the
other replica) leaves the client with nothing to read: the server backend's socket gives up after its 60 s
(``send_receive_timeout``) first, or the server after ``distributed_ddl_task_timeout`` ("... they are going to
execute the query in background"). Either way the statement is in the queue and the nodes still run it; the
migration must not fail (nor go on) while they do. So the runner notes the queue's newest task before the
statement and, when the answer does not come, finds the statement's task after it and reads each node's status
from ZooKeeper (``system.zookeeper``) until every node listed in the task has finished it, or one failed (its
error is raised as the statement's), or ``background_timeout_s`` passed (an error naming the nodes still
missing).

The statement's own ``distributed_ddl_task_timeout`` cannot be lowered below the socket's instead:
clickhouse-driver writes Int64 settings as unsigned varints, which 18.16 reads zig-zag coded (3 arrives as
-2: wait forever), and the wait would still have to go on after the server gave up.

The queue path is the server's ``distributed_ddl.path`` (ClickHouse's default, which infra's loopback
cluster keeps). One runner at a time, as for the migrations: the first task after the mark is ours.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING
from urllib.parse import unquote

from sinks.backend import SinkError

if TYPE_CHECKING:
    from sinks.server import ServerBackend

DDL_QUEUE = "/clickhouse/task_queue/ddl"
BACKGROUND_TIMEOUT_S = 300.0
POLL_S = 0.5
_SERVER_GAVE_UP = re.compile(r"Watching task (\S+) is executing longer than distributed_ddl_task_timeout")
_HOSTS = re.compile(r"^hosts: \[(.*)\]$", re.MULTILINE)


@dataclass(frozen=True, slots=True)
class TaskState:
    """Where one queued DDL task stands: the nodes it names, those done, and the errors of those that failed."""

    hosts: tuple[str, ...]
    finished: tuple[str, ...]
    errors: tuple[str, ...]

    @property
    def missing(self) -> tuple[str, ...]:
        return tuple(h for h in self.hosts if h not in self.finished)


def host_id(name: str) -> str:
    """A node as the queue names it (``127%2E0%2E0%2E1:29000``) -> ``127.0.0.1:29000``."""
    return unquote(name)


def task_hosts(task_value: str) -> tuple[str, ...]:
    """The nodes a task must run on, from its ``hosts: ['a:9000','b:9000']`` line."""
    match = _HOSTS.search(task_value)
    if match is None:
        raise ValueError(f"a DDL task without a host list: {task_value[:200]!r}")
    return tuple(host_id(h.strip().strip("'")) for h in match.group(1).split(",") if h.strip())


def task_state(task_value: str, finished: list[tuple[str, str]]) -> TaskState:
    """Pure: the task's text and its ``finished/<host>`` children (host, ``"<code>\\n<message>"``)."""
    done: list[str] = []
    errors: list[str] = []
    for name, status in finished:
        host = host_id(name)
        done.append(host)
        code, _, message = status.partition("\n")
        if code.strip() not in ("", "0"):
            errors.append(f"{host}: code {code.strip()}: {message.strip()}")
    return TaskState(task_hosts(task_value), tuple(done), tuple(errors))


def _newest_task(backend: ServerBackend) -> str:
    try:
        rows = backend.query("SELECT max(name) FROM system.zookeeper WHERE path = %(p)s", {"p": DDL_QUEUE})
    except SinkError:
        return ""  # no queue yet: any task is newer
    return str(rows[0][0]) if rows and rows[0][0] else ""


def _task_after(backend: ServerBackend, mark: str) -> str | None:
    """The first task queued after `mark`; None without one (or without a queue at `DDL_QUEUE`: another path)."""
    try:
        rows = backend.query("SELECT name FROM system.zookeeper WHERE path = %(p)s AND name > %(m)s "
                             "ORDER BY name LIMIT 1", {"p": DDL_QUEUE, "m": mark})
    except SinkError:
        return None
    return f"{DDL_QUEUE}/{rows[0][0]}" if rows else None


def await_task(backend: ServerBackend, task: str, timeout_s: float) -> None:
    """Until every node named in `task` finished it; raise `SinkError` on a node's error or at the deadline."""
    parent, _, name = task.rpartition("/")
    value = backend.query("SELECT value FROM system.zookeeper WHERE path = %(p)s AND name = %(n)s",
                          {"p": parent, "n": name})
    if not value:
        raise SinkError(backend.name, "execute", f"DDL task {task} is not in the queue (cleaned up?)")
    deadline = time.monotonic() + timeout_s
    while True:
        rows = backend.query("SELECT name, value FROM system.zookeeper WHERE path = %(p)s",
                             {"p": f"{task}/finished"})
        state = task_state(str(value[0][0]), [(str(n), str(v)) for n, v in rows])
        if state.errors:
            raise SinkError(backend.name, "execute", f"DDL task {task} failed on {'; '.join(state.errors)}")
        if not state.missing:
            return
        if time.monotonic() >= deadline:
            raise SinkError(backend.name, "execute", f"DDL task {task}: {', '.join(state.missing)} did not run it "
                                                     f"within {timeout_s:.0f} s ({len(state.finished)} of "
                                                     f"{len(state.hosts)} nodes did)")
        time.sleep(POLL_S)


def run_on_cluster(backend: ServerBackend, statement: str, *, background_timeout_s: float = BACKGROUND_TIMEOUT_S,
                   on_slow: Callable[[str], None] | None = None) -> None:
    """Run one ``ON CLUSTER`` statement; when its answer does not come, wait for the nodes that run it still.

    `on_slow(task)` is told the task's path when the wait starts (the runner logs it; tests resume a node).
    """
    mark = _newest_task(backend)
    try:
        backend.execute(statement)
        return
    except SinkError as exc:
        named = _SERVER_GAVE_UP.search(str(exc))
        if named is None and "timed out" not in str(exc):
            raise  # an answer: the statement's own error
        task = named.group(1) if named else _task_after(backend, mark)
        if task is None:
            raise  # the statement never reached the queue
    if on_slow is not None:
        on_slow(task)
    await_task(backend, task, background_timeout_s)
