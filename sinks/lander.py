"""Landing, the I/O half: write a batch of rows to ClickHouse, one insert per table, until it lands.

Here, below the stages, because two of them land rows: the land worker (its events) and the
profile parser (its breakdowns).

Synchronous and one-way: the caller's thread (the land loop's, `streams/land/loop.py`) runs
the inserts itself. chdb sessions are bound to the thread that uses them and clickhouse-driver
blocks, so a lander is used from one thread only, and closed from it. The batch is the land
loop's (one batcher): the `BatchingWriter` here only groups each call's rows per table with
their deduplication tokens and keeps them until their insert succeeds; it is flushed before
`write` returns, so nothing waits in it between calls.

A failed write is retried with backoff until it succeeds: the caller commits the Kafka offsets
only afterwards, so an outage stalls landing (lag grows, visible) instead of losing rows.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

from infra.backoff import Backoff
from infra.settings import Settings
from sinks import SinkError, open_backend
from sinks.embedded import EmbeddedBackend
from sinks.migrations.runner import migrate
from sinks.read_endpoint import ReadEndpoint
from sinks.rows import TableRow
from sinks.writer import BatchingWriter, Block, SinkBackpressure, Source

log = logging.getLogger(__name__)


class ClickHouseLander:
    """Owns the backend and a `BatchingWriter`; used from one thread.

    Rows handed to the writer stay buffered there until their table's insert succeeds, so a
    retry after a partial failure writes only the tables that did not land (no table is
    inserted twice).
    """

    def __init__(self, settings: Settings, max_backoff_s: float = 10.0,
                 wait: Callable[[float], object] | None = None) -> None:
        self._settings = settings
        self._writer: BatchingWriter | None = None
        self._max_backoff = max_backoff_s
        self._wait = wait or threading.Event().wait  # the pause between retries (a stop event's wait, in a test)
        self._endpoint: ReadEndpoint | None = None

    def _pause(self, seconds: float) -> bool:
        self._wait(seconds)
        return False  # a write is retried until it lands: never give up

    @property
    def rows_written(self) -> dict[str, int]:
        return {} if self._writer is None else self._writer.rows_written

    @property
    def write_failures(self) -> int:
        return 0 if self._writer is None else self._writer.flush_failures

    def _open(self) -> BatchingWriter:
        if self._writer is None:
            backend = open_backend(self._settings)
            applied = migrate(backend, cluster=self._settings.clickhouse_cluster)
            if applied:
                log.info("applied migrations %s", applied)
            self._writer = BatchingWriter.from_settings(backend, self._settings)
            if isinstance(backend, EmbeddedBackend) and self._settings.land_read_endpoint and self._endpoint is None:
                # this process owns the embedded store: let queries read it while it lands
                self._endpoint = ReadEndpoint(backend.path, backend.database,
                                              self._settings.land_read_endpoint_port).start()
        return self._writer

    def _write_now(self, pending: list[TableRow], sources: list[Source | None], blocks: list[Block]) -> None:
        """Hand `pending` (with their `sources`) to the writer and flush; raises SinkError on failure.

        Rows the writer accepted are removed from `pending` even when this raises, so a retry
        never offers a row twice; when the writer's buffer is full (`SinkBackpressure`), it
        is flushed first (which raises SinkError while the backend is still down).
        """
        writer = self._open()
        accepted = 0
        try:
            while accepted < len(pending):
                try:
                    writer.add_row(pending[accepted], sources[accepted])
                except SinkBackpressure:
                    writer.flush()
                    continue
                accepted += 1
        finally:
            del pending[:accepted]
            del sources[:accepted]
        while blocks:
            try:
                writer.add_block(blocks[0])
            except SinkBackpressure:
                writer.flush()
                continue
            del blocks[0]
        writer.flush()

    def write(self, batch: list[TableRow], sources: list[Source] | None = None,
              blocks: list[Block] | None = None) -> None:
        """Write `batch` and `blocks` (Arrow rows of whole tables), retrying until they land; one insert per
        table per call.

        `sources` (parallel to `batch`, from `Landed.sources`) give every insert the
        deduplication token of its Kafka offsets, so a retry cannot duplicate rows. While
        ClickHouse is unreachable this does not return: the loop calling it takes no further
        messages and commits nothing, so consumption pauses and nothing is dropped; it
        resumes where it stopped once an insert succeeds.

        Retries only `SinkError` (the backend is down or refused the insert). Anything else
        is a bug and propagates: the landing worker then exits without committing the
        batch, and its restart re-reads it from the committed offset.
        """
        if not batch and not blocks:
            return
        pending_blocks = list(blocks or ())
        pending = list(batch)
        pending_sources: list[Source | None] = list(sources) if sources is not None else [None] * len(batch)
        backoff = Backoff(self._pause, (0.5, self._max_backoff))
        while True:
            try:
                self._write_now(pending, pending_sources, pending_blocks)
                return
            except SinkError as exc:
                log.error("landing failed, retrying in %.1fs: %r", backoff.delay, str(exc))
                backoff.pause()

    def close(self) -> None:
        """Close the backend (from the thread that wrote: a chdb session is bound to it)."""
        if self._endpoint is not None:
            self._endpoint.stop()
            self._endpoint = None
        if self._writer is not None:
            self._writer.backend.close()
            self._writer = None
