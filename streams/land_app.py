"""The `land` Faust app: every event to ClickHouse, bad input to the dead-letter topic."""

from __future__ import annotations

import logging
from typing import Any

import faust

from schemas import Topics
from steplens.config import Settings
from streams.app import base_app, now_ns, raw_topic
from streams.lander import ClickHouseLander
from streams.landing import Landed, LandingProcessor

log = logging.getLogger(__name__)


def create_land_app(settings: Settings) -> faust.App:
    app = base_app(settings, "land")
    topics = Topics(settings.topic_prefix)
    processor = LandingProcessor(topics, settings.max_event_bytes)
    lander = ClickHouseLander(settings)
    deadletter_topic = raw_topic(app, topics.deadletter)

    async def land(stream: Any) -> None:
        async for events in stream.noack_take(settings.sink_batch_size, within=settings.sink_batch_seconds):
            landed = Landed()
            now = now_ns()
            for event in events:
                msg = event.message
                processor.process(msg.topic, msg.partition, msg.offset, msg.key, msg.value, now, landed)
            for letter in landed.dead:
                log.warning("dead letter %s[%d]@%d: field %s %s", letter.topic, letter.partition,
                            letter.offset, letter.field, letter.problem)
                await deadletter_topic.send(key=letter.key, value=letter.raw, headers=letter.headers())
            await lander.write(landed.rows, landed.sources)
            for event in events:
                await stream.ack(event)

    for name in processor.topics:
        app.agent(raw_topic(app, name), name=f"land-{name}", concurrency=1)(land)

    async def report_land() -> None:
        log.info("land counts %s rows %s failures %d", processor.counts, lander.rows_written, lander.write_failures)

    app.timer(interval=10.0)(report_land)

    return app
