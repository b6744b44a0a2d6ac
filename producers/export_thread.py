"""One daemon thread that calls `exporter.export`, so the emitter's worker can wait on it with a bound.

Why apart: exports run on their own thread so that the worker can move queue overflow to the
spool while an export hangs (a broker timing out) instead of dropping it as queue_full; and a
daemon thread means a hung export never holds up interpreter exit.
"""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Sequence
from concurrent.futures import Future

from producers.exporter import Exporter, OutRecord


class ExportThread:
    """One daemon thread calling `exporter.export`: a hung export never holds up interpreter exit."""

    def __init__(self, exporter: Exporter, name: str) -> None:
        self._exporter = exporter
        self._jobs: deque[tuple[Sequence[OutRecord], Future[None]] | None] = deque()
        self._cv = threading.Condition()
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._thread.start()

    def submit(self, records: Sequence[OutRecord]) -> Future[None]:
        future: Future[None] = Future()
        with self._cv:
            self._jobs.append((records, future))
            self._cv.notify()
        return future

    def shutdown(self) -> None:
        with self._cv:
            self._jobs.append(None)
            self._cv.notify()

    def _run(self) -> None:
        while True:
            with self._cv:
                self._cv.wait_for(lambda: bool(self._jobs))
                job = self._jobs.popleft()
            if job is None:
                return
            records, future = job
            try:
                self._exporter.export(records)
            except BaseException as exc:  # handed to the emitter's worker, which counts it
                future.set_exception(exc)
            else:
                future.set_result(None)


__all__ = ["ExportThread"]
