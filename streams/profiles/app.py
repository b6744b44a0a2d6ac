"""The `parse` Faust app: profile dumps -> parsed in a process pool -> ClickHouse + incident updates.

Consumer group `<app_id>-parse`. It reads `control` (to learn which incident each profile_on
command serves) and `profiles` (ProfileReady). Parsing is CPU-bound and may take minutes on a
multi-GB dump, so it runs in a `ProcessPoolExecutor` and the event loop stays free. A dump that
cannot be used (outside the profile roots, missing, truncated, corrupt) becomes an incident
update saying so and a dead letter with the reason; the worker goes on with the next one.
"""

from __future__ import annotations

import asyncio
import logging
import multiprocessing
from collections.abc import AsyncIterator
from concurrent.futures import ProcessPoolExecutor, ThreadPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from typing import Any

import faust

from infra.settings import Settings
from schemas import ContractError, ControlCommand, ProfileReady, Topics, decode_as, encode, job_key
from schemas.dead_letter import DeadLetter
from schemas.errors import MAX_FIELD_CHARS, MAX_REASON_CHARS, clip
from sinks.lander import ClickHouseLander
from streams.app import base_app, now_ns, raw_topic
from streams.profiles.worker import CommandIndex, DumpError, DumpResult, analyse_dump, diagnosis_incident

log = logging.getLogger(__name__)


def create_parse_app(settings: Settings) -> faust.App:
    app = base_app(settings, "parse")
    topics = Topics(settings.topic_prefix)
    commands = CommandIndex()
    lander = ClickHouseLander(settings)
    sink = ThreadPoolExecutor(max_workers=1, thread_name_prefix="steplens-sink")  # the lander's one thread
    roots = settings.profile_root_paths
    state: dict[str, Any] = {"pool": None}
    counters = {"profiles": 0, "parsed": 0, "failed": 0, "undecodable": 0, "commands": 0}
    incidents_topic = raw_topic(app, topics.incidents)
    deadletter_topic = raw_topic(app, topics.deadletter)

    def pool() -> ProcessPoolExecutor:
        if state["pool"] is None:
            # spawn, not fork: a forked copy of a running Faust worker (threads, signal handlers,
            # the Kafka client) is not safe to run anything in
            state["pool"] = ProcessPoolExecutor(max_workers=max(1, settings.parse_workers),
                                                mp_context=multiprocessing.get_context("spawn"))
        return state["pool"]  # type: ignore[no-any-return]

    async def dead_letter(raw: bytes, msg: Any, fieldname: str, problem: str) -> None:
        letter = DeadLetter(topics.profiles, msg.partition, msg.offset, msg.key, raw, clip(fieldname, MAX_FIELD_CHARS),
                            clip(problem, MAX_REASON_CHARS))
        await deadletter_topic.send(key=letter.key, value=letter.topic_value(), headers=letter.headers())

    @app.agent(raw_topic(app, topics.control), concurrency=1)
    async def remember_commands(stream: Any) -> AsyncIterator[None]:
        async for raw in stream:
            try:
                command = decode_as(ControlCommand, raw, settings.max_event_bytes)
            except ContractError:
                continue
            if command.action == "profile_on":
                commands.add(command)
                counters["commands"] += 1
            yield None

    @app.agent(raw_topic(app, topics.profiles), concurrency=1)
    async def parse_profiles(stream: Any) -> AsyncIterator[None]:
        loop = asyncio.get_running_loop()
        async for event_msg in stream.events():
            raw: bytes = event_msg.value
            msg = event_msg.message
            try:
                event = decode_as(ProfileReady, raw, settings.max_event_bytes)
            except ContractError as exc:
                counters["undecodable"] += 1
                await dead_letter(raw, msg, exc.field, exc.problem)
                continue
            counters["profiles"] += 1
            result: DumpResult | None = None
            error: DumpError | None = None
            try:
                result = await loop.run_in_executor(pool(), analyse_dump, event, roots, now_ns())
            except DumpError as exc:
                error = exc
            except BrokenProcessPool as exc:  # a parser process died (e.g. out of memory): new pool, go on
                state["pool"] = None
                error = DumpError("content", f"parser process died: {exc}")
            if error is not None:
                counters["failed"] += 1
                log.warning("profile %s (job %s rank %d) unusable: %s", event.uri, event.job, event.rank, error)
                await dead_letter(raw, msg, error.field, error.problem)
            else:
                assert result is not None
                counters["parsed"] += 1
                await loop.run_in_executor(sink, lander.write, result.rows)
            command = commands.get(event.command_id)
            incident = diagnosis_incident(event, command, result, error, now_ns())
            log.warning("diagnosis %s %s: %s", incident.state, incident.incident_id, incident.summary)
            await incidents_topic.send(key=job_key(incident.job), value=encode(incident))
            yield None

    async def report_parse() -> None:
        log.info("parse counters %s rows %s", counters, lander.rows_written)

    app.timer(interval=10.0)(report_parse)

    return app
