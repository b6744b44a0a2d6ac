"""The loopback cluster, for this package only: its 8 server processes (~2.2 GB) run while these tests do."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from infra.launcher import InfraConfig
from infra.launcher.cluster import Cluster


@pytest.fixture(scope="package")
def loopback_cluster(infra_config: InfraConfig) -> Iterator[Cluster]:
    """The loopback cluster of `python -m infra.launcher up --cluster` (3 Kafka nodes, ZooKeeper, 2x2 ClickHouse
    replicas; infra/launcher/cluster.py), on the STEPLENS_CLUSTER_* ports; stopped after this package's tests if
    they started it (STEPLENS_KEEP_SERVICES keeps it)."""
    cluster = Cluster(infra_config)
    started = cluster.start()
    yield cluster
    if any(started.values()) and not os.environ.get("STEPLENS_KEEP_SERVICES"):
        cluster.stop()


LOG_TAIL_LINES = 25


def _tail(path: Path, lines: int = LOG_TAIL_LINES) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError as exc:
        return f"({exc})"


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Iterator[None]:
    """A failed cluster test carries the tail of each ClickHouse node's error log and of ZooKeeper's log: a
    cluster failure (a DDL that never finished, a replica that would not start) is told there, and CI keeps
    only the test output."""
    outcome = yield
    report = outcome.get_result()  # type: ignore[attr-defined]
    if report.when != "call" or not report.failed or "loopback_cluster" not in getattr(item, "fixturenames", ()):
        return
    cluster: Cluster = item.funcargs["loopback_cluster"]  # type: ignore[attr-defined]
    for node in cluster.clickhouse.nodes:
        report.sections.append((f"{node.name} error log (last {LOG_TAIL_LINES} lines)", _tail(node.error_log)))
    zookeeper_log = cluster.clickhouse.cfg.logs_dir / "zookeeper.log"
    report.sections.append((f"zookeeper.log (last {LOG_TAIL_LINES} lines)", _tail(zookeeper_log)))
