"""Three KRaft Kafka nodes on loopback: what `python -m infra.launcher up --cluster` starts.

Why: a single broker with replication factor 1 cannot show that nothing is lost when a
broker dies. Each node is the single-node ``KafkaBroker`` (same jars, CA, SCRAM users
seeded at format time, ACL authorizer, supervision) with its own node id, ports and
directory (``<home>/kafka<n>/``); the three are combined broker+controller nodes and the
three controllers are the KRaft voters, so one node can die and the quorum (2 of 3) and
every partition (3 replicas, ``min.insync.replicas=2``) stay available.

All nodes share one certificate (``127.0.0.1``/``localhost``, the same CN): on loopback
they are one host. Ports: node ``n`` (1..3) listens on ``STEPLENS_CLUSTER_KAFKA_PORT +
100*(n-1)`` (default 27092, 27192, 27292) and its controller on the next port (27093...).
"""

from __future__ import annotations

import contextlib
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import ClassVar

from infra.launcher.config import LOOPBACK, InfraConfig
from infra.launcher.kafka_broker import KafkaBroker, _new_cluster_id
from infra.launcher.process import InfraError
from infra.launcher.supervision import _terminate, kill_and_wait, stop_together
from infra.settings import Settings

KAFKA_NODES = 3
MIN_INSYNC = 2
# A client learns a partition's new leader from a metadata refresh, which kafka-python asks for after a
# failed reconnect to the old one (a consumer skips a leader in reconnect backoff and asks nothing).
# Killing the leader of a partition an emitter wrote to at 20 steps/s, the records sent at the kill
# reached a kafka-python consumer 2.9 and 3.2 s later with the Java clients' 1 s ceiling, 1.7 and
# 2.5 s later with 250 ms (the controller fences after 1.2-1.5 s here). A fifth of the fencing time.
CLIENT_RECONNECT_BACKOFF_MAX_S = 0.25
PORT_STEP = 100


@dataclass(frozen=True)
class KafkaClusterPorts:
    """Client port of node 1; node n uses base + 100*(n-1), its controller the port after."""

    base: int = 27092

    def client(self, node: int) -> int:
        return self.base + PORT_STEP * (node - 1)

    def controller(self, node: int) -> int:
        return self.client(node) + 1


class KafkaClusterNode(KafkaBroker):
    """One of the three combined broker+controller nodes (node ids 1..3)."""

    name: ClassVar[str] = "kafka"

    def __init__(self, cfg: InfraConfig, node: int, ports: KafkaClusterPorts) -> None:
        super().__init__(cfg)
        self.node = node
        self.cluster_ports = ports
        self.name = f"kafka{node}"  # type: ignore[misc]  # pid, lock and log names per node

    @property
    def node_id(self) -> int:
        return self.node

    @property
    def port(self) -> int:
        return self.cluster_ports.client(self.node)

    @property
    def controller_port(self) -> int:
        return self.cluster_ports.controller(self.node)

    @property
    def node_dir(self) -> Path:
        return self.cfg.home / self.name

    @property
    def node_logs_dir(self) -> Path:
        return self.cfg.logs_dir / self.name

    def quorum_voters(self) -> str:
        return ",".join(f"{n}@{LOOPBACK}:{self.cluster_ports.controller(n)}" for n in range(1, KAFKA_NODES + 1))

    def replication_properties(self) -> list[str]:
        return [
            f"offsets.topic.replication.factor={KAFKA_NODES}",
            f"transaction.state.log.replication.factor={KAFKA_NODES}",
            f"transaction.state.log.min.isr={MIN_INSYNC}",
            f"default.replication.factor={KAFKA_NODES}",
            f"min.insync.replicas={MIN_INSYNC}",
            "unclean.leader.election.enable=false",
            # Failover in ~1.2 s instead of ~10 s: the controller fences a silent broker (and moves its
            # leaderships, shrinks the ISRs it was in) after broker.session.timeout.ms (default 9 s), and
            # a lagging follower leaves the ISR after replica.lag.time.max.ms (default 30 s); until then
            # its partitions stall and acks=all writes wait. The clients give a hung request up after
            # kafka_request_timeout_s (2.5 s), by when the new leader is in the metadata they refresh.
            "broker.heartbeat.interval.ms=300",
            "broker.session.timeout.ms=1200",
            "replica.lag.time.max.ms=5000",
            # A new KRaft leader within ~1 s instead of ~3 s when the active controller dies: voters
            # call an election after fetch.timeout (default 2 s) without the leader, each after a
            # random backoff up to election.timeout (default 1 s). The new leader then fences the dead
            # node after its session timeout: alerts within 5 s through a controller kill.
            "controller.quorum.fetch.timeout.ms=600",
            "controller.quorum.election.timeout.ms=300",
            "controller.quorum.election.backoff.max.ms=300",
            # Loopback has no network to ride out; a real cluster's values: docs/deployment.md.
        ]

    def heap(self) -> list[str]:
        """The single broker's heap ceiling: at RF 3 every node holds a replica of every partition, i.e.
        the whole load one broker carries (at 384 MiB a node died of OutOfMemoryError under the
        4,096-rank scale-out load). It starts small; the JVM grows it only as needed."""
        return ["-Xms128m", KafkaBroker.heap(self)[-1]]

    def client_settings(self) -> Settings:
        return replace(self.cfg.client_settings(), kafka_bootstrap=self.bootstrap)


