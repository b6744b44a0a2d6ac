"""Tests for infra/: pure config rendering, plus the real Kafka and ClickHouse servers.

The integration tests start the shared services through the public API (or reuse them
when already running) and leave them running for the rest of the session.  The only
stop/start test uses a throw-away ClickHouse instance in a temporary home on fixed ports,
so it never disturbs the shared servers other tests talk to.
"""

from __future__ import annotations

import contextlib
import hashlib
import socket
import subprocess
import time
import uuid
import xml.etree.ElementTree as ET
from collections.abc import Iterator
from pathlib import Path

import pytest

from infra import ClickHouseServer, InfraConfig, InfraError, KafkaBroker, status, up
from infra.clients import kafka_client_config
from infra.config import REPO_ROOT
from infra.kafka_broker import _new_cluster_id

# --------------------------------------------------------------------------- unit


def test_config_defaults_and_env_overrides(tmp_path: Path) -> None:
    default = InfraConfig.from_env({})
    assert default.home == REPO_ROOT / ".steplens"
    assert (default.kafka_port, default.kafka_controller_port) == (19092, 19093)
    assert (default.clickhouse_tcp_port, default.clickhouse_http_port) == (19000, 18123)
    assert default.logs_dir == REPO_ROOT / ".steplens" / "logs"

    cfg = InfraConfig.from_env(
        {
            "STEPLENS_HOME": str(tmp_path / "h"),
            "STEPLENS_KAFKA_PORT": "29092",
            "STEPLENS_KAFKA_CONTROLLER_PORT": "29093",
            "STEPLENS_CLICKHOUSE_TCP_PORT": "29000",
            "STEPLENS_CLICKHOUSE_HTTP_PORT": "28123",
        }
    )
    assert cfg.home == (tmp_path / "h").resolve()
    assert cfg.logs_dir == cfg.home / "logs"
    assert (cfg.kafka_port, cfg.kafka_controller_port) == (29092, 29093)
    assert (cfg.clickhouse_tcp_port, cfg.clickhouse_http_port) == (29000, 28123)
    assert KafkaBroker(cfg).bootstrap == "127.0.0.1:29092"
    assert ClickHouseServer(cfg).url == "clickhouse://127.0.0.1:29000"


@pytest.mark.parametrize(
    "env",
    [
        {"STEPLENS_KAFKA_PORT": "not-a-port"},
        {"STEPLENS_CLICKHOUSE_TCP_PORT": "70000"},
        {"STEPLENS_KAFKA_PORT": "19000"},  # collides with the ClickHouse TCP default
    ],
)
def test_config_rejects_bad_ports(env: dict[str, str]) -> None:
    with pytest.raises(InfraError):
        InfraConfig.from_env(env)


def test_server_properties_single_node_kraft(tmp_path: Path) -> None:
    cfg = InfraConfig(home=tmp_path, kafka_port=29092, kafka_controller_port=29093)
    props = KafkaBroker(cfg).render_server_properties("s3cret")
    lines = set(props.splitlines())
    assert "controller.quorum.voters=1@127.0.0.1:29093" in lines
    assert "process.roles=broker,controller" in lines
    assert "node.id=1" in lines
    assert "listeners=SASL_SSL://127.0.0.1:29092,CONTROLLER://127.0.0.1:29093" in lines
    assert "advertised.listeners=SASL_SSL://127.0.0.1:29092" in lines
    assert "listener.security.protocol.map=CONTROLLER:SSL,SASL_SSL:SASL_SSL" in lines
    assert "listener.name.controller.ssl.client.auth=required" in lines
    assert "sasl.enabled.mechanisms=SCRAM-SHA-512" in lines
    assert "authorizer.class.name=org.apache.kafka.metadata.authorizer.StandardAuthorizer" in lines
    assert "allow.everyone.if.no.acl.found=false" in lines
    assert "PLAINTEXT://" not in props
    assert 'password="s3cret"' in props
    assert f"log.dirs={tmp_path.resolve() / 'kafka' / 'data'}" in lines
    for setting in (
        "offsets.topic.replication.factor=1",
        "transaction.state.log.replication.factor=1",
        "transaction.state.log.min.isr=1",
        "num.partitions=4",
        "auto.create.topics.enable=false",
        "group.initial.rebalance.delay.ms=0",
        "delete.topic.enable=false",
        "message.max.bytes=2097152",
        "log.retention.hours=24",
    ):
        assert setting in lines
    assert "0.0.0.0" not in props


