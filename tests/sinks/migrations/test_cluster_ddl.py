"""sinks/migrations/cluster_ddl.py's reading of the distributed DDL queue (pure: the texts ClickHouse 18.16 writes
to ZooKeeper; tests/cluster/test_migrations.py runs the wait against a stalled node)."""

from __future__ import annotations

import pytest

from sinks.migrations.cluster_ddl import _SERVER_GAVE_UP, host_id, task_hosts, task_state

# a task node's value as 18.16 writes it (read back from the loopback cluster's queue)
TASK = ("version: 1\nquery: CREATE DATABASE IF NOT EXISTS probe1 ON CLUSTER steplens\n"
        "hosts: ['127%2E0%2E0%2E1:29000','127%2E0%2E0%2E1:29010','127%2E0%2E0%2E1:29020','127%2E0%2E0%2E1:29030']\n"
        "initiator: vm:29000\n")
HOSTS = ("127.0.0.1:29000", "127.0.0.1:29010", "127.0.0.1:29020", "127.0.0.1:29030")


def test_a_task_names_its_nodes() -> None:
    assert host_id("127%2E0%2E0%2E1:29030") == "127.0.0.1:29030"
    assert task_hosts(TASK) == HOSTS
    with pytest.raises(ValueError, match="without a host list"):
        task_hosts("version: 1\nquery: SELECT 1\n")


def test_a_task_is_done_when_every_node_it_names_finished_it() -> None:
    finished = [("127%2E0%2E0%2E1:29000", "0\n"), ("127%2E0%2E0%2E1:29010", "0\n"), ("127%2E0%2E0%2E1:29020", "0\n")]
    state = task_state(TASK, finished)
    assert state.missing == ("127.0.0.1:29030",) and state.errors == ()
    done = task_state(TASK, [*finished, ("127%2E0%2E0%2E1:29030", "0\n")])
    assert done.missing == () and done.errors == ()


def test_a_node_that_failed_the_task_is_named_with_its_error() -> None:
    failed = ("127%2E0%2E0%2E1:29010", "44\nCannot add column x: column with this name already exists")
    state = task_state(TASK, [failed])
    assert state.errors == ("127.0.0.1:29010: code 44: Cannot add column x: column with this name already exists",)


def test_the_servers_own_timeout_names_the_task() -> None:
    text = ("server clickhouse://127.0.0.1:29000: execute failed: Code: 159. Watching task "
            "/clickhouse/task_queue/ddl/query-0000000012 is executing longer than distributed_ddl_task_timeout (=180) "
            "seconds. There are 1 unfinished hosts (0 of them are currently active), they are going to execute the "
            "query in background")
    match = _SERVER_GAVE_UP.search(text)
    assert match is not None and match.group(1) == "/clickhouse/task_queue/ddl/query-0000000012"
