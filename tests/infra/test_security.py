"""Lock-down acceptance: who may write where on the real broker, the read-only ClickHouse user
on the real 18.16 server, private files, the ephemeral-port warning, and the pure pieces
(ACL table, TLS material, client configuration) they rest on.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import ipaddress
import logging
import os
import stat
import time
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from cryptography import x509
from kafka import KafkaConsumer, KafkaProducer, TopicPartition
from kafka.errors import KafkaTimeoutError, TopicAuthorizationFailedError, TopicDeletionDisabledError

from infra.acls import acl_bindings
from infra.clients import CredentialsError, clickhouse_credentials, faust_broker_config, kafka_client_config
from infra.files import mode_of, private_dir, write_private
from infra.launcher import ClickHouseServer, InfraConfig, InfraError, KafkaBroker
from infra.launcher.ports import ephemeral_port_warnings, ephemeral_range
from infra.launcher.rotation import rotate
from infra.launcher.tls import BROKER_NAME, ensure_tls
from infra.secrets import CLICKHOUSE_READER, CLICKHOUSE_WRITER, KAFKA_PRINCIPALS, ensure_secret
from infra.settings import Settings, load_settings
from producers.spool import Spool
from schemas import Topics
from sinks import SinkError, open_backend
from sinks.server import ServerBackend
from streams.topics_admin import ensure_topics

# --------------------------------------------------------------------------- Kafka, real broker


@pytest.fixture
def locked_topics(kafka_settings: Settings, unique_name: str) -> Iterator[tuple[Settings, Topics]]:
    settings = replace(kafka_settings, topic_prefix=f"{unique_name}.", app_id=unique_name)
    topics = Topics(settings.topic_prefix)
    ensure_topics(settings, topics, 1)
    yield settings, topics


def _end_offsets(settings: Settings, names: list[str]) -> dict[str, int]:
    consumer = KafkaConsumer(**kafka_client_config(settings, "admin"), enable_auto_commit=False)
    try:
        parts = [TopicPartition(n, 0) for n in names]
        return {tp.topic: off for tp, off in consumer.end_offsets(parts).items()}
    finally:
        consumer.close()


def _send(config: dict[str, Any], topic: str, connect_s: float = 20.0) -> None:
    ms = int(connect_s * 1000)
    producer = KafkaProducer(**{**config, "request_timeout_ms": 10_000}, acks="all", max_block_ms=ms,
                             bootstrap_timeout_ms=ms, retries=0)
    try:
        producer.send(topic, key=b"forged", value=b'{"type":"incident"}').get(timeout=30)
    finally:
        producer.close(timeout=5)


@pytest.mark.kafka
@pytest.mark.integration
def test_producer_principal_writes_telemetry_but_not_incidents_or_control(
    locked_topics: tuple[Settings, Topics],
) -> None:
    settings, topics = locked_topics
    producer_config = kafka_client_config(settings, "producer")
    _send(producer_config, topics.steps)  # allowed: proves the credentials themselves work
    for forbidden in (topics.incidents, topics.control, topics.deadletter):
        with pytest.raises(TopicAuthorizationFailedError):
            _send(producer_config, forbidden)
    # only detect writes control; land and reader may not forge incidents either
    _send(kafka_client_config(settings, "detect"), topics.control)
    for principal in ("land", "reader"):
        with pytest.raises(TopicAuthorizationFailedError):
            _send(kafka_client_config(settings, principal), topics.incidents)  # type: ignore[arg-type]
    ends = _end_offsets(settings, [topics.steps, topics.incidents, topics.control, topics.deadletter])
    assert ends == {topics.steps: 1, topics.incidents: 0, topics.control: 1, topics.deadletter: 0}


def _broker_log_grows_by(log: Path, offset: int, needle: str, timeout_s: float = 30.0) -> bool:
    """Whether the broker logged ``needle`` after byte ``offset`` (polled: log4j flushes on its own)."""
    deadline = time.monotonic() + timeout_s
    while True:
        with log.open("rb") as fh:
            fh.seek(offset)
            if needle in fh.read().decode(errors="replace"):
                return True
        if time.monotonic() > deadline:
            return False
        time.sleep(0.2)


@pytest.mark.kafka
@pytest.mark.integration
def test_clients_without_valid_credentials_cannot_write(
    locked_topics: tuple[Settings, Topics], infra_config: InfraConfig
) -> None:
    settings, topics = locked_topics
    secured = kafka_client_config(settings, "producer")
    broker_log = KafkaBroker(infra_config).out_file
    # (client configuration, what the broker logs when it refuses it; None: TLS refuses before Kafka sees a request)
    attempts: dict[str, tuple[dict[str, Any], str | None]] = {
        "no credentials, no TLS": ({"bootstrap_servers": settings.kafka_bootstrap}, None),
        "TLS but no credentials": (
            {"bootstrap_servers": settings.kafka_bootstrap, "security_protocol": "SSL",
             "ssl_context": secured["ssl_context"]},
            "during SASL handshake",
        ),
        "wrong password": (
            kafka_client_config(replace(settings, kafka_password="not-the-password"), "producer"),
            "invalid credentials with SASL mechanism SCRAM-SHA-512",
        ),
        "unknown user": (
            kafka_client_config(replace(settings, kafka_user="mallory", kafka_password="x"), "producer"),
            "invalid credentials with SASL mechanism SCRAM-SHA-512",
        ),
    }
    for i, (name, (config, refusal)) in enumerate(attempts.items()):
        offset = broker_log.stat().st_size
        with pytest.raises(KafkaTimeoutError, match="Unable to bootstrap"):
            _send(config, (topics.incidents, topics.control)[i % 2], connect_s=4.0)
        if refusal is not None:
            assert _broker_log_grows_by(broker_log, offset, refusal), f"{name}: broker did not log {refusal!r}"
    ends = _end_offsets(settings, [topics.incidents, topics.control])
    assert ends == {topics.incidents: 0, topics.control: 0}


@pytest.mark.kafka
@pytest.mark.integration
def test_broker_refuses_topic_auto_creation_and_deletion(locked_topics: tuple[Settings, Topics]) -> None:
    from kafka.admin import KafkaAdminClient

    settings, topics = locked_topics
    admin = KafkaAdminClient(**kafka_client_config(settings, "admin"))
    try:
        with pytest.raises(TopicDeletionDisabledError):
            admin.delete_topics([topics.steps])
        assert topics.steps in admin.list_topics()
    finally:
        admin.close()
    # even the admin cannot create a topic by producing to it
    with pytest.raises(KafkaTimeoutError):
        producer = KafkaProducer(**kafka_client_config(settings, "admin"), max_block_ms=3000)
        try:
            producer.send(f"{topics.prefix}auto-created", b"x").get(timeout=10)
        finally:
            producer.close(timeout=5)


# --------------------------------------------------------------------------- ClickHouse, real 18.16 server


@pytest.mark.clickhouse
@pytest.mark.integration
def test_read_only_user_cannot_insert_or_change_schema(
    clickhouse_server_url: str, clickhouse_reader_url: str, unique_name: str
) -> None:
    database = f"steplens_{unique_name}"
    with ServerBackend(clickhouse_server_url, database) as writer:
        writer.execute(f"CREATE TABLE {database}.t (x UInt32) ENGINE = MergeTree ORDER BY x")
        writer.insert("t", ["x"], [(1,), (2,)])
        try:
            with ServerBackend(clickhouse_reader_url, database, create_database=False) as reader:
                assert reader.query(f"SELECT sum(x) FROM {database}.t") == [(3,)]
                with pytest.raises(SinkError, match=r"(?i)readonly"):
                    reader.insert("t", ["x"], [(3,)])
                with pytest.raises(SinkError, match=r"(?i)readonly"):
                    reader.execute(f"DROP TABLE {database}.t")
                with pytest.raises(SinkError, match=r"(?i)readonly"):
                    reader.execute("CREATE DATABASE steplens_reader_must_not")
            assert writer.query(f"SELECT count() FROM {database}.t") == [(2,)]
        finally:
            writer.execute(f"DROP DATABASE IF EXISTS {database}")


@pytest.mark.clickhouse
@pytest.mark.integration
def test_no_clickhouse_user_works_without_its_password(
    clickhouse_service: ClickHouseServer, clickhouse_server_url: str
) -> None:
    host_port = f"127.0.0.1:{clickhouse_service.cfg.clickhouse_tcp_port}"
    for user in ("default", CLICKHOUSE_WRITER, CLICKHOUSE_READER):
        for password in ("", "wrong"):
            backend = ServerBackend(f"clickhouse://{user}:{password}@{host_port}", "default", create_database=False)
            with pytest.raises(SinkError, match=r"(?i)password|authentication"):
                backend.query("SELECT 1")
            backend.close()
        with ServerBackend(f"clickhouse://{user}:{clickhouse_service.password(user)}@{host_port}", "default",
                           create_database=False) as backend:
            assert backend.query("SELECT 1") == [(1,)]


@pytest.mark.clickhouse
@pytest.mark.integration
def test_open_backend_picks_writer_to_land_and_reader_to_query(
    clickhouse_service: ClickHouseServer, unique_name: str
) -> None:
    cfg = clickhouse_service.cfg
    settings = Settings(home=cfg.home, secrets_dir=cfg.secrets_dir, clickhouse_url=clickhouse_service.url,
                        clickhouse_database=f"steplens_{unique_name}")
    writer_password = clickhouse_service.password(CLICKHOUSE_WRITER)
    assert clickhouse_credentials(settings, "write") == (CLICKHOUSE_WRITER, writer_password)
    writer = open_backend(settings)
    try:
        writer.execute(f"CREATE TABLE {writer.database}.t (x UInt8) ENGINE = Memory")
        reader = open_backend(settings, "read")
        try:
            assert reader.query(f"SELECT count() FROM {reader.database}.t") == [(0,)]
            with pytest.raises(SinkError, match=r"(?i)readonly"):
                reader.insert("t", ["x"], [(1,)])
        finally:
            reader.close()
    finally:
        writer.execute(f"DROP DATABASE IF EXISTS {writer.database}")
        writer.close()


# --------------------------------------------------------------------------- files


@pytest.mark.kafka
@pytest.mark.clickhouse
@pytest.mark.integration
def test_started_services_leave_home_and_secrets_private(
    kafka_bootstrap: str, clickhouse_service: ClickHouseServer, infra_config: InfraConfig
) -> None:
    assert mode_of(infra_config.home) == 0o700
    assert mode_of(infra_config.secrets_dir) == 0o700
    secrets = list(infra_config.secrets_dir.iterdir())
    assert {f"kafka-{p}.password" for p in KAFKA_PRINCIPALS} <= {p.name for p in secrets}
    for path in secrets:
        assert mode_of(path) == 0o600, path
    assert mode_of(KafkaBroker(infra_config).server_properties) == 0o600  # holds the inter-broker password
    assert mode_of(clickhouse_service.users_xml) == 0o600


def test_private_dir_creates_and_tightens(tmp_path: Path) -> None:
    created = private_dir(tmp_path / "a" / "home")
    assert mode_of(created) == 0o700
    loose = tmp_path / "loose"
    loose.mkdir(mode=0o755)
    loose.chmod(0o755)
    private_dir(loose)
    assert mode_of(loose) == 0o700


def test_secrets_are_0600_whatever_the_umask(tmp_path: Path) -> None:
    old = os.umask(0)
    try:
        value = ensure_secret(tmp_path / "s" / "kafka-x.password")
        write_private(tmp_path / "s" / "other", b"data")
    finally:
        os.umask(old)
    assert mode_of(tmp_path / "s") == 0o700
    assert mode_of(tmp_path / "s" / "kafka-x.password") == 0o600
    assert mode_of(tmp_path / "s" / "other") == 0o600
    assert ensure_secret(tmp_path / "s" / "kafka-x.password") == value  # generated once, then read
    assert len(value) >= 32 and value.isalnum()


def test_spool_directory_is_private(tmp_path: Path) -> None:
    old = os.umask(0)
    try:
        Spool(tmp_path / "spool", max_bytes=1 << 20)
    finally:
        os.umask(old)
    assert stat.S_IMODE((tmp_path / "spool").stat().st_mode) == 0o700


# --------------------------------------------------------------------------- ports


def test_ephemeral_range_is_read_and_ports_inside_it_warned(tmp_path: Path) -> None:
    range_file = tmp_path / "ip_local_port_range"
    range_file.write_text("32768\t60999\n")
    port_range = ephemeral_range(range_file)
    assert port_range == (32768, 60999)
    warnings = ephemeral_port_warnings({"kafka": 19092, "clickhouse": 40000, "edge": 60999}, port_range)
    assert len(warnings) == 2
    assert "clickhouse=40000" in warnings[0] and "32768-60999" in warnings[0]
    assert "edge=60999" in warnings[1]
    assert ephemeral_port_warnings({"kafka": 40000}, None) == []
    assert ephemeral_range(tmp_path / "missing") is None


def test_service_start_warns_about_an_ephemeral_port(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    port_range = ephemeral_range()
    assert port_range is not None, "this Linux machine must expose net.ipv4.ip_local_port_range"
    inside = port_range[0] + 7
    cfg = InfraConfig(home=tmp_path, clickhouse_tcp_port=inside)
    with caplog.at_level(logging.WARNING, logger="infra"):
        ClickHouseServer(cfg)._warn_ephemeral_ports()
    assert f"={inside} lies inside the kernel's ephemeral port range" in caplog.text
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="infra"):
        ClickHouseServer(InfraConfig(home=tmp_path))._warn_ephemeral_ports()  # defaults sit below the range
    assert "ephemeral" not in caplog.text


# --------------------------------------------------------------------------- pure pieces


def test_acl_table_keeps_incidents_and_control_to_the_workers() -> None:
    topics = Topics("p.")
    rules = acl_bindings(topics, "app")
    writers = {(b.name, b.principal) for b in rules if b.operation == "WRITE" and b.resource == "TOPIC"}
    assert {p for n, p in writers if n == topics.incidents} == {"User:detect", "User:parse"}
    assert {p for n, p in writers if n == topics.control} == {"User:detect"}
    producer_writes = {n for n, p in writers if p == "User:producer"}
    assert producer_writes == set(topics.inputs())
    readers = {(b.name, b.principal) for b in rules if b.operation == "READ" and b.resource == "TOPIC"}
    assert {p for n, p in readers if n == topics.incidents} == {"User:land", "User:reader", "User:detect",
                                                                "User:mitigate"}
    assert {p for n, p in writers if n == topics.actions} == {"User:mitigate"}  # only the policy acts
    assert {p for n, p in readers if n == topics.control} == {"User:land", "User:parse", "User:producer",
                                                              "User:detect"}
    assert not [b for b in rules if b.pattern == "PREFIXED" and not b.name.startswith("app-")]
    assert not [b for b in rules if b.principal == "User:admin"]  # super user, needs no rule


def test_tls_material_names_loopback_and_is_reused(tmp_path: Path) -> None:
    files = ensure_tls(tmp_path / "secrets")
    ca = x509.load_pem_x509_certificate(files.ca_cert.read_bytes())
    chain = x509.load_pem_x509_certificates(files.broker_keystore.read_bytes())
    assert b"PRIVATE KEY" in files.broker_keystore.read_bytes()
    broker = chain[0]
    assert broker.issuer == ca.subject
    assert broker.subject.rfc4514_string() == f"CN={BROKER_NAME}"
    san = broker.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert ipaddress.ip_address("127.0.0.1") in san.get_values_for_type(x509.IPAddress)
    assert "localhost" in san.get_values_for_type(x509.DNSName)
    broker.verify_directly_issued_by(ca)
    for path in (files.ca_key, files.broker_keystore):
        assert mode_of(path) == 0o600
    before = files.broker_keystore.read_bytes()
    ensure_tls(tmp_path / "secrets")
    assert files.broker_keystore.read_bytes() == before
    # close to expiry: the broker certificate is re-issued by the same CA
    ensure_tls(tmp_path / "secrets", now=broker.not_valid_after_utc - dt.timedelta(days=1))
    assert files.broker_keystore.read_bytes() != before


def test_client_config_reads_secrets_and_honours_overrides(tmp_path: Path) -> None:
    settings = Settings(home=tmp_path, kafka_bootstrap="127.0.0.1:1")
    with pytest.raises(CredentialsError, match=r"kafka-producer\.password"):
        kafka_client_config(settings, "producer")
    ensure_tls(settings.secrets_path)
    ensure_secret(settings.secrets_path / "kafka-producer.password")
    config = kafka_client_config(settings, "producer")
    assert config["security_protocol"] == "SASL_SSL" and config["sasl_mechanism"] == "SCRAM-SHA-512"
    assert config["sasl_plain_username"] == "producer"
    assert config["sasl_plain_password"] == (settings.secrets_path / "kafka-producer.password").read_text().strip()
    assert config["ssl_context"].check_hostname
    other = kafka_client_config(replace(settings, kafka_user="svc", kafka_password="pw"), "detect")
    assert (other["sasl_plain_username"], other["sasl_plain_password"]) == ("svc", "pw")
    assert kafka_client_config(replace(settings, kafka_security="plaintext"), "admin") == {
        "bootstrap_servers": "127.0.0.1:1", "reconnect_backoff_max_ms": 1000}
    assert config["reconnect_backoff_max_ms"] == 1000  # secured too
    with pytest.raises(ValueError, match="kafka_security"):
        kafka_client_config(replace(settings, kafka_security="ssl-ish"), "admin")
    creds = faust_broker_config(settings, "producer")["broker_credentials"]
    assert (creds.username, creds.mechanism.value, creds.protocol.value) == ("producer", "SCRAM-SHA-512", "SASL_SSL")


def test_clickhouse_credentials_resolution(tmp_path: Path) -> None:
    settings = Settings(home=tmp_path, clickhouse_url="clickhouse://127.0.0.1:1")
    assert clickhouse_credentials(settings, "write") is None  # a server of your own: URL or its default user
    ensure_secret(settings.secrets_path / f"clickhouse-{CLICKHOUSE_READER}.password")
    user, _ = clickhouse_credentials(settings, "read") or ("", "")
    assert user == CLICKHOUSE_READER
    assert clickhouse_credentials(replace(settings, clickhouse_user="u", clickhouse_password="p"), "read") == ("u", "p")


# --------------------------------------------------------------------------- rotation


@pytest.mark.kafka
@pytest.mark.integration
def test_rotating_a_kafka_principal_replaces_its_credential(
    locked_topics: tuple[Settings, Topics], infra_config: InfraConfig
) -> None:
    settings, topics = locked_topics
    old = kafka_client_config(settings, "parse")["sasl_plain_password"]
    rotate(infra_config, "kafka:parse")
    new = kafka_client_config(settings, "parse")["sasl_plain_password"]
    assert new != old and mode_of(infra_config.secrets_dir / "kafka-parse.password") == 0o600
    _send(kafka_client_config(settings, "parse"), topics.incidents)  # the new password works at once
    with pytest.raises(KafkaTimeoutError):
        _send(kafka_client_config(replace(settings, kafka_password=old), "parse"), topics.incidents, connect_s=4.0)


def test_rotating_a_clickhouse_user_rewrites_users_xml(tmp_path: Path) -> None:
    cfg = InfraConfig(home=tmp_path)
    server = ClickHouseServer(cfg)
    write_private(server.users_xml, server.render_users_xml().encode())
    before = server.users_xml.read_text()
    old = server.password(CLICKHOUSE_READER)
    rotate(cfg, f"clickhouse:{CLICKHOUSE_READER}")
    new = server.password(CLICKHOUSE_READER)
    assert new != old
    after = server.users_xml.read_text()
    assert hashlib.sha256(new.encode()).hexdigest() in after
    assert hashlib.sha256(old.encode()).hexdigest() in before and hashlib.sha256(old.encode()).hexdigest() not in after
    assert mode_of(server.users_xml) == 0o600
    with pytest.raises(InfraError, match="cannot rotate"):
        rotate(cfg, "kafka:mallory")


def test_pre_lockdown_instances_are_recognised_for_a_restart(tmp_path: Path) -> None:
    cfg = InfraConfig(home=tmp_path)
    broker, server = KafkaBroker(cfg), ClickHouseServer(cfg)
    assert not broker._outdated() and not server._outdated()  # nothing written yet: nothing to restart
    broker.config_dir.mkdir(parents=True)
    broker.server_properties.write_text("listeners=PLAINTEXT://127.0.0.1:1,CONTROLLER://127.0.0.1:2\n")
    server.users_xml.parent.mkdir(parents=True)
    server.users_xml.write_text("<yandex><users><default><password></password></default></users></yandex>")
    assert broker._outdated() and server._outdated()
    broker.server_properties.write_text(broker.render_server_properties("pw"))
    server.users_xml.write_text(server.render_users_xml())
    assert not broker._outdated() and not server._outdated()
    assert f"super.users=User:admin;User:CN={BROKER_NAME}" in broker.server_properties.read_text()


def test_every_client_but_admin_gives_a_hung_request_up_after_the_request_timeout(tmp_path: Path) -> None:
    """A broker that stopped answering (SIGSTOP) held kafka-python's 30 s default request: 34 s
    alerts in make chaos-cluster's broker_stop. Admin calls keep the library's default."""
    plain = Settings(home=tmp_path, kafka_bootstrap="127.0.0.1:1", kafka_security="plaintext")
    for principal in ("producer", "detect", "land", "parse", "reader"):
        assert kafka_client_config(plain, principal)["request_timeout_ms"] == 2500  # type: ignore[arg-type]
    assert "request_timeout_ms" not in kafka_client_config(plain, "admin")
    assert kafka_client_config(replace(plain, kafka_request_timeout_s=4.0), "detect")["request_timeout_ms"] == 4000
    assert kafka_client_config(replace(plain, kafka_request_timeout_s=0.1), "detect")["request_timeout_ms"] == 1000
    assert load_settings({"STEPLENS_KAFKA_REQUEST_TIMEOUT_S": "3.5"}).kafka_request_timeout_s == 3.5


def test_reconnect_backoff_ceiling_comes_from_the_settings(tmp_path: Path) -> None:
    """kafka-python refreshes metadata (learns a new leader) after a failed reconnect, so the ceiling
    bounds how long a client lags the controller's failover; it was a module constant of 1 s."""
    plain = Settings(home=tmp_path, kafka_bootstrap="127.0.0.1:1", kafka_security="plaintext")
    for principal in ("producer", "detect", "land", "parse", "reader", "admin"):
        assert kafka_client_config(plain, principal)["reconnect_backoff_max_ms"] == 1000  # type: ignore[arg-type]
    assert kafka_client_config(replace(plain, kafka_reconnect_backoff_max_s=0.25), "detect")[
        "reconnect_backoff_max_ms"] == 250
    assert kafka_client_config(replace(plain, kafka_reconnect_backoff_max_s=0.0), "land")[
        "reconnect_backoff_max_ms"] == 50  # never below kafka-python's first backoff
    assert load_settings({"STEPLENS_KAFKA_RECONNECT_BACKOFF_MAX_S": "0.3"}).kafka_reconnect_backoff_max_s == 0.3