class KafkaCluster:
    """Start, stop and describe the three nodes together (a lone voter never becomes ready)."""

    def __init__(self, cfg: InfraConfig, ports: KafkaClusterPorts | None = None) -> None:
        self.cfg = cfg
        self.ports = ports or KafkaClusterPorts()
        self.nodes = [KafkaClusterNode(cfg, n, self.ports) for n in range(1, KAFKA_NODES + 1)]

    @property
    def bootstrap(self) -> str:
        """Every node's address: clients survive any one node being down."""
        return ",".join(node.bootstrap for node in self.nodes)

    def client_settings(self) -> Settings:
        """Three bootstrap addresses, replicated topics, and clients that find a new leader within
        the failover's own time: reconnects back off to at most CLIENT_RECONNECT_BACKOFF_MAX_S."""
        return replace(self.cfg.client_settings(), kafka_bootstrap=self.bootstrap,
                       topic_replication_factor=KAFKA_NODES, topic_min_insync_replicas=MIN_INSYNC,
                       kafka_reconnect_backoff_max_s=CLIENT_RECONNECT_BACKOFF_MAX_S)

    def install(self) -> None:
        self.nodes[0].install()

    def _share_cluster_id(self) -> None:
        """Every node is formatted with one cluster id (the first formatted node's, else a new one)."""
        cid = next((cid for node in self.nodes if (cid := node.cluster_id())), None) or _new_cluster_id()
        for node in self.nodes:
            node.node_dir.mkdir(parents=True, exist_ok=True)
            if not (node.data_dir / "meta.properties").exists():
                (node.node_dir / "cluster.id").write_text(cid + "\n")

    def start(self, timeout: float = 180.0) -> bool:
        """Launch every node that is not running, then wait for all; True if any was launched."""
        self.cfg.ensure_home()
        self.install()
        self._share_cluster_id()
        launched = {node.node: pid for node in self.nodes if (pid := node.launch()) is not None}
        deadline = time.monotonic() + timeout
        try:
            for node in self.nodes:
                node.await_ready(launched.get(node.node) or node.pid(), deadline, timeout)
        except BaseException:
            for pid in launched.values():
                with contextlib.suppress(InfraError):
                    _terminate(pid, timeout=10.0)
            raise
        if launched:
            self.nodes[0].sync_users_via(self.client_settings())
        return bool(launched)

    def start_node(self, n: int, timeout: float = 120.0) -> None:
        """Restart one node (after a kill) and wait until it is an unfenced broker again."""
        node = self.nodes[n - 1]
        pid = node.launch()
        node.await_ready(pid or node.pid(), time.monotonic() + timeout, timeout)

    def kill_node(self, n: int, sig: int) -> int:
        """Send `sig` to node `n`'s process group (tests: SIGKILL, a crash) and wait until it is gone."""
        return kill_and_wait(self.nodes[n - 1], sig)

    def stop(self) -> None:
        """All nodes at once (one by one, the last had no quorum for its controlled shutdown: 30 s)."""
        stop_together(list(self.nodes))

    def describe(self) -> str:
        return "\n".join(node.describe() for node in self.nodes)
