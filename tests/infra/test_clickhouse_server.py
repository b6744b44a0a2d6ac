"""infra/launcher/clickhouse_server.py: the rendered config (pure), the real server, and a throw-away instance
in a temporary home on fixed ports for the stop/start tests (the shared servers are never disturbed)."""

from __future__ import annotations

import contextlib
import hashlib
import socket
import subprocess
import xml.etree.ElementTree as ET
from collections.abc import Iterator
from pathlib import Path

import pytest

from infra.launcher import ClickHouseServer, InfraConfig, InfraError


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
