"""`python -m streams worker --role decode`: the decode stage as a worker of its own.

Why: by default the detect worker runs its decode loop itself (a child process, `process.py`). A fleet that
sizes, restarts or watches decode apart from the engine turns that off (`detect_runs_decode = false`) and runs
this role instead, one or more: the same loop in the same consumer group (`<app_id>-detect-decode`), so its
members share the input topics' partitions, and its own Prometheus endpoint (`decode_metrics_port`).
SIGTERM / SIGINT stop it after the batch in hand (nothing committed that is not on the partials topic).
"""

from __future__ import annotations

import logging
import threading

from infra.settings import Settings
from streams.detect.ingest.loop import DecodeLoop, decode_group, input_topics
from streams.metrics import Announce, DetectMetrics, serve
from streams.runtime import stop_on_signals

log = logging.getLogger(__name__)


def run_decode(settings: Settings, stop: threading.Event | None = None) -> int:
    """Decode until SIGTERM / SIGINT (or `stop`); the exit code: 0 stopped, 1 the loop failed."""
    stop = stop or threading.Event()
    metrics = DetectMetrics()
    loop = DecodeLoop(settings, metrics)

    with stop_on_signals(stop.set, "decode worker"):
        serve(metrics.registry, settings.decode_metrics_port, "decode", Announce.from_settings(settings))
        loop.start()
        log.info("decode: %s -> %s, group %s", ", ".join(input_topics(loop.topics)), loop.partials,
                 decode_group(settings))
        while loop.is_alive() and not stop.wait(0.5):
            pass
        loop.stop()
    if loop.failed is not None:
        log.error("decode loop failed: %r", loop.failed)
        return 1
    return 0
