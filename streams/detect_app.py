"""The `detect` Faust app: windows per communication group, job analyses, alerts and control.

The landing worker dead-letters bad input; this app only counts and skips it (`SkipLog`:
counted per topic, logged rate-limited and quoted). No input on any topic it reads raises:
step and job events are decoded by the contract (total, the same checks as landing, so what
is analysed is what lands), internal records are guarded where they are parsed.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Sequence
from typing import Any

import faust
import orjson

from schemas import (
    ContractError,
    ControlCommand,
    Incident,
    JobEvent,
    StepEvent,
    Topics,
    bounded,
    decode_as,
    encode,
    job_key,
)
from schemas.topics import group_key
from steplens.config import Settings
from streams.analysis.job import FleetAnalysis
from streams.app import base_app, now_ns, raw_topic
from streams.incidents.restore import restored_ledger
from streams.records import DomainStep, GroupStep, domain_steps
from streams.skips import SkipLog, typed_record
from streams.windows.domain_window import DomainStepWindow, VerdictThresholds

log = logging.getLogger(__name__)

WINDOW_IDLE_S = 30.0
INCIDENT_IDLE_S = 300.0  # an incident of a job silent this long is resolved (streams/incidents/ledger.py)


def create_detect_app(settings: Settings) -> faust.App:
    app = base_app(settings, "detect")
    topics = Topics(settings.topic_prefix)
    cfg = settings.detection
    window = DomainStepWindow(
        lateness_steps=cfg.window_lateness_steps,
        idle_ns=int(WINDOW_IDLE_S * 1e9),
        thresholds=VerdictThresholds(cfg.slow_rank_wait_ratio, cfg.slow_rank_z),
    )
    fleet = FleetAnalysis(cfg)
    skips = SkipLog(log)
    ledger = restored_ledger(settings, int(INCIDENT_IDLE_S * 1e9), now_ns())
    counters = {"steps": 0, "undecodable": 0, "domain_records": 0, "group_steps": 0, "incidents": 0, "commands": 0}

    steps_topic = raw_topic(app, topics.steps)
    domain_topic = raw_topic(app, topics.domain_steps)
    group_topic = raw_topic(app, topics.group_steps)
    analysis_topic = raw_topic(app, topics.group_steps, topics.jobs)
    incidents_topic = raw_topic(app, topics.incidents)
    control_topic = raw_topic(app, topics.control)

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
                records = domain_steps(event)
            except Exception as exc:  # ContractError, or a bug: skip this input, keep routing
                counters["undecodable"] += 1
                skips.skip(topics.steps, _reason(exc), raw)
                continue
            counters["steps"] += 1
            for record in records:
                counters["domain_records"] += 1
                await domain_topic.send(key=group_key(record.job, record.domain, record.group), value=record.dumps())
            yield None

    @app.agent(domain_topic, concurrency=1)
    async def group_windows(stream: Any) -> AsyncIterator[None]:
        """Window each group by step index; summarise and flag its slowest rank."""
        async for raw in stream:
            try:
                summaries = window.add(typed_record(DomainStep, orjson.loads(raw)), now_ns())
            except Exception as exc:  # an internal topic, but anyone can write to it
                counters["undecodable"] += 1
                skips.skip(topics.domain_steps, _reason(exc), raw)
                continue
            await publish_group_steps(summaries)
            yield None

    async def expire_windows() -> None:
        await publish_group_steps(window.expire(now_ns()))

    app.timer(interval=1.0)(expire_windows)

    def _analyse_one(raw: object, now: int) -> tuple[str, list[Any]]:
        """One group-step record or job event through the fleet analysis and the incident ledger."""
        data = orjson.loads(raw) if isinstance(raw, (bytes, bytearray, memoryview, str)) else None
        if isinstance(data, dict) and data.get("kind") == "group_step":
            record = typed_record(GroupStep, {k: v for k, v in data.items() if k != "kind"})
            ledger.touch(record.job, now)
            return record.job, ledger.reconcile(fleet.on_group_step(record, now), now)
        job_event = decode_as(JobEvent, raw, settings.max_event_bytes)
        ledger.touch(job_event.job, now)
        return job_event.job, ledger.reconcile(fleet.on_job_event(job_event, now), now)

    @app.agent(analysis_topic, concurrency=1)
    async def analyse(stream: Any) -> AsyncIterator[None]:
        """Job-level analyses: slow steps and slow ranks -> incidents (alerts) and control commands."""
        async for raw in stream:
            now = now_ns()
            try:
                job, outputs = _analyse_one(raw, now)
            except Exception as exc:  # garbage on group-steps or jobs: skip it, keep analysing
                counters["undecodable"] += 1
                skips.skip(f"{topics.group_steps}|{topics.jobs}", _reason(exc), raw)
                continue
            analysis = fleet.jobs.get(job)
            if analysis is not None and analysis.finished and not ledger.has_ended(job):
                outputs.extend(ledger.job_ended(job, now))  # what is still open (e.g. from before a restart)
            await publish(outputs)
            yield None

    async def publish(outputs: Sequence[Incident | ControlCommand]) -> None:
        for item in outputs:
            item = bounded(item)  # the one cap on event text copied into our own events
            if isinstance(item, Incident):
                counters["incidents"] += 1
                log.warning("incident %s %r: %r", item.state, item.incident_id, item.summary)
                await incidents_topic.send(key=job_key(item.job), value=encode(item))
            else:
                counters["commands"] += 1
                await control_topic.send(key=job_key(item.job), value=encode(item))

    async def expire_incidents() -> None:
        await publish(ledger.expire(now_ns()))

    app.timer(interval=10.0)(expire_incidents)

    async def report_detect() -> None:
        log.info("detect counters %s skipped %s window %s open=%d ledger %s", counters, skips.counts, window.stats,
                 window.open_windows(), ledger.stats)

    app.timer(interval=10.0)(report_detect)

    return app


def _reason(exc: Exception) -> str:
    if isinstance(exc, ContractError):
        return str(exc)
    return f"{type(exc).__name__}: {exc}"
