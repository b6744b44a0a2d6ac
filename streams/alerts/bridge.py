"""The Alertmanager bridge: read the incidents topic as `reader`, post alerts, then commit.

Delivery, per round:
1. poll the incidents topic (every partition, assigned by hand: one bridge reads them all)
   and apply each incident event to the book (streams/alerts/book.py);
2. post what the book says is due (new and changed incidents, re-sends of firing ones),
   retrying with backoff until Alertmanager takes them: an Alertmanager outage delays
   alerts, never drops them (nothing is committed meanwhile, and the book keeps them);
3. only then commit the consumed offsets (group `<app_id>-reader-alerts`).

Exactly one alert per incident: an alert's labels carry the incident id and never change
(streams/alerts/mapping.py), so whatever is posted twice (a re-send, a batch re-read
after a crash between post and commit, two bridges) updates the one alert Alertmanager
has. Restarts: the book is rebuilt by replaying the topic from its beginning up to the
committed offsets, without posting; the still-firing incidents are then posted once (a
refresh, see the book's docstring). The replay reads the topic's retention (a day by
default) once per start: small next to the telemetry topics.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from kafka import KafkaConsumer, TopicPartition

from infra.backoff import Backoff
from infra.clients import kafka_client_config, request_timeout_ms
from infra.delivery import poll_through_outage, retry_through_outage
from infra.settings import Settings
from schemas import ContractError, Incident, MitigationAction, Topics
from schemas.codec import decode_as
from streams.alerts.book import AlertBook
from streams.alerts.client import AlertmanagerUnavailable, post_alerts
from streams.metrics import AlertsMetrics
from streams.runtime import partitions_once_there

log = logging.getLogger(__name__)

POST_BACKOFF_S = (0.5, 10.0)  # first and longest wait between posts Alertmanager did not take
POLL_MAX_S = 1.0
POLL_RECORDS = 500
COMMIT_TIMEOUT_MS = 5000


def alerts_group(settings: Settings) -> str:
    """The bridge's consumer group: under `<app_id>-reader`, where the reader principal may commit (infra/acls.py)."""
    return f"{settings.app_id}-reader-alerts"


@dataclass(slots=True)
class BridgeStats:
    """What one run did (also exported as metrics)."""

    replayed: int = 0        # events before the committed offsets, read to rebuild the book
    events: int = 0          # events after them
    skipped: int = 0         # records that are no incident
    posted: int = 0          # alerts Alertmanager accepted
    post_failures: int = 0   # posts it did not
    commits: int = 0


