"""Producer side of the coarse-to-fine loop: follow the control topic, hand commands to the hook.

A daemon thread runs a kafka-python consumer (principal `producer`) with no consumer group:
every rank reads every command and keeps the ones naming it (RankHook.submit_command counts
the others). It starts reading at the hook's start time (offsets_for_times), so a command
issued after the rank came up is never missed, and old commands of a previous run are not
replayed. Errors only delay commands; they never reach the training thread.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from typing import Any

from infra.clients import kafka_client_config
from producers.hook.core import RankHook
from schemas import ContractError, ControlCommand, Topics, decode_as
from steplens.config import Settings

log = logging.getLogger(__name__)


class ControlFollower:
    """Reads `topics.control` from `since_ms` on and submits each command to `hook`."""

    def __init__(self, hook: RankHook, settings: Settings, topics: Topics, *, since_ms: int | None = None,
                 poll_s: float = 0.5) -> None:
        self.hook = hook
        self._settings = settings
        self._topic = topics.control
        self._since_ms = since_ms if since_ms is not None else time.time_ns() // 1_000_000
        self._poll_ms = int(poll_s * 1000)
        self._stop = threading.Event()
        self.received = 0
        self.invalid = 0
        self.ready = threading.Event()
        self._thread = threading.Thread(target=self._run, name="steplens-control", daemon=True)

    def start(self) -> ControlFollower:
        self._thread.start()
        return self

    def stop(self, timeout: float = 5.0) -> None:
        self._stop.set()
        if self._thread.is_alive() and self._thread is not threading.current_thread():
            self._thread.join(timeout)

    def _run(self) -> None:
        while not self._stop.is_set():
            consumer: Any = None
            try:
                consumer = self._connect()
                self.ready.set()
                while not self._stop.is_set():
                    for records in consumer.poll(timeout_ms=self._poll_ms).values():
                        for rec in records:
                            self._handle(rec.value)
            except Exception:
                log.debug("control follower error; reconnecting", exc_info=True)
                self._stop.wait(1.0)
            finally:
                if consumer is not None:
                    with contextlib.suppress(Exception):
                        consumer.close()

    def _connect(self) -> Any:
        from kafka import KafkaConsumer, TopicPartition

        consumer = KafkaConsumer(**kafka_client_config(self._settings, "producer"), group_id=None,
                                 enable_auto_commit=False, client_id=f"steplens-control-{self.hook.rank.rank}")
        parts = None
        deadline = time.monotonic() + 30
        while not parts and not self._stop.is_set() and time.monotonic() < deadline:
            parts = consumer.partitions_for_topic(self._topic)
            if not parts:
                self._stop.wait(0.5)
        if not parts:
            consumer.close()
            raise RuntimeError(f"control topic {self._topic} not found")
        tps = [TopicPartition(self._topic, p) for p in sorted(parts)]
        consumer.assign(tps)
        offsets = consumer.offsets_for_times(dict.fromkeys(tps, self._since_ms))
        for tp in tps:
            found = offsets.get(tp)
            if found is None:
                consumer.seek_to_end(tp)
            else:
                consumer.seek(tp, found.offset)
        return consumer

    def _handle(self, raw: bytes) -> None:
        try:
            cmd = decode_as(ControlCommand, raw)
        except ContractError:
            self.invalid += 1
            return
        self.received += 1
        self.hook.submit_command(cmd)
