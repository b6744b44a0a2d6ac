"""Generated passwords, one ``0600`` file each, in ``$STEPLENS_HOME/secrets`` (``0700``).

Why: locked-down services must still start with one command on a fresh machine, so the
first ``make up`` (or test fixture) generates every password; later starts and every
client read the same files. Nothing secret is ever put on a command line or in a log.

File names: ``kafka-<principal>.password`` and ``clickhouse-<user>.password``.
"""

from __future__ import annotations

import secrets
from pathlib import Path

from infra.files import private_dir, write_private

KAFKA_PRINCIPALS = ("admin", "producer", "detect", "land", "parse", "reader", "mitigate")
CLICKHOUSE_DEFAULT = "default"
CLICKHOUSE_WRITER = "steplens_writer"
CLICKHOUSE_READER = "steplens_reader"
CLICKHOUSE_USERS = (CLICKHOUSE_DEFAULT, CLICKHOUSE_WRITER, CLICKHOUSE_READER)


def secrets_dir(home: Path) -> Path:
    """The default secrets directory of a steplens home."""
    return Path(home) / "secrets"


def kafka_password_file(directory: Path, principal: str) -> Path:
    return Path(directory) / f"kafka-{principal}.password"


def clickhouse_password_file(directory: Path, user: str) -> Path:
    return Path(directory) / f"clickhouse-{user}.password"


def read_secret(path: Path) -> str | None:
    """The secret in ``path`` (surrounding whitespace stripped), or None when there is none."""
    try:
        value = Path(path).read_text().strip()
    except FileNotFoundError:
        return None
    return value or None


def ensure_secret(path: Path) -> str:
    """The secret in ``path``, generated (32 random bytes, URL-safe text) on first use."""
    existing = read_secret(path)
    if existing is not None:
        return existing
    return replace_secret(path)


def new_secret() -> str:
    """32 random bytes as alphanumeric text: safe in JAAS, XML, URLs and Java argument files."""
    return secrets.token_urlsafe(32).replace("-", "A").replace("_", "B")


def replace_secret(path: Path) -> str:
    """Write a new secret to ``path`` (``0600``) and return it."""
    value = new_secret()
    private_dir(Path(path).parent)
    write_private(Path(path), (value + "\n").encode())
    return value


def ensure_kafka_passwords(directory: Path) -> dict[str, str]:
    """Every Kafka principal's password, generating the missing ones."""
    return {p: ensure_secret(kafka_password_file(directory, p)) for p in KAFKA_PRINCIPALS}


def ensure_clickhouse_passwords(directory: Path) -> dict[str, str]:
    """Every ClickHouse user's password, generating the missing ones."""
    return {u: ensure_secret(clickhouse_password_file(directory, u)) for u in CLICKHOUSE_USERS}
