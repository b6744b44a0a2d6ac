"""What `infra up --cluster` writes for each node (pure: rendering only, nothing started)."""

from __future__ import annotations

import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from infra.launcher import InfraConfig, KafkaBroker
from infra.launcher.clickhouse_cluster import ClickHouseCluster, ClickHouseClusterPorts
from infra.launcher.cluster import Cluster, ClusterPorts
from infra.launcher.kafka_cluster import KafkaCluster, KafkaClusterPorts
from infra.launcher.process import InfraError
from infra.launcher.zookeeper import ZooKeeperServer
from infra.settings import load_settings
from schemas import Topics
from streams.topics_admin import topic_configs


def _props(text: str) -> dict[str, str]:
    return dict(line.split("=", 1) for line in text.splitlines() if line and not line.startswith("#"))


def test_three_voters_each_on_its_own_ports_and_directory(tmp_path: Path) -> None:
    cluster = KafkaCluster(InfraConfig(home=tmp_path), KafkaClusterPorts(27092))
    props = [_props(node.render_server_properties("pw")) for node in cluster.nodes]
    voters = "1@127.0.0.1:27093,2@127.0.0.1:27193,3@127.0.0.1:27293"
    assert [p["node.id"] for p in props] == ["1", "2", "3"]
    assert all(p["controller.quorum.voters"] == voters for p in props)
    assert [p["advertised.listeners"] for p in props] == [f"SASL_SSL://127.0.0.1:{port}" for port in
                                                          (27092, 27192, 27292)]
    assert len({p["log.dirs"] for p in props}) == 3
    for p in props:  # locked down like the single node, replicated internal topics
        assert p["listener.security.protocol.map"] == "CONTROLLER:SSL,SASL_SSL:SASL_SSL"
        assert p["allow.everyone.if.no.acl.found"] == "false"
        assert p["offsets.topic.replication.factor"] == "3"
        assert p["transaction.state.log.min.isr"] == "2"
        assert p["min.insync.replicas"] == "2"
        assert p["unclean.leader.election.enable"] == "false"
    assert cluster.bootstrap == "127.0.0.1:27092,127.0.0.1:27192,127.0.0.1:27292"
    settings = cluster.client_settings()
    assert (settings.topic_replication_factor, settings.topic_min_insync_replicas) == (3, 2)


def test_each_node_may_grow_its_heap_as_far_as_the_single_broker() -> None:
    """At RF 3 every node carries a replica of every partition: the single broker's whole load (a node
    capped at 384 MiB died of OutOfMemoryError under `make bench-scaleout-cluster`'s 4,096 ranks)."""
    cfg = InfraConfig()
    single = KafkaBroker(cfg).heap()
    for node in KafkaCluster(cfg).nodes:
        assert [a for a in node.heap() if a.startswith("-Xmx")] == [a for a in single if a.startswith("-Xmx")]


def test_the_single_broker_keeps_its_properties(tmp_path: Path) -> None:
    props = _props(KafkaBroker(InfraConfig(home=tmp_path)).render_server_properties("pw"))
    assert props["node.id"] == "1" and props["controller.quorum.voters"] == "1@127.0.0.1:19093"
    assert props["offsets.topic.replication.factor"] == "1" and "min.insync.replicas" not in props
    assert props["log.dirs"] == str(tmp_path.resolve() / "kafka" / "data")


def test_replicas_get_cluster_macros_and_zookeeper(tmp_path: Path) -> None:
    cluster = ClickHouseCluster(InfraConfig(home=tmp_path), ClickHouseClusterPorts(27000, 27123, 27009, 27181))
    roots = [ET.fromstring(node.render_config_xml()) for node in cluster.nodes]
    assert [r.findtext("tcp_port") for r in roots] == ["27000", "27010", "27020", "27030"]
    assert [r.findtext("interserver_http_port") for r in roots] == ["27009", "27019", "27029", "27039"]
    assert [(r.findtext("macros/shard"), r.findtext("macros/replica")) for r in roots] == [
        ("01", "r1"), ("01", "r2"), ("02", "r1"), ("02", "r2")]
    for root in roots:
        shards = root.findall("remote_servers/steplens/shard")
        assert [[rep.findtext("port") for rep in s.findall("replica")] for s in shards] == [
            ["27000", "27010"], ["27020", "27030"]]
        assert all(s.findtext("internal_replication") == "true" for s in shards)
        assert root.findtext("zookeeper/node/port") == "27181"
        assert (root.findtext("zookeeper/identity") or "").startswith("clickhouse:")
        assert root.findtext("distributed_ddl/path")
    users = ET.fromstring(cluster.nodes[0].render_users_xml({"default": "a", "steplens_writer": "b",
                                                             "steplens_reader": "c"}))
    assert users.findtext("profiles/default/insert_distributed_sync") == "1"


