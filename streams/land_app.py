"""The `land` Faust app: every event to ClickHouse, bad input to the dead-letter topic.

Delivery guarantee (checked against faust-streaming 0.15.3's source, `faust/transport/consumer.py`):

- Each topic has one agent (concurrency=1) that reads with `noack_take`, so Faust acks
  nothing by itself. `Consumer.ack` records an offset as acked; the commit loop
  (`broker_commit_interval`) commits, per partition, only the *consecutive* run of acked
  offsets (`Consumer._new_offset`). Faust's guard against an un-acked head is weak: it is
  skipped while the committed offset is 0 or unknown, and it lets one un-acked offset
  right after the committed one through. So commits are safe only if acks never run ahead
  of an un-acked message: this loop therefore acks a take's messages, in order, only after
  every one of them is in ClickHouse (rows) or in the dead-letter topic and table (dead
  letters), and acks nothing else.
- A message that cannot be processed is never a reason to stop: `LandingProcessor` turns
  it into a dead letter (tombstones, garbage, values out of range, unmapped types, bugs).
- ClickHouse down: `ClickHouseLander.write` retries until the insert succeeds; the take is
  not acked meanwhile (lag grows, nothing is lost).
- Anything else escaping the loop (a bug, a dead-letter send that failed) exits the whole
  worker process (`os._exit`, status `CRASH_EXIT_CODE`) instead of letting Faust restart
  the agent in-process: a restarted agent would continue *after* the messages it had taken,
  and later acks could then commit past them. After the exit nothing more is acked, so the
  restarted worker re-reads from the committed offset: at-least-once. Re-landed rows of
  steps, incidents and jobs collapse under FINAL (ReplacingMergeTree); dead_letters is a
  plain log and may then hold a message twice (same topic, partition and offset).
"""

from __future__ import annotations

import asyncio
import logging
import os
import sys
from collections.abc import Awaitable, Callable
from typing import Any

import faust

from schemas import Topics
from steplens.config import Settings
from streams.app import base_app, now_ns, raw_topic
from streams.lander import ClickHouseLander
from streams.landing import Landed, LandingProcessor

log = logging.getLogger(__name__)

CRASH_EXIT_CODE = 70  # EX_SOFTWARE: the supervisor restarts the worker, which re-reads un-acked input


def crash_process(reason: BaseException) -> None:
    """Leave now, acking nothing more (see the module docstring for why not an in-process restart)."""
    log.critical("landing batch failed, exiting so the restart re-reads it: %r", reason, exc_info=reason)
    for handler in logging.getLogger().handlers:
        handler.flush()
    sys.stderr.flush()
    os._exit(CRASH_EXIT_CODE)


async def run_batches(
    stream: Any,
    size: int,
    within: float,
    land_batch: Callable[[list[Any]], Awaitable[None]],
    crash: Callable[[BaseException], None] = crash_process,
) -> None:
    """Take batches without acks; ack each batch, in order, only after `land_batch` stored it.

    Any exception other than cancellation (the worker stopping) goes to `crash`, which exits
    the process: the batch stays un-acked and is re-read after the restart.
    """
    try:
        async for events in stream.noack_take(size, within=within):
            await land_batch(events)
            for event in events:
                await stream.ack(event)
    except asyncio.CancelledError:
        raise  # the worker is stopping: un-acked input is re-read by the next one
    except Exception as exc:
        crash(exc)


def create_land_app(settings: Settings) -> faust.App:
    app = base_app(settings, "land")
    topics = Topics(settings.topic_prefix)
    processor = LandingProcessor(topics, settings.max_event_bytes)
    lander = ClickHouseLander(settings)
    deadletter_topic = raw_topic(app, topics.deadletter)

    async def land_batch(events: list[Any]) -> None:
        landed = Landed()
        now = now_ns()
        for event in events:
            msg = event.message
            processor.process(msg.topic, msg.partition, msg.offset, msg.key, msg.value, now, landed)
        deliveries = []
        for letter in landed.dead:
            log.warning("dead letter %r[%d]@%d: field %r %r", letter.topic, letter.partition,
                        letter.offset, letter.field, letter.problem)
            deliveries.append(await deadletter_topic.send(key=letter.key, value=letter.topic_value(),
                                                        headers=letter.headers()))
        await lander.write(landed.rows, landed.sources)
        for delivery in deliveries:  # the dead-letter topic has them (acks=all) before they are acked
            await delivery

    async def land(stream: Any) -> None:
        await run_batches(stream, settings.sink_batch_size, settings.sink_batch_seconds, land_batch)

    for name in processor.topics:
        app.agent(raw_topic(app, name), name=f"land-{name}", concurrency=1)(land)

    async def report_land() -> None:
        log.info("land counts %s rows %s failures %d", processor.counts, lander.rows_written, lander.write_failures)

    app.timer(interval=10.0)(report_land)

    return app
