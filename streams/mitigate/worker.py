"""The mitigation worker: culprit incidents in, decisions and actions out, each once.

Loop: read the incidents, jobs and actions topics from their beginning (every partition, assigned by
hand: one worker per Slurm partition reads them all) into the book (streams/mitigate/book.py); once it
has read up to the ends it found at start, weigh every open culprit incident every `mitigate_interval_s`
through the policy, the guard rails and the scheduler (streams/mitigate/act.py), and write each new
(action id, verdict) to the actions topic before weighing the next.

Exactly once, through crashes: the keys of the actions done are on the actions topic, read back before
anything is weighed; an action done but not recorded (a kill between `scontrol` and the send) is found
done by the node's own reason, which names the incident, and recorded then, never done again.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

from kafka import KafkaConsumer, KafkaProducer, TopicPartition
from kafka.errors import KafkaError

from infra.clients import kafka_client_config
from infra.delivery import poll_through_outage, retry_through_outage
from infra.settings import Settings
from schemas import ContractError, Incident, JobEvent, MitigationAction, Topics, decode, encode
from streams.metrics import Announce, MitigateMetrics
from streams.mitigate.act import Mitigator
from streams.mitigate.book import CostPriors, MitigationBook
from streams.mitigate.guard import GuardParams
from streams.mitigate.policy import PolicyParams
from streams.mitigate.scheduler import Scheduler, SchedulerError
from streams.runtime import partitions_once_there, read_to_end, stop_on_signals

log = logging.getLogger(__name__)

POLL_MAX_S = 1.0
POLL_RECORDS = 500
SEND_TIMEOUT_S = 30.0


@dataclass(slots=True)
class MitigationStats:
    events: int = 0        # incidents, job events and actions read
    skipped: int = 0       # records that are none of those
    ticks: int = 0         # rounds of weighing
    recorded: int = 0      # action records written
    acted: int = 0         # of which carried out (verdict act)
    scheduler_errors: int = 0


def enabled_partitions(text: str) -> frozenset[str]:
    return frozenset(p.strip() for p in text.split(",") if p.strip())


def mitigator_for(settings: Settings, scheduler: Scheduler) -> Mitigator:
    """The policy and guard rails the settings name, on their partition."""
    guard = GuardParams(enabled_partitions=enabled_partitions(settings.mitigate_enabled),
                        max_drained_share=settings.mitigate_max_drained_share)
    return Mitigator(scheduler, settings.mitigate_partition, PolicyParams(min_age_s=settings.mitigate_min_age_s), guard)


def recordable(action: MitigationAction, book: MitigationBook) -> MitigationAction | None:
    """What of a decision goes on the actions topic: a verdict not yet recorded under its key. An action
    the guard found done though none is recorded (the node's reason names the incident: done, then a crash
    before the record) is recorded as done."""
    recorded = book.verdict(action.action_id)
    if action.verdict == "none" and action.why.startswith("already done"):
        if recorded == "act":
            return None
        return replace(action, verdict="act", why=f"found done ({action.why})")
    return None if recorded == action.verdict else action


class MitigationWorker:
    """Incidents, jobs and actions topics -> the actions topic; `run()` until `stop()` (or, with `once`,
    one round of weighing after reading up to the ends)."""

    def __init__(self, settings: Settings, scheduler: Scheduler, *, once: bool = False,
                 clock: Callable[[], int] = time.time_ns,
                 pace: Callable[[Incident], float | None] = lambda incident: None) -> None:
        if not settings.mitigate_partition:
            raise ValueError("no partition to mitigate on: set STEPLENS_MITIGATE_PARTITION")
        self.settings = settings
        self.topics = Topics(settings.topic_prefix)
        self.once = once
        self.clock = clock
        self.pace = pace  # the job's measured slowdown (streams/mitigate/pace.py); None: the incident's figures
        self.book = MitigationBook(CostPriors(
            checkpoint_interval_s=settings.mitigate_checkpoint_interval_s, relaunch_s=settings.mitigate_relaunch_s,
            node_gpus=settings.mitigate_node_gpus))
        self.mitigator = mitigator_for(settings, scheduler)
        self.stats = MitigationStats()
        self.metrics = MitigateMetrics()
        self.stopping = threading.Event()

    def stop(self) -> None:
        self.stopping.set()

    def run(self) -> MitigationStats:
        config = kafka_client_config(self.settings, "mitigate")
        consumer = KafkaConsumer(**config, group_id=None, enable_auto_commit=False, client_id="steplens-mitigate")
        producer = KafkaProducer(**config, acks="all", client_id="steplens-mitigate")
        try:
            self._run(consumer, lambda action: self._send(producer, action))
        finally:
            consumer.close()
            producer.close()
        return self.stats

    def _run(self, consumer: Any, send: Callable[[MitigationAction], bool]) -> None:
        parts = partitions_once_there(consumer, (self.topics.incidents, self.topics.jobs, self.topics.actions),
                                      self.stopping, "mitigate")
        if parts is None:
            return
        consumer.assign(parts)
        consumer.seek_to_beginning(*parts)
        ends = retry_through_outage(lambda: consumer.end_offsets(parts), self.stopping.wait, "mitigate end offsets")
        if ends is None:
            return
        replaying = True
        self.metrics.replaying.set(1)
        next_tick = 0
        while not self.stopping.is_set():
            polled = poll_through_outage(consumer, int(POLL_MAX_S * 1000), POLL_RECORDS, self.stopping.wait,
                                         "mitigate")
            if polled is None:
                return
            for records in polled.values():
                for record in records:
                    self._apply(record)
            if replaying:
                behind = retry_through_outage(lambda: any(consumer.position(tp) < ends[tp] for tp in parts),
                                              self.stopping.wait, "mitigate position")
                if behind is None or behind:
                    continue
                replaying = False
                self.metrics.replaying.set(0)
                log.info("mitigate: read back %d events: %d open incidents, %d actions done", self.stats.events,
                         len(self.book.open), len(self.book.done()))
            now = self.clock()
            if now >= next_tick:
                self.tick(now, send)
                next_tick = now + int(self.settings.mitigate_interval_s * 1e9)
                if self.once:
                    return

    def _apply(self, record: Any) -> None:
        try:
            event = decode(record.value, self.settings.max_event_bytes)
        except ContractError as exc:
            self.stats.skipped += 1
            self.metrics.skipped.inc()
            log.warning("mitigate: skipped %r[%d]@%d: %s", record.topic, record.partition, record.offset, exc)
            return
        if isinstance(event, Incident):
            self.book.on_incident(event, int(record.timestamp) * 1_000_000)
        elif isinstance(event, JobEvent):
            self.book.on_job(event)
        elif isinstance(event, MitigationAction):
            self.book.on_action(event)
        else:
            self.stats.skipped += 1
            self.metrics.skipped.inc()
            return
        self.stats.events += 1
        self.metrics.events.inc()

    def tick(self, now_ns: int, send: Callable[[MitigationAction], bool]) -> None:
        """Weigh every open culprit incident once (the oldest first) and record what is new."""
        self.stats.ticks += 1
        self.metrics.rounds.inc()
        self.metrics.last_round.set(now_ns / 1e9)
        self.metrics.open_incidents.set(len(self.book.open))
        self.mitigator.done = set(self.book.done())
        for incident in sorted(self.book.open.values(), key=lambda i: (i.detected_ns, i.incident_id)):
            try:
                record = self.mitigator.handle(incident, self.book.costs(incident.job),
                                               self.book.history(incident, now_ns), now_ns,
                                               slowdown=self.pace(incident))
            except SchedulerError as exc:
                self.stats.scheduler_errors += 1
                self.metrics.scheduler_errors.inc()
                log.warning("mitigate: %s: the scheduler failed (%s); weighed again in %.0f s", incident.incident_id,
                            exc, self.settings.mitigate_interval_s)
                continue
            action = recordable(record.as_action(), self.book)
            if action is not None and send(action):
                self.book.on_action(action)
                self.stats.recorded += 1
                self.stats.acted += action.verdict == "act"
                self.metrics.actions.labels(action.verdict, action.level).inc()
                log.info("mitigate: %s %s on %s: %s (%s)", action.verdict, action.level, action.host,
                         action.reason, action.why)

    def _send(self, producer: Any, action: MitigationAction) -> bool:
        """Write one record and wait for the broker (False: not written; the next round writes it)."""
        try:
            write_action(producer, self.topics, action)
        except KafkaError as exc:
            log.warning("mitigate: could not record %s (%r); recorded next round", action.action_id, exc)
            return False
        return True


def run_worker(settings: Settings, scheduler: Scheduler) -> MitigationStats:
    """`python -m streams worker --role mitigate`: in the foreground until SIGTERM/SIGINT."""
    from sinks import open_backend
    from streams.mitigate.pace import JobPace

    worker = MitigationWorker(settings, scheduler, pace=JobPace(lambda: open_backend(settings, "read")).slowdown)
    worker.metrics.serve(settings.mitigate_metrics_port, Announce.from_settings(settings))
    with stop_on_signals(worker.stop, "mitigation worker"):
        log.info("mitigate: partition %s, %s", settings.mitigate_partition,
                 "actions enabled" if settings.mitigate_partition in enabled_partitions(settings.mitigate_enabled)
                 else "dry-run (STEPLENS_MITIGATE_ENABLED does not name it)")
        stats = worker.run()
    log.info("mitigate: %s", stats)
    return stats


def write_action(producer: Any, topics: Topics, action: MitigationAction) -> None:
    """One record on the actions topic, keyed by its incident (an action, its approval and its undo stay in
    order on one partition), waiting for the broker."""
    producer.send(topics.actions, key=action.incident_id.encode(), value=encode(action)).get(timeout=SEND_TIMEOUT_S)


def recorded_actions(settings: Settings) -> dict[str, MitigationAction]:
    """Every action id's latest record on the actions topic (read from its beginning to its end)."""
    topic = Topics(settings.topic_prefix).actions
    consumer = KafkaConsumer(**kafka_client_config(settings, "mitigate"), group_id=None, enable_auto_commit=False,
                             client_id="steplens-actions")
    book = MitigationBook()
    try:
        parts = [TopicPartition(topic, p) for p in sorted(consumer.partitions_for_topic(topic) or ())]
        if not parts:
            return {}
        consumer.assign(parts)
        consumer.seek_to_beginning(*parts)
        for record in read_to_end(consumer, parts, consumer.end_offsets(parts)):
            try:
                event = decode(record.value, settings.max_event_bytes)
            except ContractError:
                continue
            if isinstance(event, MitigationAction):
                book.on_action(event)
    finally:
        consumer.close()
    return book.actions


def record_action(settings: Settings, action: MitigationAction) -> None:
    """Write one record to the actions topic (an operator's approval or undo), waiting for the broker."""
    producer = KafkaProducer(**kafka_client_config(settings, "mitigate"), acks="all", client_id="steplens-actions")
    try:
        write_action(producer, Topics(settings.topic_prefix), action)
    finally:
        producer.close()
