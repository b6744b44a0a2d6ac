"""`python -m streams worker --role land`: every event to ClickHouse, bad input to the dead-letter topic.

The work happens in `streams.land.loop.LandLoop`, a kafka-python consumer thread (group
`<app_id>-land`) on the shared consumer runtime: poll a batch, turn each message into rows or a
dead letter (`LandingProcessor`, which never raises), send the dead letters (acks=all), insert the
rows (one insert per table, retried until ClickHouse takes them), confirm the dead letters, and
only then commit the batch's offsets. This module is the worker around it, a plain foreground loop
like the decode and alerts roles (no Faust: landing windows nothing): metrics, a count every 10 s,
SIGTERM / SIGINT stop it after the batch in hand (exit 0).

Delivery guarantee:
- A message that cannot be processed is never a reason to stop: `LandingProcessor` turns
  it into a dead letter (tombstones, garbage, values out of range, unmapped types, bugs).
- ClickHouse down: `ClickHouseLander.write` retries until the insert succeeds; nothing is
  committed meanwhile (lag grows, nothing is lost).
- Anything else escaping a batch (a bug, a dead-letter send that failed) stops the loop
  with nothing committed, and the worker exits the whole process (`os._exit`, status
  `CRASH_EXIT_CODE`). The supervisor's restart re-reads from the committed offset:
  at-least-once. Re-landed rows of steps, incidents and jobs collapse under FINAL
  (ReplacingMergeTree); dead_letters is a plain log and may then hold a message twice
  (same topic, partition and offset).
"""

from __future__ import annotations

import logging
import os
import sys
import threading
import time

from infra.settings import Settings
from schemas import Topics
from sinks.lander import ClickHouseLander
from streams.land.loop import LandLoop
from streams.land.processor import LandingProcessor
from streams.metrics import Announce
from streams.runtime import STOP_GRACE_S, stop_on_signals

log = logging.getLogger(__name__)

CRASH_EXIT_CODE = 70  # EX_SOFTWARE: the supervisor restarts the worker, which re-reads un-acked input
REPORT_EVERY_S = 10.0


def crash_process(reason: BaseException) -> None:
    """Leave now, acking nothing more: the loop's thread holds the embedded store's session (chdb
    crashes a process that exits with it open), and a restart re-reads what was not committed."""
    log.critical("landing batch failed, exiting so the restart re-reads it: %r", reason, exc_info=reason)
    for handler in logging.getLogger().handlers:
        handler.flush()
    sys.stderr.flush()
    os._exit(CRASH_EXIT_CODE)


def run_land(settings: Settings, stop: threading.Event | None = None) -> int:
    """Land until SIGTERM / SIGINT (or `stop`): 0 once stopped; a failed batch exits the process (above)."""
    stop = stop or threading.Event()
    processor = LandingProcessor(Topics(settings.topic_prefix), settings.max_event_bytes,
                                 columnar=settings.land_columnar)
    lander = ClickHouseLander(settings)
    loop = LandLoop(settings, processor, lander)
    with stop_on_signals(stop.set, "land worker"):
        loop.metrics.serve(settings.land_metrics_port, Announce.from_settings(settings))
        loop.start()
        # "Ready" as the Faust workers say it: supervisors, the chaos bench and the tests wait for the word
        log.info("Ready: land, group %s-land -> %s", settings.app_id,
                 "ClickHouse server" if settings.uses_server else f"embedded {settings.embedded_path}")
        next_report = time.monotonic() + REPORT_EVERY_S
        while not stop.wait(0.5):
            if loop.failed is not None:
                crash_process(loop.failed)
            if not loop.is_alive():
                break
            if time.monotonic() >= next_report:
                next_report += REPORT_EVERY_S
                log.info("land counts %s rows %s failures %d batches %d", processor.counts, lander.rows_written,
                         lander.write_failures, loop.batches)
        # the loop's thread closes the lander as it ends (the embedded session is bound to that thread)
        loop.stop(STOP_GRACE_S)
    if loop.failed is not None:
        crash_process(loop.failed)
    if loop.is_alive():  # the batch in hand still inserting: leave now (an exit with chdb's session open crashes)
        log.warning("the batch in hand did not finish within %.0f s of the stop (ClickHouse away?): exiting "
                    "without committing it; the next land worker reads it again", STOP_GRACE_S)
        logging.shutdown()
        os._exit(0)
    return 0
