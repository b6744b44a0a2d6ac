"""`python -m streams worker --role detect|land|parse|alerts|decode|mitigate`: one steplens worker, in the foreground.

`detect` and `parse` are Faust apps (the stream processors that window by domain, and profile parsing).
`land` (streams/land/worker.py), `alerts` the Alertmanager bridge (streams/alerts/, posting to
`alertmanager_url`), `decode` the detect stage's decode loop as a worker of its own
(streams/detect/ingest/worker.py; the detect worker runs it itself unless `detect_runs_decode` is off) and
`mitigate` the mitigation policy acting through Slurm (streams/mitigate/) are plain kafka-python loops
without Faust, stopped by SIGTERM / SIGINT after the post, batch or round in hand.

Start-up and shutdown are built for a broker that may be away: topic creation is retried
(streams/topics_admin.py), Kafka client errors are rate-limited (infra/lograte.py), and
SIGTERM / SIGINT stop the worker cleanly (exit 0) whether or not the broker answers. Faust's
own signal handling waits for its services to stop, which never happens while aiokafka is
stuck connecting to a dead broker; so a watchdog gives the graceful stop `STOP_GRACE_S`
seconds, then leaves the process (offsets not committed are simply re-read by the next
worker: landing and detection are at-least-once).
"""

from __future__ import annotations

import argparse
import logging
import os
import signal
import sys
import threading
from types import FrameType
from typing import Any

import faust
from faust import Worker

from infra.lograte import install_rate_limit
from infra.settings import Settings, load_settings
from schemas import Topics
from streams.app import Role
from streams.runtime import STOP_GRACE_S
from streams.topics_admin import TopicsUnavailable, ensure_topics

log = logging.getLogger("streams.worker")



def create_app(settings: Settings, role: Role) -> faust.App:
    """The Faust app of one worker role (each role's module imported only when it runs)."""
    if role == "detect":
        from streams.detect.app import create_detect_app

        return create_detect_app(settings)
    from streams.profiles.app import create_parse_app

    return create_parse_app(settings)


class _Stopper:
    """SIGTERM/SIGINT before Faust runs: exit at once; once it runs: Faust stops, bounded by a watchdog."""

    def __init__(self, grace_s: float) -> None:
        self.grace_s = grace_s
        self.requested = threading.Event()

    def install(self) -> None:
        signal.signal(signal.SIGTERM, self._on_signal)
        signal.signal(signal.SIGINT, self._on_signal)

    def _on_signal(self, signum: int, frame: FrameType | None) -> None:
        del frame
        log.info("signal %d during start-up: exiting", signum)
        self.requested.set()
        raise SystemExit(0)

    def arm(self) -> None:
        """A graceful stop began: make sure the process is gone `grace_s` seconds from now."""
        if self.requested.is_set():
            return
        self.requested.set()
        timer = threading.Timer(self.grace_s, self._hard_exit)
        timer.daemon = True
        timer.start()

    def _hard_exit(self) -> None:
        log.warning("graceful stop took more than %.0fs (broker away?); exiting", self.grace_s)
        logging.shutdown()
        os._exit(0)


class _Worker(Worker):
    """A Faust worker whose graceful stop on SIGTERM/SIGINT is bounded by `_Stopper`."""

    def __init__(self, *args: Any, stopper: _Stopper, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._stopper = stopper

    def on_setup_root_logger(self, logger: logging.Logger, level: int) -> None:
        super().on_setup_root_logger(logger, level)
        install_rate_limit()  # Faust replaced the root handlers: filter the new ones too

    def _on_sigterm(self) -> None:
        self._stopper.arm()
        super()._on_sigterm()

    def _on_sigint(self) -> None:
        self._stopper.arm()
        super()._on_sigint()


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m streams")
    sub = parser.add_subparsers(dest="command", required=True)
    worker = sub.add_parser("worker", help="run one worker in the foreground")
    worker.add_argument("--role", choices=("detect", "land", "parse", "alerts", "decode", "mitigate"), required=True)
    worker.add_argument("--loglevel", default="info")
    args = parser.parse_args(argv)
    if args.role == "alerts":
        from streams.alerts.run import forward

        settings = load_settings()
        logging.basicConfig(level=args.loglevel.upper())
        install_rate_limit()
        if not settings.alertmanager_url:
            log.error("--role alerts needs STEPLENS_ALERTMANAGER_URL (or alertmanager_url in the settings file)")
            sys.exit(2)
        forward(settings, settings.alertmanager_url)
        return
    stopper = _Stopper(STOP_GRACE_S)
    stopper.install()
    settings = load_settings()
    logging.basicConfig(level=args.loglevel.upper())
    install_rate_limit()
    try:
        ensure_topics(settings, Topics(settings.topic_prefix), settings.topic_partitions,
                      should_stop=stopper.requested.is_set)
    except TopicsUnavailable as exc:
        if stopper.requested.is_set():
            sys.exit(0)
        log.error("%s", exc)
        sys.exit(2)
    if args.role == "mitigate":
        from streams.mitigate.scheduler import Slurm
        from streams.mitigate.worker import run_worker

        if not settings.mitigate_partition:
            log.error("--role mitigate needs STEPLENS_MITIGATE_PARTITION: the Slurm partition it may act on")
            sys.exit(2)
        run_worker(settings, Slurm())
        return
    if args.role == "decode":
        from streams.detect.ingest.worker import run_decode

        sys.exit(run_decode(settings, stopper.requested))
    if args.role in ("land", "parse") and not settings.uses_server:
        from sinks.read_endpoint import busy_reason

        why = busy_reason(settings.embedded_path, should_stop=stopper.requested.is_set)
        if why is not None:
            if stopper.requested.is_set():
                sys.exit(0)
            log.error("the embedded ClickHouse store %s is open in another process (%s): one process (one land "
                      "worker) owns an embedded store; run more land or parse workers against a ClickHouse server "
                      "(STEPLENS_CLICKHOUSE_URL, docs/scaling.md)", settings.embedded_path, why)
            sys.exit(2)
    if args.role == "land":
        from streams.land.worker import run_land

        sys.exit(run_land(settings, stopper.requested))
    app = create_app(settings, args.role)
    faust_worker = _Worker(app, loglevel=args.loglevel, quiet=True, stopper=stopper)
    faust_worker.execute_from_commandline()


if __name__ == "__main__":
    main()
