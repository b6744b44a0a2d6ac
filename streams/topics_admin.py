"""Create steplens' topics and their ACLs up front, as the admin principal.

The broker has auto-creation off and denies what no ACL allows (docs/security.md), so the
topics and the per-principal rules for them (``infra.acls``) exist before any worker or
producer connects. Both calls are idempotent. Workers call this at start-up, often right
after the broker (re)started: the broker may refuse connections or not have a controller
yet for a few seconds, so creation is retried with bounded backoff until a deadline
instead of crashing the worker.
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from kafka.admin import (
    ACLFilter,
    ACLOperation,
    ACLPermissionType,
    ACLResourcePatternType,
    ConfigResource,
    ConfigResourceType,
    KafkaAdminClient,
    NewTopic,
    ResourcePatternFilter,
    ResourceType,
)
from kafka.errors import KafkaError, TopicAlreadyExistsError

from infra.acls import acl_bindings, to_kafka_acls
from infra.backoff import Backoff
from infra.clients import kafka_client_config
from infra.settings import Settings
from schemas import Topics

log = logging.getLogger(__name__)

# Dead letters may hold events up to the broker's own limit.
TOPIC_CONFIG = {"max.message.bytes": "4194304"}
ACL_TIMEOUT_S = 60.0

# Start-up retries: first wait, cap, and how long to keep trying before giving up.
RETRY_FIRST_S = 0.5
RETRY_MAX_S = 5.0
DEFAULT_WAIT_S = 120.0
CONNECT_TIMEOUT_MS = 5000  # one attempt's bootstrap wait (kafka-python's default is 30 s)


class TopicsUnavailable(RuntimeError):
    """The broker did not accept topic creation before the deadline."""

# Engine snapshots: compacted (only the newest per job matters), large values allowed.
STATE_CONFIG = {"cleanup.policy": "compact", "max.message.bytes": str(64 * 1024 * 1024)}


@dataclass(frozen=True, slots=True)
class DetectTopics:
    """The detect workers' internal topics (not part of the event contract)."""

    prefix: str = "steplens."

    @property
    def partials(self) -> str:
        """Column chunks per (job, kind, batch), keyed by job: the one shuffle of the engine."""
        return Topics(self.prefix).detect_partials

    @property
    def state(self) -> str:
        """Compacted per-job engine snapshots (streams/detect/state/store.py)."""
        return Topics(self.prefix).detect_state


def topic_configs(settings: Settings, topics: Topics) -> dict[str, dict[str, str]]:
    """Each topic's configs: the limits above, plus `min.insync.replicas` when topics are replicated."""
    replicated = {"min.insync.replicas": str(settings.topic_min_insync_replicas)}
    wanted = {name: {**TOPIC_CONFIG, **replicated} for name in topics.all()}
    wanted[topics.detect_state] = {**STATE_CONFIG, **replicated}
    return wanted


def _ensure_once(settings: Settings, topics: Topics, partitions: int) -> list[str]:
    wanted = topic_configs(settings, topics)
    admin = KafkaAdminClient(**kafka_client_config(settings, "admin"), client_id="steplens-admin",
                             bootstrap_timeout_ms=CONNECT_TIMEOUT_MS)
    try:
        existing = set(admin.list_topics())
        missing = [name for name in wanted if name not in existing]
        if missing:
            with contextlib.suppress(TopicAlreadyExistsError):  # another worker won the race
                admin.create_topics(
                    [NewTopic(name, num_partitions=partitions, replication_factor=settings.topic_replication_factor,
                              topic_configs=wanted[name])
                     for name in missing]
                )
            log.info("created topics %s", missing)
        if settings.kafka_security != "plaintext":
            grant_acls(admin, topics, settings.app_id)
        return missing
    finally:
        admin.close()


def _acl_key(acl: Any) -> tuple[str, int, str, int, int]:
    pattern = acl.resource_pattern
    return (acl.principal, int(pattern.resource_type), pattern.resource_name, int(pattern.pattern_type),
            int(acl.operation))


