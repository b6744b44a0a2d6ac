"""Landing, the I/O half: write row batches to ClickHouse from one dedicated thread.

chdb sessions are bound to the thread that uses them and clickhouse-driver is blocking,
so every backend call runs on a single-thread executor, off the event loop. A failed
write is retried with backoff until it succeeds: the caller acks the Kafka messages only
afterwards, so an outage stalls landing (lag grows, visible) instead of losing rows.
"""

from __future__ import annotations

import asyncio
import logging
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from sinks import Backend, SinkError, open_backend
from sinks.migrations.runner import migrate
from sinks.rows import TableRow
from steplens.config import Settings

log = logging.getLogger(__name__)


class ClickHouseLander:
    def __init__(self, settings: Settings, max_backoff_s: float = 10.0) -> None:
        self._settings = settings
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="steplens-sink")
        self._backend: Backend | None = None
        self._max_backoff = max_backoff_s
        self.rows_written: dict[str, int] = {}
        self.write_failures = 0

    def _open(self) -> Backend:
        if self._backend is None:
            backend = open_backend(self._settings)
            applied = migrate(backend)
            if applied:
                log.info("applied migrations %s", applied)
            self._backend = backend
        return self._backend

    def _write_now(self, batch: list[TableRow]) -> None:
        backend = self._open()
        by_table: dict[tuple[str, tuple[str, ...]], list[tuple[Any, ...]]] = {}
        for table, columns, values in batch:
            by_table.setdefault((table, columns), []).append(values)
        for (table, columns), values_list in by_table.items():
            backend.insert(table, columns, values_list)
            self.rows_written[table] = self.rows_written.get(table, 0) + len(values_list)

    async def write(self, batch: list[TableRow]) -> None:
        """Write `batch`, retrying until it lands (raises only on cancellation)."""
        if not batch:
            return
        loop = asyncio.get_running_loop()
        backoff = 0.5
        while True:
            try:
                await loop.run_in_executor(self._executor, self._write_now, batch)
                return
            except SinkError as exc:
                self.write_failures += 1
                log.error("landing failed, retrying in %.1fs: %s", backoff, exc)
                await asyncio.sleep(backoff)
                backoff = min(backoff * 2, self._max_backoff)

    def close(self) -> None:
        def _close() -> None:
            if self._backend is not None:
                self._backend.close()
                self._backend = None

        self._executor.submit(_close).result(timeout=30)
        self._executor.shutdown(wait=True)
