"""The `land` worker: every event to ClickHouse, bad input to the dead-letter topic.

The work happens in `streams.land.loop.LandLoop`, a kafka-python consumer thread (group
`<app_id>-land`): poll a batch, turn each message into rows or a dead letter
(`LandingProcessor`, which never raises), send the dead letters (acks=all), insert the rows
(one insert per table, retried until ClickHouse takes them), confirm the dead letters, and
only then commit the batch's offsets. The Faust app around it (with no Kafka clients of
its own) gives the worker the same lifecycle as the others: start-up, "Ready", SIGTERM
handling and the crash watchdog.

Delivery guarantee:
- A message that cannot be processed is never a reason to stop: `LandingProcessor` turns
  it into a dead letter (tombstones, garbage, values out of range, unmapped types, bugs).
- ClickHouse down: `ClickHouseLander.write` retries until the insert succeeds; nothing is
  committed meanwhile (lag grows, nothing is lost).
- Anything else escaping a batch (a bug, a dead-letter send that failed) stops the loop
  with nothing committed, and the watchdog exits the whole worker process (`os._exit`,
  status `CRASH_EXIT_CODE`). The supervisor's restart re-reads from the committed offset:
  at-least-once. Re-landed rows of steps, incidents and jobs collapse under FINAL
  (ReplacingMergeTree); dead_letters is a plain log and may then hold a message twice
  (same topic, partition and offset).
"""

from __future__ import annotations

import asyncio
import logging
import os
import sys
from typing import Any

import faust
from faust.app.base import BootStrategy

from infra.settings import Settings
from schemas import Topics
from sinks.lander import ClickHouseLander
from streams.app import base_app
from streams.land.loop import LandLoop
from streams.land.processor import LandingProcessor
from streams.metrics import Announce

log = logging.getLogger(__name__)

CRASH_EXIT_CODE = 70  # EX_SOFTWARE: the supervisor restarts the worker, which re-reads un-acked input


def crash_process(reason: BaseException) -> None:
    """Leave now, acking nothing more (see the module docstring for why not an in-process restart)."""
    log.critical("landing batch failed, exiting so the restart re-reads it: %r", reason, exc_info=reason)
    for handler in logging.getLogger().handlers:
        handler.flush()
    sys.stderr.flush()
    os._exit(CRASH_EXIT_CODE)


def create_land_app(settings: Settings) -> faust.App:
    app = base_app(settings, "land")
    # No Faust consumer or producer: the loop has its own clients (group `<app_id>-land`).
    app.boot_strategy = BootStrategy(app, enable_kafka=False)
    processor = LandingProcessor(Topics(settings.topic_prefix), settings.max_event_bytes,
                                 columnar=settings.land_columnar)
    lander = ClickHouseLander(settings)
    loop = LandLoop(settings, processor, lander)
    loop.metrics.serve(settings.land_metrics_port, Announce.from_settings(settings))

    async def start_loop() -> None:
        loop.start()

    async def stop_loop(*args: Any, **kwargs: Any) -> None:
        # the loop's thread closes the lander as it ends (chdb crashes the process at exit if its
        # session is still open, and the session is bound to that thread)
        await asyncio.get_running_loop().run_in_executor(None, loop.stop)

    app.task(start_loop)
    app.on_before_shutdown.connect(stop_loop)

    async def watchdog() -> None:
        if loop.failed is not None:
            crash_process(loop.failed)

    app.timer(interval=0.5)(watchdog)

    async def report_land() -> None:
        log.info("land counts %s rows %s failures %d batches %d", processor.counts, lander.rows_written,
                 lander.write_failures, loop.batches)

    app.timer(interval=10.0)(report_land)

    return app