class AlertBridge:
    """Incidents topic -> Alertmanager; `run()` until `stop()` (or, with `once`, until caught up)."""

    def __init__(self, settings: Settings, alertmanager_url: str, *, once: bool = False,
                 consumer: Callable[[], Any] | None = None,
                 post: Callable[[str, list[dict[str, Any]]], None] = post_alerts,
                 clock: Callable[[], int] = time.time_ns,
                 post_backoff_s: tuple[float, float] = POST_BACKOFF_S,
                 metrics: AlertsMetrics | None = None) -> None:
        if not alertmanager_url:
            raise ValueError("no Alertmanager URL: pass --alertmanager or set STEPLENS_ALERTMANAGER_URL")
        self.settings = settings
        self.url = alertmanager_url
        self.once = once
        topics = Topics(settings.topic_prefix)
        self.topic = topics.incidents
        self.read_topics = (topics.incidents, topics.actions)  # the mitigation stage's actions alert too
        live = settings.live_url.rstrip("/")
        self.book = AlertBook(settings.alerts_resend_s, settings.alerts_report_url,
                              generator_template=f"{live}/incident/{{incident_id}}" if live else "",
                              runbook_base=settings.alerts_runbook_url)
        self._consumer = consumer or self._kafka_consumer
        self._post = post
        self._clock = clock
        self.post_backoff_s = post_backoff_s
        self.metrics = metrics or AlertsMetrics()
        self.stats = BridgeStats()
        self.stopping = threading.Event()

    def _kafka_consumer(self) -> Any:
        config = kafka_client_config(self.settings, "reader")
        if self.once:  # `steplens alerts forward --once` at a terminal: a broker that is down is said in seconds
            config["bootstrap_timeout_ms"] = 2 * request_timeout_ms(self.settings)
        return KafkaConsumer(**config, group_id=alerts_group(self.settings), enable_auto_commit=False,
                             auto_offset_reset="earliest", client_id="steplens-alerts")

    def stop(self) -> None:
        self.stopping.set()

    def run(self) -> BridgeStats:
        consumer = self._consumer()
        try:
            self._run(consumer)
        finally:
            consumer.close()
        return self.stats

    # --- the loop -----------------------------------------------------------------------
    def _run(self, consumer: Any) -> None:
        parts = partitions_once_there(consumer, self.read_topics, self.stopping, "alerts")
        if parts is None:
            return
        consumer.assign(parts)
        committed: dict[TopicPartition, int] = {}
        for tp in parts:
            offset = retry_through_outage(lambda tp=tp: consumer.committed(tp), self.stopping.wait,  # type: ignore[misc]
                                          "alerts committed offsets")
            committed[tp] = int(offset or 0)
        consumer.seek_to_beginning(*parts)
        log.info("alerts: rebuilding firing incidents and actions up to committed offsets %s",
                 {f"{tp.topic}[{tp.partition}]": o for tp, o in committed.items()})
        replaying = bool(any(committed.values()))
        dirty = False  # records consumed since the last commit
        while not self.stopping.is_set():
            wait_s = POLL_MAX_S
            due_ns = self.book.next_due_ns()
            if due_ns is not None and not replaying:
                wait_s = min(wait_s, max(0.0, (due_ns - self._clock()) / 1e9))
            polled = poll_through_outage(consumer, int(wait_s * 1000), POLL_RECORDS, self.stopping.wait, "alerts")
            if polled is None:
                return
            for tp, records in polled.items():
                for record in records:
                    self._apply(record, record.offset < committed.get(tp, 0))
                    dirty = True
            if replaying:
                behind = retry_through_outage(lambda: any(consumer.position(tp) < committed[tp] for tp in parts),
                                              self.stopping.wait, "alerts position")
                if behind is None:
                    return
                replaying = behind
                if replaying:
                    continue
                log.info("alerts: %d events replayed, %d incidents firing", self.stats.replayed, self.book.firing())
            if not self._post_due():
                return  # stopping while Alertmanager was away: nothing committed, the next run posts it
            if dirty and self._commit(consumer):
                dirty = False
            if self.once and not dirty and retry_through_outage(lambda: self._caught_up(consumer, parts),
                                                                self.stopping.wait, "alerts end offsets"):
                return

    def _apply(self, record: Any, replay: bool) -> None:
        try:
            event = decode_as(MitigationAction if record.topic != self.topic else Incident, record.value,
                              self.settings.max_event_bytes)
        except ContractError as exc:
            self.stats.skipped += 1
            self.metrics.skipped.inc()
            log.warning("alerts: skipped %r[%d]@%d, not an incident or action: %s", record.topic, record.partition,
                        record.offset, exc)
            return
        if isinstance(event, Incident):
            self.book.apply(event, replay=replay)
        else:
            self.book.apply_action(event, replay=replay)
        if replay:
            self.stats.replayed += 1
        else:
            self.stats.events += 1
            self.metrics.events.inc()

    def _post_due(self) -> bool:
        """Post every due alert, retrying until Alertmanager takes them; False: stopped first."""
        backoff = Backoff(self.stopping.wait, self.post_backoff_s)
        while True:
            now = self._clock()
            due = self.book.due(now)
            if not due:
                self.metrics.firing.set(self.book.firing())
                return True
            try:
                self._post(self.url, [body for _, body in due])
            except AlertmanagerUnavailable as exc:
                self.stats.post_failures += 1
                self.metrics.post_failures.inc()
                log.warning("alerts: Alertmanager did not take %d alerts (%s); retrying in %.1f s", len(due), exc,
                            backoff.delay)
                if backoff.pause():
                    return False
                continue
            self.book.posted([incident_id for incident_id, _ in due], now)
            self.stats.posted += len(due)
            self.metrics.posts.inc(len(due))
            self.metrics.last_post.set(now / 1e9)
            self.metrics.firing.set(self.book.firing())
            return True

    def _commit(self, consumer: Any) -> bool:
        done = retry_through_outage(lambda: consumer.commit(timeout_ms=COMMIT_TIMEOUT_MS) or True,
                                    self.stopping.wait, "alerts commit")
        if done:
            self.stats.commits += 1
        return bool(done)

    def _caught_up(self, consumer: Any, parts: list[TopicPartition]) -> bool:
        ends = consumer.end_offsets(parts)
        return all(consumer.position(tp) >= ends[tp] for tp in parts)
