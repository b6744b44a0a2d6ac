"""Four ClickHouse 18.16 servers, 2 shards x 2 replicas, on loopback: `infra up --cluster`'s ClickHouse.

Why: the migrations' cluster DDL (``sinks/migrations/cluster.py``) and a dying replica
can only be tried against real servers. Each node is the single-node ``ClickHouseServer``
(same binary, users and passwords, loopback only) with its own ports and directory
(``<home>/clickhouse-s<shard>r<replica>/``), plus generated ``remote_servers`` (cluster
``steplens``), ``macros`` (``{shard}``, ``{replica}``), the ZooKeeper of ``infra/launcher/zookeeper.py``
and the ``distributed_ddl`` queue that ``ON CLUSTER`` statements go through.

Where inserts go, and why: through the ``Distributed`` tables, with
``insert_distributed_sync=1`` in the users' profile. The land worker writes to ``steps``
etc. as on one server; the Distributed table splits each batch by the sharding key
(``cityHash64(job)``: a job's rows, and all versions of a row, on one shard) and, being
synchronous, returns only once every shard's block is in one replica of that shard
(``internal_replication``: the replicated table copies it to the other replica), so an
insert that fails is reported to the writer, which retries it, instead of sitting in a
node-local queue. A replayed landing batch lands once: the writer rebuilds the same batch
from the same offsets, the split is deterministic, so each shard receives the same block
again and Replicated*MergeTree drops it (18.16 deduplicates the last 100 blocks per
table by the block's hash: ``insert_deduplicate``; ``insert_deduplication_token`` is newer
than 18.16). Whatever escapes that (a batch cut differently after a crash) has the same
replacing key on the same shard, and ``FINAL`` through the Distributed table collapses it.
Writing per shard instead would duplicate the sharding logic in the writer for no gain.
Replication is asynchronous: a read through the Distributed table right after an insert may
pick the other replica before it fetched the new part (tests wait until the replicas agree);
``insert_quorum`` would close that gap but fail every insert while a replica is down, so only
the migrations' records use it (``sinks/migrations/runner.py``).

Ports (env, defaults): node i = 0..3 (s1r1, s1r2, s2r1, s2r2) uses
``STEPLENS_CLUSTER_CLICKHOUSE_TCP_PORT + 10*i`` (29000), ``..._HTTP_PORT + 10*i`` (28123)
and ``..._INTERSERVER_PORT + 10*i`` (29009). The ``remote_servers`` entries connect as
``default`` (its password is in each node's 0600 config.xml): ``ON CLUSTER`` DDL and the
Distributed tables' connections need a user that may create tables everywhere.
"""

from __future__ import annotations

import contextlib
import time
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar
from xml.sax.saxutils import escape as xml_escape

from infra.launcher.clickhouse_server import ClickHouseServer
from infra.launcher.config import LOOPBACK, InfraConfig
from infra.launcher.process import InfraError
from infra.launcher.supervision import _terminate, kill_and_wait, stop_together
from infra.launcher.zookeeper import ZOOKEEPER_USER, zookeeper_password
from infra.secrets import CLICKHOUSE_DEFAULT, ensure_clickhouse_passwords

CLUSTER_NAME = "steplens"
SHARDS = 2
REPLICAS = 2


@dataclass(frozen=True)
class ClickHouseClusterPorts:
    """Ports of node 0; node i adds 10*i to each."""

    tcp: int = 29000
    http: int = 28123
    interserver: int = 29009
    zookeeper: int = 29181


