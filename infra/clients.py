"""How every steplens Kafka and ClickHouse client connects: addresses, credentials and TLS.

Every producer, consumer, admin client and Faust app in steplens builds its connection
settings here, naming the principal it acts as, so the broker's listeners, SCRAM users and
ACLs (set up by infra/ and ``streams.topics_admin``) and the clients can never disagree.

Principals (ACLs in ``infra/acls.py``, docs/security.md):
- ``producer``: rank hooks, samplers, the simulator: write telemetry topics, read control;
- ``detect`` / ``land`` / ``parse``: the workers;
- ``reader``: downstream alert consumers and reports (read incidents);
- ``admin``: topic and ACL creation, lag checks, tests and benchmarks (super user).

By default (``kafka_security = "sasl_ssl"``) a client authenticates with SCRAM-SHA-512 as
its principal, with the password from ``<secrets_dir>/kafka-<principal>.password``, over
TLS verified against the project CA (``<secrets_dir>/ca.pem``). ``kafka_user`` /
``kafka_password`` / ``kafka_ca_file`` override that for every client of the process (an
external cluster); ``kafka_security = "plaintext"`` talks to an unsecured broker.
"""

from __future__ import annotations

import logging
import ssl
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, Literal, TypeVar

from kafka.errors import KafkaTimeoutError

from infra.secrets import (
    CLICKHOUSE_READER,
    CLICKHOUSE_WRITER,
    clickhouse_password_file,
    kafka_password_file,
    read_secret,
)
from infra.settings import Settings

T = TypeVar("T")

Principal = Literal["producer", "detect", "land", "parse", "reader", "mitigate", "admin"]
Access = Literal["write", "read"]
SASL_MECHANISM = "SCRAM-SHA-512"
SECURITY_MODES = ("sasl_ssl", "plaintext")


class CredentialsError(RuntimeError):
    """A client cannot find the password or CA it needs; the message names the file or setting."""


def _mode(settings: Settings) -> str:
    mode = settings.kafka_security.strip().lower()
    if mode not in SECURITY_MODES:
        raise ValueError(f"setting kafka_security={settings.kafka_security!r}: expected one of {SECURITY_MODES}")
    return mode


def ca_file(settings: Settings) -> Path:
    """The CA certificate clients verify the broker with."""
    return settings.kafka_ca_file if settings.kafka_ca_file is not None else settings.secrets_path / "ca.pem"


def kafka_credentials(settings: Settings, principal: Principal) -> tuple[str, str]:
    """(user, password) for ``principal``: explicit settings win over the secrets directory."""
    user = settings.kafka_user or principal
    if settings.kafka_password:
        return user, settings.kafka_password
    path = kafka_password_file(settings.secrets_path, user)
    password = read_secret(path)
    if password is None:
        raise CredentialsError(
            f"no Kafka password for {user!r}: {path} is missing. `make up` creates it for the local broker; "
            f"for another broker set STEPLENS_KAFKA_USER/STEPLENS_KAFKA_PASSWORD (docs/security.md)"
        )
    return user, password


def ssl_context(settings: Settings) -> ssl.SSLContext:
    """A client TLS context that trusts only the configured CA and checks the broker's name."""
    path = ca_file(settings)
    if not path.is_file():
        raise CredentialsError(
            f"no Kafka CA certificate at {path}; `make up` creates it (or set STEPLENS_KAFKA_CA_FILE)"
        )
    ctx = ssl.create_default_context(ssl.Purpose.SERVER_AUTH, cafile=str(path))
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    return ctx


RECONNECT_BACKOFF_MIN_MS = 50  # kafka-python's first reconnect backoff: a ceiling below it means none


def request_timeout_ms(settings: Settings) -> int:
    """`kafka_request_timeout_s` in ms, at least one second."""
    return max(1000, int(settings.kafka_request_timeout_s * 1000))


def reconnect_backoff_max_ms(settings: Settings) -> int:
    """`kafka_reconnect_backoff_max_s` in ms, at least kafka-python's first backoff (50 ms)."""
    return max(RECONNECT_BACKOFF_MIN_MS, int(settings.kafka_reconnect_backoff_max_s * 1000))


