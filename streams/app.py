"""The Faust apps: `detect` (windows + analyses -> alerts) and `land` (everything -> ClickHouse).

They are two apps with two consumer groups on purpose: a ClickHouse outage stalls landing
but never detection, and a burst of detection work never delays landing. Agents run with
concurrency=1: windows and detectors keep in-memory state that must see records in order
(faust-streaming issue #606). State lives in processor objects created here, per app.
"""

from __future__ import annotations

import logging
import time
from collections.abc import AsyncIterator
from typing import Any, Literal

import faust
import orjson

from schemas import ContractError, ControlCommand, Incident, JobEvent, StepEvent, Topics, decode_as, encode, job_key
from schemas.topics import group_key
from steplens.config import Settings
from streams.analysis.job import FleetAnalysis
from streams.lander import ClickHouseLander
from streams.landing import Landed, LandingProcessor
from streams.records import DomainStep, GroupStep, domain_steps
from streams.windows.domain_window import DomainStepWindow, VerdictThresholds

log = logging.getLogger(__name__)

Role = Literal["detect", "land"]
WINDOW_IDLE_S = 30.0


def _now_ns() -> int:
    return time.time_ns()


def _base_app(settings: Settings, role: Role) -> faust.App:
    datadir = settings.home / "faust" / role
    datadir.mkdir(parents=True, exist_ok=True)
    return faust.App(
        f"{settings.app_id}-{role}",
        broker=f"kafka://{settings.kafka_bootstrap}",
        datadir=str(datadir),
        store="memory://",
        web_enabled=False,
        autodiscover=False,
        key_serializer="raw",
        value_serializer="raw",
        topic_partitions=settings.topic_partitions,
        topic_replication_factor=1,
        topic_allow_declare=False,
        broker_commit_interval=1.0,
        producer_max_request_size=4_194_304,
        producer_acks=-1,
        stream_wait_empty=False,
    )


def _topic(app: faust.App, *names: str) -> Any:
    return app.topic(*names, key_type=bytes, value_type=bytes, value_serializer="raw", key_serializer="raw")


def create_detect_app(settings: Settings) -> faust.App:
    app = _base_app(settings, "detect")
    topics = Topics(settings.topic_prefix)
    cfg = settings.detection
    window = DomainStepWindow(
        lateness_steps=cfg.window_lateness_steps,
        idle_ns=int(WINDOW_IDLE_S * 1e9),
        thresholds=VerdictThresholds(cfg.slow_rank_wait_ratio, cfg.slow_rank_z),
    )
    fleet = FleetAnalysis(cfg)
    counters = {"steps": 0, "undecodable": 0, "domain_records": 0, "group_steps": 0, "incidents": 0, "commands": 0}

    steps_topic = _topic(app, topics.steps)
    domain_topic = _topic(app, topics.domain_steps)
    group_topic = _topic(app, topics.group_steps)
    analysis_topic = _topic(app, topics.group_steps, topics.jobs)
    incidents_topic = _topic(app, topics.incidents)
    control_topic = _topic(app, topics.control)

    async def publish_group_steps(summaries: list[GroupStep]) -> None:
        for gs in summaries:
            counters["group_steps"] += 1
            await group_topic.send(key=job_key(gs.job), value=gs.dumps())

    @app.agent(steps_topic, concurrency=1)
    async def route_steps(stream: Any) -> AsyncIterator[None]:
        """Re-key each step to its communication groups (the landing worker dead-letters bad input)."""
        async for raw in stream:
            try:
                event = decode_as(StepEvent, raw, settings.max_event_bytes)
            except ContractError:
                counters["undecodable"] += 1
                continue
            counters["steps"] += 1
            for record in domain_steps(event):
                counters["domain_records"] += 1
                await domain_topic.send(key=group_key(record.job, record.domain, record.group), value=record.dumps())
            yield None

    @app.agent(domain_topic, concurrency=1)
    async def group_windows(stream: Any) -> AsyncIterator[None]:
        """Window each group by step index; summarise and flag its slowest rank."""
        async for raw in stream:
            await publish_group_steps(window.add(DomainStep.loads(raw), _now_ns()))
            yield None

    async def expire_windows() -> None:
        await publish_group_steps(window.expire(_now_ns()))

    app.timer(interval=1.0)(expire_windows)

    @app.agent(analysis_topic, concurrency=1)
    async def analyse(stream: Any) -> AsyncIterator[None]:
        """Job-level analyses: slow steps and slow ranks -> incidents (alerts) and control commands."""
        async for raw in stream:
            data = orjson.loads(raw)
            now = _now_ns()
            if data.get("kind") == "group_step":
                outputs = fleet.on_group_step(GroupStep.from_dict(data), now)
            else:
                try:
                    job_event = decode_as(JobEvent, raw, settings.max_event_bytes)
                except ContractError:
                    counters["undecodable"] += 1
                    continue
                outputs = fleet.on_job_event(job_event, now)
            for item in outputs:
                if isinstance(item, Incident):
                    counters["incidents"] += 1
                    log.warning("incident %s %s: %s", item.state, item.incident_id, item.summary)
                    await incidents_topic.send(key=job_key(item.job), value=encode(item))
                elif isinstance(item, ControlCommand):
                    counters["commands"] += 1
                    await control_topic.send(key=job_key(item.job), value=encode(item))
            yield None

    async def report_detect() -> None:
        log.info("detect counters %s window %s open=%d", counters, window.stats, window.open_windows())

    app.timer(interval=10.0)(report_detect)

    return app


def create_land_app(settings: Settings) -> faust.App:
    app = _base_app(settings, "land")
    topics = Topics(settings.topic_prefix)
    processor = LandingProcessor(topics, settings.max_event_bytes)
    lander = ClickHouseLander(settings)
    deadletter_topic = _topic(app, topics.deadletter)

    async def land(stream: Any) -> None:
        async for events in stream.noack_take(settings.sink_batch_size, within=settings.sink_batch_seconds):
            landed = Landed()
            now = _now_ns()
            for event in events:
                msg = event.message
                processor.process(msg.topic, msg.partition, msg.offset, msg.key, msg.value, now, landed)
            for letter in landed.dead:
                log.warning("dead letter %s[%d]@%d: field %s %s", letter.topic, letter.partition,
                            letter.offset, letter.field, letter.problem)
                await deadletter_topic.send(key=letter.key, value=letter.raw, headers=letter.headers())
            await lander.write(landed.rows)
            for event in events:
                await stream.ack(event)

    for name in (topics.steps, topics.jobs, topics.incidents):
        app.agent(_topic(app, name), name=f"land-{name}", concurrency=1)(land)

    async def report_land() -> None:
        log.info("land counts %s rows %s failures %d", processor.counts, lander.rows_written, lander.write_failures)

    app.timer(interval=10.0)(report_land)

    return app


def create_app(settings: Settings, role: Role) -> faust.App:
    return create_detect_app(settings) if role == "detect" else create_land_app(settings)