class ClickHouseReplica(ClickHouseServer):
    """One server of the cluster: shard `shard` (1..2), replica `replica` (1..2)."""

    name: ClassVar[str] = "clickhouse"

    def __init__(self, cfg: InfraConfig, shard: int, replica: int, ports: ClickHouseClusterPorts) -> None:
        super().__init__(cfg)
        self.shard = shard
        self.replica = replica
        self.cluster_ports = ports
        self.name = f"clickhouse-s{shard}r{replica}"  # type: ignore[misc]  # pid, lock and log names per node

    @staticmethod
    def index(shard: int, replica: int) -> int:
        return (shard - 1) * REPLICAS + (replica - 1)

    @property
    def tcp_port(self) -> int:
        return self.cluster_ports.tcp + 10 * self.index(self.shard, self.replica)

    @property
    def http_port(self) -> int:
        return self.cluster_ports.http + 10 * self.index(self.shard, self.replica)

    @property
    def interserver_port(self) -> int:
        return self.cluster_ports.interserver + 10 * self.index(self.shard, self.replica)

    @property
    def node_dir(self) -> Path:
        return self.cfg.home / self.name

    def extra_config(self) -> str:
        password = xml_escape(ensure_clickhouse_passwords(self.cfg.secrets_dir)[CLICKHOUSE_DEFAULT])
        identity = xml_escape(f"{ZOOKEEPER_USER}:{zookeeper_password(self.cfg.secrets_dir)}")
        shards = []
        for s in range(1, SHARDS + 1):
            replicas = "".join(
                f"""                <replica>
                    <host>{LOOPBACK}</host>
                    <port>{self.cluster_ports.tcp + 10 * self.index(s, r)}</port>
                    <user>{CLICKHOUSE_DEFAULT}</user>
                    <password>{password}</password>
                </replica>
""" for r in range(1, REPLICAS + 1))
            shards.append(f"""            <shard>
                <internal_replication>true</internal_replication>
{replicas}            </shard>
""")
        return f"""    <remote_servers>
        <{CLUSTER_NAME}>
{"".join(shards)}        </{CLUSTER_NAME}>
    </remote_servers>
    <zookeeper>
        <node>
            <host>{LOOPBACK}</host>
            <port>{self.cluster_ports.zookeeper}</port>
        </node>
        <session_timeout_ms>30000</session_timeout_ms>
        <identity>{identity}</identity>
    </zookeeper>
    <macros>
        <shard>{self.shard:02d}</shard>
        <replica>r{self.replica}</replica>
    </macros>
    <distributed_ddl>
        <path>/clickhouse/task_queue/ddl</path>
    </distributed_ddl>
"""

    def extra_profile(self) -> str:
        return "            <insert_distributed_sync>1</insert_distributed_sync>\n"


class ClickHouseCluster:
    """Start, stop and describe the four replicas together."""

    def __init__(self, cfg: InfraConfig, ports: ClickHouseClusterPorts | None = None) -> None:
        self.cfg = cfg
        self.ports = ports or ClickHouseClusterPorts()
        self.nodes = [ClickHouseReplica(cfg, s, r, self.ports)
                      for s in range(1, SHARDS + 1) for r in range(1, REPLICAS + 1)]

    def node(self, shard: int, replica: int) -> ClickHouseReplica:
        return self.nodes[ClickHouseReplica.index(shard, replica)]

    def install(self) -> None:
        self.nodes[0].install()

    def start(self, timeout: float = 90.0) -> bool:
        """Launch every replica that is not running, then wait for all; True if any was launched."""
        self.install()
        launched = {node.name: pid for node in self.nodes if (pid := node.launch()) is not None}
        deadline = time.monotonic() + timeout
        try:
            for node in self.nodes:
                node.await_ready(launched.get(node.name) or node.pid(), deadline, timeout)
        except BaseException:
            for pid in launched.values():
                with contextlib.suppress(InfraError):
                    _terminate(pid, timeout=10.0)
            raise
        return bool(launched)

    def start_node(self, shard: int, replica: int, timeout: float = 60.0) -> None:
        node = self.node(shard, replica)
        pid = node.launch()
        node.await_ready(pid or node.pid(), time.monotonic() + timeout, timeout)

    def kill_node(self, shard: int, replica: int, sig: int) -> int:
        """Send `sig` to one replica (tests: SIGKILL) and wait until it is gone."""
        return kill_and_wait(self.node(shard, replica), sig)

    def stop(self) -> None:
        """All replicas at once: a replica may take its whole 30 s grace to shut down."""
        stop_together(list(self.nodes))

    def describe(self) -> str:
        return "\n".join(node.describe() for node in self.nodes)