def test_clickhouse_config_is_loopback_yandex_xml(tmp_path: Path) -> None:
    server = ClickHouseServer(InfraConfig(home=tmp_path))
    root = ET.fromstring(server.render_config_xml())
    assert root.tag == "yandex"
    assert [e.text for e in root.findall("listen_host")] == ["127.0.0.1"]
    assert root.findtext("tcp_port") == "19000"
    assert root.findtext("http_port") == "18123"
    assert root.find("zookeeper") is None and root.find("remote_servers") is None
    assert root.findtext("path") == f"{tmp_path.resolve()}/clickhouse/data/"
    assert root.findtext("logger/log") == str(tmp_path.resolve() / "logs" / "clickhouse-server.log")
    passwords = {"default": "d", "steplens_writer": "w", "steplens_reader": "r"}
    users = ET.fromstring(server.render_users_xml(passwords))
    assert users.tag == "yandex"
    assert users.find("users/default/password") is None  # no clear-text (or empty) password anywhere
    for name, password in passwords.items():
        digest = hashlib.sha256(password.encode()).hexdigest()
        assert users.findtext(f"users/{name}/password_sha256_hex") == digest
        assert sorted(e.text or "" for e in users.findall(f"users/{name}/networks/ip")) == ["127.0.0.1", "::1"]
    assert users.findtext("users/steplens_reader/profile") == "readonly"
    assert users.findtext("profiles/readonly/readonly") == "1"
    assert users.findtext("users/steplens_writer/profile") == "default"
    assert users.find("profiles/default/readonly") is None


def test_cluster_id_shape() -> None:
    cid = _new_cluster_id()
    assert len(cid) == 22
    assert set(cid) <= set("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_")
    assert not cid.startswith("-")


# --------------------------------------------------------------------------- integration


@pytest.fixture
def shared_cfg(kafka_bootstrap: str, clickhouse_server_url: str, infra_config: InfraConfig) -> InfraConfig:
    """The shared services, through the session fixtures of tests/conftest.py.

    Those start a service or reuse a running one, and stop at the end of the session
    only what the session started, so these tests never leave a server behind.
    ``up`` here re-checks cheaply (~0.3 s) that both are still healthy.
    """
    up(infra_config)  # raises InfraError (with log tails) if either service cannot start
    return infra_config


@pytest.mark.integration
def test_kafka_roundtrip(shared_cfg: InfraConfig) -> None:
    from kafka import KafkaAdminClient, KafkaConsumer, KafkaProducer, TopicPartition

    admin_config = kafka_client_config(shared_cfg.client_settings(), "admin")
    topic = f"infra-test-{uuid.uuid4().hex[:12]}"
    admin = KafkaAdminClient(**admin_config)
    try:
        admin.create_topics({topic: {"num_partitions": 1, "replication_factor": 1}}, wait_for_metadata=True)
        assert topic in admin.list_topics()
    finally:
        admin.close()

    producer = KafkaProducer(**admin_config)
    try:
        producer.send(topic, key=b"k", value=b"hello steplens").get(timeout=30)
    finally:
        producer.close()

    consumer = KafkaConsumer(**admin_config, enable_auto_commit=False)
    try:
        tp = TopicPartition(topic, 0)
        consumer.assign([tp])
        consumer.seek_to_beginning(tp)
        deadline = time.monotonic() + 30
        values: list[bytes] = []
        while not values and time.monotonic() < deadline:
            for records in consumer.poll(timeout_ms=1000).values():
                values.extend(r.value for r in records)
    finally:
        consumer.close()
    assert values == [b"hello steplens"]