def grant_acls(admin: KafkaAdminClient, topics: Topics, app_id: str, timeout_s: float = ACL_TIMEOUT_S) -> None:
    """Create the ALLOW rules of every steplens principal for ``topics`` and wait until they apply.

    ACLs travel through the KRaft metadata log; the broker enforces them a moment after
    CreateAcls returns, so this polls DescribeAcls until every rule is visible.
    """
    wanted = to_kafka_acls(acl_bindings(topics, app_id))
    result = admin.create_acls(wanted)
    failed = result.get("failed", []) if isinstance(result, dict) else []
    if failed:
        raise RuntimeError(f"creating Kafka ACLs failed: {failed[:3]}")
    missing = {_acl_key(a) for a in wanted}
    everything = ACLFilter(
        principal=None, host=None, operation=ACLOperation.ANY, permission_type=ACLPermissionType.ALLOW,
        resource_pattern=ResourcePatternFilter(ResourceType.ANY, None, ACLResourcePatternType.ANY),
    )
    deadline = time.monotonic() + timeout_s
    while True:
        described, error = admin.describe_acls(everything)
        if error is None or getattr(error, "errno", 0) == 0:
            missing -= {_acl_key(a) for a in described}
        if not missing:
            return
        if time.monotonic() > deadline:
            raise RuntimeError(f"{len(missing)} Kafka ACLs not applied after {timeout_s:.0f}s: {sorted(missing)[:2]}")
        time.sleep(0.1)


def ensure_topics(
    settings: Settings,
    topics: Topics,
    partitions: int,
    wait_s: float = DEFAULT_WAIT_S,
    should_stop: Callable[[], bool] = lambda: False,
) -> list[str]:
    """Create every missing steplens topic; return the names created.

    Retries while the broker is unreachable or not ready (backoff 0.5 s doubling to 5 s),
    for at most `wait_s` seconds or until `should_stop()`; then raises TopicsUnavailable.
    """
    deadline = time.monotonic() + wait_s

    def pause(seconds: float) -> bool:  # the deadline and should_stop() are checked before each pause
        stop_at = time.monotonic() + min(seconds, max(deadline - time.monotonic(), 0.0))
        while time.monotonic() < stop_at and not should_stop():
            time.sleep(min(0.1, seconds))
        return False

    backoff = Backoff(pause, (RETRY_FIRST_S, RETRY_MAX_S))
    attempt = 0
    while True:
        attempt += 1
        try:
            return _ensure_once(settings, topics, partitions)
        except (KafkaError, OSError) as exc:
            left = deadline - time.monotonic()
            if left <= 0 or should_stop():
                raise TopicsUnavailable(
                    f"could not create topics at {settings.kafka_bootstrap} after {attempt} attempts: {exc!r}"
                ) from exc
            log.warning("topic creation failed (attempt %d, %r); retrying in %.1fs", attempt, exc,
                        min(backoff.delay, left))
            backoff.pause()


def expire_topics(settings: Settings, topics: Topics) -> list[str]:
    """Drop the data of every steplens topic under `topics`' prefix (a benchmark's own, after its run).

    Benchmarks make fresh topics per run so no earlier backlog reaches their workers; kept,
    they add up (a full bench-detection writes ~10 GB; one run filled the disk). The broker
    refuses topic deletion (`delete.topic.enable=false`, docs/security.md), so the topics get
    `retention.ms=1` instead: at its next retention check (`log.retention.check.interval.ms`,
    5 min) the broker rolls and deletes every segment, and the empty topics stay.
    Returns the names expired; failures are logged, never raised: cleanup must not lose a
    result already measured.
    """
    admin = KafkaAdminClient(**kafka_client_config(settings, "admin"), client_id="steplens-admin",
                             bootstrap_timeout_ms=CONNECT_TIMEOUT_MS)
    try:
        names = sorted(set(topics.all()) & set(admin.list_topics()))
        if names:
            admin.alter_configs([ConfigResource(ConfigResourceType.TOPIC, name, configs={"retention.ms": "1"})
                                 for name in names])
        return names
    except KafkaError as exc:
        log.warning("could not expire topics %s: %r", list(topics.all()), exc)
        return []
    finally:
        admin.close()
