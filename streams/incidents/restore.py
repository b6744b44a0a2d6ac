"""Rebuild the incident ledger at detect start-up by reading back what detect published.

The alerts (incidents) and control topics are the record of what was opened, resolved and
requested. They are read from `lookback_s` ago (offsets by time; the topics' retention
bounds it anyway) up to their end offsets at start-up, oldest first, before the worker
consumes anything; undecodable messages are skipped (the landing worker dead-letters them).
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field

from kafka import KafkaConsumer, TopicPartition
from kafka.errors import KafkaError

from infra.clients import kafka_client_config
from schemas import ContractError, ControlCommand, Incident, Topics, decode_as
from steplens.config import Settings
from streams.incidents.ledger import IncidentLedger

log = logging.getLogger(__name__)

DEFAULT_LOOKBACK_S = 7 * 24 * 3600.0
RETRY_MAX_S = 5.0


@dataclass(slots=True)
class History:
    incidents: list[Incident] = field(default_factory=list)
    commands: list[ControlCommand] = field(default_factory=list)
    skipped: int = 0


def read_history(settings: Settings, lookback_s: float = DEFAULT_LOOKBACK_S, timeout_s: float = 120.0) -> History:
    """Every incident and control command published in the last `lookback_s`, in order per job."""
    deadline = time.monotonic() + timeout_s
    backoff = 0.5
    while True:
        try:
            return _read_once(settings, lookback_s, deadline)
        except (KafkaError, OSError) as exc:
            if time.monotonic() + backoff > deadline:
                raise
            log.warning("reading incident history failed (%r); retrying in %.1fs", exc, backoff)
            time.sleep(backoff)
            backoff = min(backoff * 2, RETRY_MAX_S)


def _read_once(settings: Settings, lookback_s: float, deadline: float) -> History:
    topics = Topics(settings.topic_prefix)
    consumer = KafkaConsumer(**kafka_client_config(settings, "detect"), client_id="steplens-detect-restore",
                             enable_auto_commit=False, group_id=None, max_partition_fetch_bytes=4_194_304)
    history = History()
    try:
        parts = [TopicPartition(name, p) for name in (topics.incidents, topics.control)
                 for p in sorted(consumer.partitions_for_topic(name) or ())]
        if not parts:
            return history
        consumer.assign(parts)
        since_ms = int((time.time() - lookback_s) * 1000)
        starts = consumer.offsets_for_times(dict.fromkeys(parts, max(since_ms, 0)))
        ends = consumer.end_offsets(parts)
        for tp in parts:
            found = starts.get(tp)
            consumer.seek(tp, found.offset if found is not None else ends[tp])
        remaining = {tp for tp in parts if consumer.position(tp) < ends[tp]}
        while remaining:
            if time.monotonic() > deadline:
                raise KafkaError(f"incident history not read in time; left {sorted(map(str, remaining))}")
            for tp, messages in consumer.poll(timeout_ms=500).items():
                for msg in messages:
                    if msg.offset < ends[tp]:
                        _add(history, tp.topic == topics.incidents, msg.value, settings.max_event_bytes)
                if consumer.position(tp) >= ends[tp]:
                    remaining.discard(tp)
        history.incidents.sort(key=lambda i: i.detected_ns)  # partitions interleave; per id, newest wins
        history.commands.sort(key=lambda c: c.issued_ns)
        return history
    finally:
        consumer.close()


def _add(history: History, is_incident: bool, raw: bytes | None, max_bytes: int) -> None:
    try:
        if raw is None:
            raise ContractError("value", "null")
        if is_incident:
            history.incidents.append(decode_as(Incident, raw, max_bytes))
        else:
            history.commands.append(decode_as(ControlCommand, raw, max_bytes))
    except Exception:  # anything undecodable is skipped: restoring must never stop the worker
        history.skipped += 1


def restored_ledger(settings: Settings, idle_ns: int, now_ns: int) -> IncidentLedger:
    """A ledger holding everything detect published before this start."""
    history = read_history(settings)
    ledger = IncidentLedger(idle_ns)
    ledger.restore(history.incidents, history.commands, now_ns)
    log.info("incident ledger restored: %d incidents (%d open), %d commands, %d undecodable skipped",
             len(history.incidents), len(ledger.open_incidents()), len(history.commands), history.skipped)
    return ledger
