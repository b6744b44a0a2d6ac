"""The decode stage in a process of its own, beside the detect worker's engine.

Why: decode (every event) and the engine (every chunk) each take a large share of a core at 10,240 ranks; as two
threads of one process they take turns on one interpreter lock, and each hand-over costs both (issue #25: the
engine's CPU per event measured 2.5x in the worker what it costs alone). They already talk only through Kafka
(the decode loop produces chunks to the partials topic, the engine's agent consumes them), so the decode loop
runs unchanged in a child process: `DecodeLoop.run` on the child's main thread.

The child dies with the worker (PR_SET_PDEATHSIG, and it checks its parent besides), stops when asked (an event),
and sends its metrics' increments to the worker once a second, which adds them to its own (one Prometheus
endpoint per worker, as before). The worker's watchdog reads `failed` as it reads the thread's: a child that
ended while nobody asked it to is a failed decode loop.
"""

from __future__ import annotations

import ctypes
import logging
import multiprocessing
import os
import signal
import threading
from multiprocessing.connection import Connection
from typing import Any

from infra.settings import Settings
from streams.metrics import DetectMetrics

log = logging.getLogger(__name__)
_PR_SET_PDEATHSIG = 1
REPORT_EVERY_S = 1.0
# the worker's log line (Faust's): the child writes to the worker's stderr, so its lines sit among the worker's
LOG_FORMAT = "[%(asctime)s] [%(process)d] [%(levelname)s] %(message)s"


def log_like_the_worker(level: int) -> None:
    """The spawned child starts with no logging set up: its INFO lines (the decode group's joins and
    revocations, kafka-python's) were dropped and its warnings printed bare. Same format and level as the
    worker, Kafka client messages rate-limited as there (infra/lograte.py)."""
    from infra.lograte import install_rate_limit

    logging.basicConfig(level=level, format=LOG_FORMAT, force=True)
    install_rate_limit()


def die_with_parent(parent: int) -> bool:
    """Ask Linux to SIGKILL this process when `parent`, the worker that started it, dies (kill -9 included);
    False when it is already gone (it died before this could be asked)."""
    try:
        ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)
    except (OSError, AttributeError):
        log.warning("PR_SET_PDEATHSIG unavailable: the decode process watches its parent instead")
    return os.getppid() == parent


def _counts(metrics: DetectMetrics) -> dict[tuple[str, str], float]:
    """The counters the decode loop moves, as (name, label) -> total."""
    out: dict[tuple[str, str], float] = {}
    for metric, name in ((metrics.events_in, "events_in"), (metrics.events_out, "events_out"), (metrics.bad, "bad")):
        for family in metric.collect():
            for sample in family.samples:
                if sample.name.endswith("_total"):
                    out[(name, sample.labels.get("topic", ""))] = sample.value
    return out


class _Recorder(DetectMetrics):
    """The child's metrics: counters as the worker's, batch sizes kept for the next report."""

    def __init__(self) -> None:
        super().__init__()
        self.sizes: list[int] = []
        recorder = self

        class _Batch:
            def labels(self, *_: Any) -> _Batch:
                return self

            def observe(self, value: float) -> None:
                recorder.sizes.append(int(value))

        self.batch = _Batch()  # type: ignore[assignment]


def _child(settings: Settings, parent: int, stop: Any, conn: Connection, level: int = logging.INFO) -> None:
    if not die_with_parent(parent):
        return
    log_like_the_worker(level)
    # only the worker stops it (its `stop`), or its death: Ctrl-C and a stop's SIGTERM reach the whole process
    # group, and a child that ended on its own first would read as a failed decode loop to the worker
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    from streams.detect.ingest.loop import DecodeLoop  # the child imports the stage itself (spawn)

    metrics = _Recorder()
    loop = DecodeLoop(settings, metrics)
    runner = threading.Thread(target=loop.run, name="steplens-decode", daemon=True)
    runner.start()
    sent: dict[tuple[str, str], float] = {}
    while runner.is_alive():
        if stop.wait(REPORT_EVERY_S) or os.getppid() != parent:
            loop.stop()
        now = _counts(metrics)
        delta = {k: v - sent.get(k, 0.0) for k, v in now.items() if v != sent.get(k, 0.0)}
        sizes, metrics.sizes = metrics.sizes, []
        if delta or sizes:
            try:
                conn.send((delta, sizes))
            except OSError:
                loop.stop()
            sent = now
    conn.close()
    if loop.failed is not None:
        raise SystemExit(1)


class DecodeProcess:
    """`DecodeLoop`'s start / stop / failed, the loop running in a child process."""

    def __init__(self, settings: Settings, metrics: DetectMetrics) -> None:
        ctx = multiprocessing.get_context("spawn")  # no fork of a process with threads and open sockets
        self.metrics = metrics
        self._stop = ctx.Event()
        self._conn, child_conn = ctx.Pipe(duplex=False)
        level = logging.getLogger().getEffectiveLevel()  # the worker's, set up by Faust from --loglevel
        self._proc = ctx.Process(target=_child, args=(settings, os.getpid(), self._stop, child_conn, level),
                                 name="steplens-decode",
                                 daemon=True)
        self._reader = threading.Thread(target=self._read_reports, name="steplens-decode-metrics", daemon=True)
        self._stopping = False

    def start(self) -> None:
        self._proc.start()
        self._reader.start()

    def _read_reports(self) -> None:
        while True:
            try:
                delta, sizes = self._conn.recv()
            except (EOFError, OSError):
                return
            for (name, label), value in delta.items():
                counter = getattr(self.metrics, name)
                (counter.labels(label) if label else counter).inc(value)
            for size in sizes:
                self.metrics.batch.labels("decode").observe(size)

    @property
    def failed(self) -> BaseException | None:
        code = self._proc.exitcode
        if code is None or self._stopping:
            return None
        return RuntimeError(f"the decode process ended (exit code {code})")

    def stop(self, timeout: float = 30.0) -> None:
        self._stopping = True
        self._stop.set()
        self._proc.join(timeout)
        if self._proc.is_alive():
            log.warning("the decode process did not stop in %.0f s: killed", timeout)
            self._proc.kill()
            self._proc.join()
        self._reader.join(5.0)