def kafka_client_config(settings: Settings, principal: Principal) -> dict[str, Any]:
    """Keyword arguments for kafka-python's KafkaProducer / KafkaConsumer / KafkaAdminClient.

    Reconnects back off to at most `kafka_reconnect_backoff_max_s` (default 1 s, the Java clients';
    kafka-python's own is 30 s: after a broker outage every client then waited up to 30 s more before
    it even tried the broker again, and a client learns a new leader only after a failed reconnect).
    Every principal but `admin` gives a request up after `kafka_request_timeout_s` (kafka-python's
    30 s default held a send or a fetch to a broker that stopped answering for 30 s, measured as
    34 s alerts in make chaos-cluster's broker_stop); the client then refreshes its metadata and
    sends to the partition's new leader, an idempotent producer without duplicates. Admin calls
    (topic creation on a busy cluster) keep the library's default.
    """
    config: dict[str, Any] = {"bootstrap_servers": settings.kafka_bootstrap,
                              "reconnect_backoff_max_ms": reconnect_backoff_max_ms(settings)}
    if principal != "admin":
        config["request_timeout_ms"] = request_timeout_ms(settings)
    if _mode(settings) == "plaintext":
        return config
    user, password = kafka_credentials(settings, principal)
    config.update(
        security_protocol="SASL_SSL",
        sasl_mechanism=SASL_MECHANISM,
        sasl_plain_username=user,
        sasl_plain_password=password,
        ssl_context=ssl_context(settings),
    )
    return config


BOOTSTRAP_DEADLINE_S = 120.0  # `bootstrapped` gives up after this long (the caller's own retry decides then)


def bootstrapped(make: Callable[..., T], config: dict[str, Any], deadline_s: float = BOOTSTRAP_DEADLINE_S, *,
                 clock: Callable[[], float] = time.monotonic) -> T:
    """A kafka-python client `make(**config)` whose bootstrap waits on one address at most twice the request
    timeout, made again (another address, picked at random) until one connects or `deadline_s` has passed.

    Why: kafka-python bootstraps from one bootstrap address picked at random and gives that one connection the
    whole `bootstrap_timeout_ms` (30 s by default): a client created while one broker of three hangs (SIGSTOP,
    a stalled host: it accepts TCP and never answers TLS) waits 30 s one time in three before it tries another.
    Clients made on a hot path while brokers may hang (the detect worker's state store reads its snapshots on
    every rebalance) are made through this. A broker that refuses connections fails the attempt at once; the
    library's reconnect backoff spaces the next ones.
    """
    per_try_ms = 2 * int(config.get("request_timeout_ms", 30_000))
    start = clock()
    while True:
        try:
            return make(**config, bootstrap_timeout_ms=per_try_ms)
        except KafkaTimeoutError as exc:  # kafka-python 3's "Unable to bootstrap from ..."
            if clock() - start + per_try_ms / 1000 > deadline_s:
                raise
            logging.getLogger(__name__).warning("Kafka bootstrap did not finish in %d ms (%r): trying again",
                                                per_try_ms, exc)


def faust_broker_config(settings: Settings, principal: Principal) -> dict[str, Any]:
    """Keyword arguments for faust.App: the broker URL and, locked down, SCRAM credentials over TLS."""
    config: dict[str, Any] = {"broker": f"kafka://{settings.kafka_bootstrap}"}
    if _mode(settings) == "plaintext":
        return config
    import faust

    user, password = kafka_credentials(settings, principal)
    config["broker_credentials"] = faust.SASLCredentials(
        username=user, password=password, mechanism=SASL_MECHANISM, ssl_context=ssl_context(settings),
    )
    return config


def clickhouse_credentials(settings: Settings, access: Access) -> tuple[str, str] | None:
    """(user, password) for a ClickHouse server: settings, else the steplens user for ``access``.

    ``write`` (landing, migrations) uses ``steplens_writer``, ``read`` (queries, reports)
    the read-only ``steplens_reader``. None when neither settings nor a secret file name a
    user (a server of your own: credentials in the URL, or its ``default`` user).
    """
    if settings.clickhouse_user:
        return settings.clickhouse_user, settings.clickhouse_password
    user = CLICKHOUSE_WRITER if access == "write" else CLICKHOUSE_READER
    password = read_secret(clickhouse_password_file(settings.secrets_path, user))
    return None if password is None else (user, password)


def close_quietly(client: Any, what: str, timeout_s: float = 5.0) -> None:
    """Close a Kafka client that may be cut off from its broker: it is dropped either way
    (a producer whose batches expired can stay wedged; the caller builds a fresh one)."""
    try:
        client.close(timeout=timeout_s)
    except Exception as exc:
        logging.getLogger(__name__).warning("closing the %s: %r", what, exc)
