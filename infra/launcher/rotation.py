"""Rotate one generated password and apply it to the running service (docs/security.md).

``kafka:<principal>``: a new SCRAM credential through the admin API (the broker must run).
``kafka:admin`` also needs a broker restart for its own inter-broker login.
``clickhouse:<user>``: ``users.xml`` is rewritten; the server reloads it by itself.
"""

from __future__ import annotations

import json
import logging
from dataclasses import replace

from infra.files import write_private
from infra.launcher.clickhouse_server import ClickHouseServer
from infra.launcher.config import InfraConfig
from infra.launcher.kafka_broker import KafkaBroker
from infra.launcher.process import InfraError
from infra.secrets import (
    CLICKHOUSE_USERS,
    KAFKA_PRINCIPALS,
    clickhouse_password_file,
    kafka_password_file,
    read_secret,
    replace_secret,
)

log = logging.getLogger("infra")


def rotate(cfg: InfraConfig, target: str) -> str:
    """Rotate ``kafka:<principal>`` or ``clickhouse:<user>``; returns what the operator must do next."""
    service, _, name = target.partition(":")
    if service == "kafka" and name in KAFKA_PRINCIPALS:
        return _rotate_kafka(cfg, name)
    if service == "clickhouse" and name in CLICKHOUSE_USERS:
        return _rotate_clickhouse(cfg, name)
    choices = [f"kafka:{p}" for p in KAFKA_PRINCIPALS] + [f"clickhouse:{u}" for u in CLICKHOUSE_USERS]
    raise InfraError(f"cannot rotate {target!r}; choose one of {', '.join(choices)}")


def _rotate_kafka(cfg: InfraConfig, principal: str) -> str:
    broker = KafkaBroker(cfg)
    if not broker.healthy():
        raise InfraError("kafka: the broker must run to rotate a credential; `make up` first")
    if principal != "admin":
        replace_secret(kafka_password_file(cfg.secrets_dir, principal))
        broker.sync_users(rotate=(principal,))
        return f"kafka: new password for {principal!r}; restart the clients that use it"
    from kafka.admin import KafkaAdminClient, UserScramCredentialUpsertion

    from infra.clients import kafka_client_config

    path = kafka_password_file(cfg.secrets_dir, "admin")
    old = read_secret(path)
    if old is None:
        raise InfraError(f"kafka: {path} is missing; the admin password cannot be rotated without the current one")
    new = replace_secret(path)
    settings = replace(cfg.client_settings(), kafka_password=old)
    admin = KafkaAdminClient(**kafka_client_config(settings, "admin"), client_id="steplens-infra-rotate")
    try:
        errors = admin.alter_user_scram_credentials(
            [UserScramCredentialUpsertion("admin", "SCRAM-SHA-512", new, iterations=8192)])
    except Exception:
        write_private(path, (old + "\n").encode())  # keep the file in step with the broker
        raise
    finally:
        admin.close()
    if errors and errors.get("admin"):
        write_private(path, (old + "\n").encode())
        raise InfraError(f"kafka: rotating admin failed: {errors['admin']}")
    marker = {"admin_sha256": KafkaBroker._password_digest(new), "mechanism": "SCRAM-SHA-512"}
    write_private(cfg.kafka_dir / "security.json", json.dumps(marker).encode())
    return "kafka: new admin password; run `make down && make up` so the broker's own login uses it"


def _rotate_clickhouse(cfg: InfraConfig, user: str) -> str:
    server = ClickHouseServer(cfg)
    replace_secret(clickhouse_password_file(cfg.secrets_dir, user))
    write_private(server.users_xml, server.render_users_xml().encode())
    return f"clickhouse: new password for {user!r}; the server reloads users.xml within seconds"
