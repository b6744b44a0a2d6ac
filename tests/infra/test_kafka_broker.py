"""infra/launcher/kafka_broker.py: the rendered single-node KRaft config (pure) and a round trip through the
real broker."""

from __future__ import annotations

import time
import uuid
from pathlib import Path

import pytest

from infra.clients import kafka_client_config
from infra.launcher import InfraConfig, KafkaBroker
from infra.launcher.kafka_broker import _new_cluster_id


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


def test_cluster_id_shape() -> None:
    cid = _new_cluster_id()
    assert len(cid) == 22
    assert set(cid) <= set("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_")
    assert not cid.startswith("-")


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
