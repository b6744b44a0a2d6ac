"""`python -m infra.launcher up --cluster`: 3 Kafka nodes, ZooKeeper and 2x2 ClickHouse replicas on loopback.

Why a separate facade: the cluster is another deployment of the same services (its own
ports and directories in the same home, the same secrets and CA), started and stopped as
one, and its clients need other settings (three bootstrap addresses, replicated topics, a
ClickHouse cluster name). ``client_settings`` is that one place.

Ports (environment variable, default; all outside the usual ephemeral range):
``STEPLENS_CLUSTER_KAFKA_PORT`` 29092 (nodes at +0, +100, +200; controllers one above),
``STEPLENS_ZOOKEEPER_PORT`` 29181, ``STEPLENS_CLUSTER_CLICKHOUSE_TCP_PORT`` 29000,
``STEPLENS_CLUSTER_CLICKHOUSE_HTTP_PORT`` 28123, ``STEPLENS_CLUSTER_CLICKHOUSE_INTERSERVER_PORT``
29009 (replicas at +0, +10, +20, +30).
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Mapping
from dataclasses import dataclass, replace

from infra.launcher.clickhouse_cluster import CLUSTER_NAME, ClickHouseCluster, ClickHouseClusterPorts
from infra.launcher.config import InfraConfig, _env_port
from infra.launcher.kafka_cluster import KafkaCluster, KafkaClusterPorts
from infra.launcher.process import InfraError
from infra.launcher.zookeeper import ZooKeeperServer
from infra.settings import Settings


@dataclass(frozen=True)
class ClusterPorts:
    kafka: KafkaClusterPorts
    clickhouse: ClickHouseClusterPorts

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> ClusterPorts:
        env = os.environ if env is None else env
        return cls(
            KafkaClusterPorts(_env_port(env, "STEPLENS_CLUSTER_KAFKA_PORT", 29092)),
            ClickHouseClusterPorts(
                tcp=_env_port(env, "STEPLENS_CLUSTER_CLICKHOUSE_TCP_PORT", 29000),
                http=_env_port(env, "STEPLENS_CLUSTER_CLICKHOUSE_HTTP_PORT", 28123),
                interserver=_env_port(env, "STEPLENS_CLUSTER_CLICKHOUSE_INTERSERVER_PORT", 29009),
                zookeeper=_env_port(env, "STEPLENS_ZOOKEEPER_PORT", 29181),
            ),
        )


class Cluster:
    """The whole loopback cluster: ``start`` launches what is missing, ``stop`` stops everything."""

    def __init__(self, cfg: InfraConfig, ports: ClusterPorts | None = None) -> None:
        self.cfg = cfg
        self.ports = ports or ClusterPorts.from_env()
        self.kafka = KafkaCluster(cfg, self.ports.kafka)
        self.zookeeper = ZooKeeperServer(cfg, self.ports.clickhouse.zookeeper)
        self.clickhouse = ClickHouseCluster(cfg, self.ports.clickhouse)

    def start(self) -> dict[str, bool]:
        """Start ZooKeeper, the replicas and the brokers; name -> whether this call started any."""
        self.zookeeper.install()
        started = {"zookeeper": self.zookeeper.start()}
        started["clickhouse"] = self.clickhouse.start()
        started["kafka"] = self.kafka.start()
        return started

    def stop(self) -> None:
        errors: list[str] = []
        for part in (self.kafka, self.clickhouse, self.zookeeper):
            try:
                part.stop()
            except InfraError as exc:
                errors.append(str(exc))
        if errors:
            raise InfraError("\n".join(errors))

    def wipe(self) -> list[str]:
        """Delete the cluster's data so the next `start` formats an empty cluster: each Kafka node's
        directory (log, KRaft metadata), each replica's (tables) and ZooKeeper's znodes; the jars and
        the secrets stay. Returns the directories removed; refuses while any part runs.

        Why: the brokers refuse topic deletion (docs/security.md), so every bench rig's topics stay
        on the cluster. 1,700 leftover partitions had each broker replicating idle partitions and a
        killed broker's successors taking over 1,280 leaderships, not the dozens a bench uses."""
        parts = [*self.kafka.nodes, self.zookeeper, *self.clickhouse.nodes]
        running = [part.name for part in parts if part.pid() is not None]
        if running:
            raise InfraError(f"wipe: stop the cluster first ({', '.join(running)} running)")
        dirs = [*(node.node_dir for node in self.kafka.nodes), *(node.node_dir for node in self.clickhouse.nodes),
                self.zookeeper.data_dir]
        removed = [str(d) for d in dirs if d.exists()]
        for d in dirs:
            shutil.rmtree(d, ignore_errors=True)
        return removed

    def describe(self) -> str:
        return "\n".join([self.kafka.describe(), self.zookeeper.describe(), self.clickhouse.describe(),
                          f"cluster: ClickHouse cluster `{CLUSTER_NAME}`, home {self.cfg.home}, "
                          f"logs {self.cfg.logs_dir}"])

    def client_settings(self, entry: tuple[int, int] = (1, 1)) -> Settings:
        """Settings for workers and tools on the cluster: every broker, replicated topics, and the
        ClickHouse replica `entry` (shard, replica) in cluster mode (users and passwords: the secrets
        directory, as on one server)."""
        return replace(self.kafka.client_settings(), clickhouse_url=self.clickhouse.node(*entry).url,
                       clickhouse_cluster=CLUSTER_NAME)
