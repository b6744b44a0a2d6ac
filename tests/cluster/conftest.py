"""The loopback cluster, for this package only: its 8 server processes (~2.2 GB) run while these tests do."""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest

from infra import InfraConfig
from infra.cluster import Cluster


@pytest.fixture(scope="package")
def loopback_cluster(infra_config: InfraConfig) -> Iterator[Cluster]:
    """The loopback cluster of `python -m infra up --cluster` (3 Kafka nodes, ZooKeeper, 2x2 ClickHouse
    replicas; infra/cluster.py), on the STEPLENS_CLUSTER_* ports; stopped after this package's tests if
    they started it (STEPLENS_KEEP_SERVICES keeps it)."""
    cluster = Cluster(infra_config)
    started = cluster.start()
    yield cluster
    if any(started.values()) and not os.environ.get("STEPLENS_KEEP_SERVICES"):
        cluster.stop()