@pytest.mark.integration
def test_clickhouse_select(shared_cfg: InfraConfig) -> None:
    from clickhouse_driver import Client

    server = ClickHouseServer(shared_cfg)
    client = Client(host="127.0.0.1", port=shared_cfg.clickhouse_tcp_port, user="default",
                    password=server.password("default"))
    try:
        assert client.execute("SELECT 1") == [(1,)]
    finally:
        client.disconnect()
    assert server.version().startswith("18.16")


@pytest.mark.integration
def test_start_is_idempotent(shared_cfg: InfraConfig) -> None:
    broker, server = KafkaBroker(shared_cfg), ClickHouseServer(shared_cfg)
    assert broker.start() is False
    assert server.start() is False
    assert up(shared_cfg) == {"clickhouse": False, "kafka": False}
    assert broker.healthy() and server.healthy()
    assert broker.pid() is not None and server.pid() is not None


@pytest.mark.integration
def test_status_names_logs_dir(shared_cfg: InfraConfig) -> None:
    text = status(shared_cfg)
    assert str(shared_cfg.logs_dir) in text
    assert "kafka" in text and "clickhouse" in text
    assert "stopped" not in text
    assert KafkaBroker(shared_cfg).bootstrap in text


# Fixed ports for the throw-away instance: the shared ones + 100 (no random test ports).
PRIVATE_PORT_OFFSET = 100


@pytest.fixture
def private_clickhouse(tmp_path: Path) -> Iterator[ClickHouseServer]:
    """A throw-away ClickHouse in a temp home on fixed ports; always stopped afterwards."""
    shared = InfraConfig.from_env()
    off = PRIVATE_PORT_OFFSET
    cfg = InfraConfig(
        home=tmp_path / "home",
        clickhouse_tcp_port=shared.clickhouse_tcp_port + off,
        clickhouse_http_port=shared.clickhouse_http_port + off,
        clickhouse_interserver_port=shared.clickhouse_interserver_port + off,
        kafka_port=shared.kafka_port + off,
        kafka_controller_port=shared.kafka_controller_port + off,
    )
    server = ClickHouseServer(cfg)
    try:
        yield server
    finally:
        server.stop()


@pytest.mark.integration
def test_clickhouse_stop_start_and_stale_pid(private_clickhouse: ClickHouseServer) -> None:
    server = private_clickhouse
    assert server.pid() is None and not server.healthy()

    # A pid file naming a process that is gone must not block the start.
    dead = subprocess.Popen(["true"])
    dead.wait()
    server.cfg.run_dir.mkdir(parents=True)
    server.pid_file.write_text(f"{dead.pid}\n")

    assert server.start(timeout=60) is True
    pid = server.pid()
    assert pid is not None and server.healthy()
    assert server.version().startswith("18.16")
    assert server.start() is False

    server.stop()
    assert server.pid() is None and not server.healthy()
    assert not server.pid_file.exists()
    assert not Path(f"/proc/{pid}").exists() or "Z" in Path(f"/proc/{pid}/stat").read_text().split()[2]
    server.stop()  # idempotent

    assert server.start(timeout=60) is True
    assert server.healthy()


@pytest.mark.integration
def test_port_taken_by_stranger(private_clickhouse: ClickHouseServer) -> None:
    with contextlib.closing(socket.socket()) as squatter:
        squatter.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        squatter.bind(("127.0.0.1", private_clickhouse.cfg.clickhouse_http_port))
        squatter.listen()
        with pytest.raises(InfraError, match=str(private_clickhouse.cfg.clickhouse_http_port)):
            private_clickhouse.start(timeout=30)
    assert private_clickhouse.pid() is None