def test_zookeeper_listens_on_loopback_without_admin_server(tmp_path: Path) -> None:
    cfg = _props(ZooKeeperServer(InfraConfig(home=tmp_path), 27181).render_zoo_cfg())
    assert (cfg["clientPort"], cfg["clientPortAddress"]) == ("27181", "127.0.0.1")
    assert cfg["admin.enableServer"] == "false" and cfg["4lw.commands.whitelist"] == "ruok,srvr"


def test_cluster_ports_come_from_the_environment(tmp_path: Path) -> None:
    ports = ClusterPorts.from_env({"STEPLENS_CLUSTER_KAFKA_PORT": "27092", "STEPLENS_ZOOKEEPER_PORT": "27181",
                                   "STEPLENS_CLUSTER_CLICKHOUSE_TCP_PORT": "27000"})
    assert ports.kafka.client(3) == 27292 and ports.kafka.controller(3) == 27293
    assert (ports.clickhouse.tcp, ports.clickhouse.http, ports.clickhouse.zookeeper) == (27000, 28123, 27181)
    settings = Cluster(InfraConfig(home=tmp_path), ports).client_settings(entry=(2, 1))
    assert settings.clickhouse_url == "clickhouse://127.0.0.1:27020" and settings.clickhouse_cluster == "steplens"


def test_cluster_clients_find_a_new_leader_within_the_failover(tmp_path: Path) -> None:
    """A consumer of a killed leader's partitions learnt the new leader only at its next failed
    reconnect: with a 1 s backoff ceiling up to ~1 s after the controller had fenced the node."""
    cluster = KafkaCluster(InfraConfig(home=tmp_path), KafkaClusterPorts(27092))
    settings = cluster.client_settings()
    props = _props(cluster.nodes[0].render_server_properties("pw"))
    fencing_ms = int(props["broker.session.timeout.ms"])
    assert settings.kafka_reconnect_backoff_max_s * 1000 <= fencing_ms / 4
    assert Cluster(InfraConfig(home=tmp_path)).client_settings().kafka_reconnect_backoff_max_s == \
        settings.kafka_reconnect_backoff_max_s
    assert InfraConfig(home=tmp_path).client_settings().kafka_reconnect_backoff_max_s == 1.0  # one broker: default


def test_wipe_removes_the_clusters_data_and_keeps_the_rest(tmp_path: Path) -> None:
    """The brokers refuse topic deletion, so bench rigs' topics piled up (1,700 partitions); a wipe
    empties the stopped cluster. Secrets, the single-node services and ZooKeeper's config stay."""
    cfg = InfraConfig(home=tmp_path)
    cluster = Cluster(cfg, ClusterPorts.from_env({"STEPLENS_CLUSTER_KAFKA_PORT": "27092",
                                                  "STEPLENS_ZOOKEEPER_PORT": "27181",
                                                  "STEPLENS_CLUSTER_CLICKHOUSE_TCP_PORT": "27000",
                                                  "STEPLENS_CLUSTER_CLICKHOUSE_HTTP_PORT": "27123",
                                                  "STEPLENS_CLUSTER_CLICKHOUSE_INTERSERVER_PORT": "27009"}))
    data = [*(n.node_dir / "data" for n in cluster.kafka.nodes),
            *(n.node_dir / "data" for n in cluster.clickhouse.nodes), cluster.zookeeper.data_dir]
    kept = [tmp_path / "secrets" / "ca.pem", tmp_path / "kafka" / "data" / "x", cluster.zookeeper.zoo_cfg]
    for path in data:
        path.mkdir(parents=True)
        (path / "file").write_text("x")
    for path in kept:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("x")
    removed = cluster.wipe()
    assert len(removed) == 3 + 4 + 1 and not any(p.exists() for p in data)
    assert all(p.exists() for p in kept)
    assert cluster.wipe() == []  # nothing left to remove


def test_wipe_refuses_while_a_node_runs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    cluster = Cluster(InfraConfig(home=tmp_path))
    data = cluster.kafka.nodes[1].node_dir / "data"
    data.mkdir(parents=True)
    monkeypatch.setattr(type(cluster.kafka.nodes[1]), "pid", lambda self: 4242 if self.name == "kafka2" else None)
    monkeypatch.setattr(ZooKeeperServer, "pid", lambda self: None)
    monkeypatch.setattr(type(cluster.clickhouse.nodes[0]), "pid", lambda self: None)
    with pytest.raises(InfraError, match="kafka2"):
        cluster.wipe()
    assert data.exists()


@pytest.mark.parametrize(("rf", "isr"), [(1, 1), (3, 2)])
def test_topics_carry_min_insync_replicas(rf: int, isr: int) -> None:
    settings = load_settings({"STEPLENS_TOPIC_REPLICATION_FACTOR": str(rf),
                              "STEPLENS_TOPIC_MIN_INSYNC_REPLICAS": str(isr)})
    assert settings.topic_replication_factor == rf
    configs = topic_configs(settings, Topics("x."))
    assert {c["min.insync.replicas"] for c in configs.values()} == {str(isr)}
    assert configs["x.detect-state"]["cleanup.policy"] == "compact"
