"""Batch rows per table and write each batch as one insert, pushing back instead of dropping.

Batching sinks (quix-streams' ``BatchingSink`` is the model) group records and write a
batch at once; when the destination cannot keep up they raise a typed backpressure
exception so the application pauses consumption instead of losing data. This writer keeps
the same two ideas with one difference: quix drops a batch after a failed write and relies
on the source replaying from the last commit, while this writer keeps every row buffered
until an insert of it has succeeded, and bounds that buffer.

Protocol for the caller (the sink loop, one thread):

1. ``add(table, columns, row, source=(topic, partition, offset))`` for each decoded event (or
   `add_row(rows.row_for(...), source)`); `source` is optional;
2. when ``due()``, ``flush()``; commit the Kafka offsets of the added events only after a
   flush that left nothing buffered (``buffered == 0``);
3. on `SinkBackpressure` from `add` the row was NOT buffered: stop consuming (pause the
   partitions, do not commit), keep calling ``flush()`` every ``retry_after`` seconds, and
   offer the row again once a flush succeeds. Nothing is ever dropped silently.

Exactly once: rows added with their Kafka `source` are batched per table, whatever topic
or partition they came from (one insert per table per flush: an insert has a fixed cost of
10-50 ms in chdb, the steps table feeding four rollups), and each batch is inserted with the
deduplication token naming every source partition's offset range,
``topic:partition:first-last`` joined by ``;`` in sorted order. A retry of a failed or
timed-out insert re-sends the same block with the same token, which engines from 22.2 on
(chdb) drop as a duplicate, rollups included; on 18.16 the tables' ReplacingMergeTree keys
are the backstop (read with FINAL). Batches only grow between flushes and are retried
unchanged, so a token always names the same rows. Rows added without a source are batched
apart and inserted without a token.

Not thread-safe: one writer per sink thread.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from infra.settings import Settings
from sinks.backend import ArrowInserts, Backend, SinkError, arrow_rows
from sinks.rows import Row, TableRow


class SinkBackpressure(Exception):
    """The writer holds `buffered` rows, at its `limit`: the offered row was not accepted.

    Raised while the backend keeps failing (or is slower than the input). The caller must
    stop consuming and acknowledging input, retry `BatchingWriter.flush` after `retry_after`
    seconds, and offer the row again afterwards.
    """

    def __init__(self, buffered: int, limit: int, retry_after: float, last_error: SinkError | None) -> None:
        cause = f"; last flush failed: {last_error}" if last_error is not None else ""
        super().__init__(f"sink buffer full: {buffered} rows buffered, limit {limit}{cause}")
        self.buffered = buffered
        self.limit = limit
        self.retry_after = retry_after
        self.last_error = last_error


Source = tuple[str, int, int]  # (topic, partition, offset) of the message a row came from
Span = tuple[str, int, int, int]  # (topic, partition, first offset, last offset) of a block's messages
_Key = tuple[str, bool]  # (table, whether the rows have a source)


@dataclass(frozen=True, slots=True)
class Block:
    """Rows of one table as an Arrow table (columns in `columns` order), from the messages `spans` name.

    The landing worker's columnar path hands these over instead of one tuple per event; the writer
    batches and tokens them exactly as it would the same rows added one by one from those messages."""

    table: str
    columns: tuple[str, ...]
    data: Any  # pyarrow.Table
    spans: tuple[Span, ...]

    @property
    def num_rows(self) -> int:
        count: int = self.data.num_rows
        return count


@dataclass(slots=True)
class _Batch:
    columns: tuple[str, ...]
    since: float
    rows: list[Row] = field(default_factory=list)
    ranges: dict[tuple[str, int], list[int]] = field(default_factory=dict)  # (topic, partition) -> [first, last]
    blocks: list[Any] = field(default_factory=list)  # Arrow tables, only while `rows` is empty
    block_rows: int = 0

    def __len__(self) -> int:
        return len(self.rows) + self.block_rows

    def unblock(self) -> None:
        """The Arrow blocks as rows, in order (a row joins a batch of blocks: rare, kept exact)."""
        rows = [row for data in self.blocks for row in arrow_rows(data)]
        self.rows[:0] = rows
        self.blocks, self.block_rows = [], 0

    def extend(self, topic: str, partition: int, first: int, last: int) -> None:
        span = self.ranges.get((topic, partition))
        if span is None:
            self.ranges[(topic, partition)] = [first, last]
        elif first < span[1]:
            raise ValueError(f"{topic}[{partition}]: offset {first} added after {span[1]}")
        else:
            span[1] = last

    def token(self) -> str | None:
        """``topic:partition:first-last`` per source partition, sorted, joined by ``;``; None without a source."""
        if not self.ranges:
            return None
        return ";".join(f"{topic}:{partition}:{first}-{last}"
                        for (topic, partition), (first, last) in sorted(self.ranges.items()))


class BatchingWriter:
    """Buffers rows per table; flushes them as one insert per table.

    max_rows: a table with this many rows makes the writer due.
    max_seconds: a buffered row this old makes the writer due; also the pause after a
        failed flush before `due()` reports true again (so a down backend is not hammered).
    max_buffered_rows: across all tables; `add` raises `SinkBackpressure` at this size.
    """

    def __init__(
        self,
        backend: Backend,
        max_rows: int,
        max_seconds: float,
        max_buffered_rows: int,
        *,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if max_rows < 1:
            raise ValueError(f"max_rows must be >= 1, got {max_rows}")
        if max_seconds <= 0:
            raise ValueError(f"max_seconds must be > 0, got {max_seconds}")
        if max_buffered_rows < max_rows:
            raise ValueError(f"max_buffered_rows ({max_buffered_rows}) must be >= max_rows ({max_rows})")
        self.backend = backend
        self.max_rows = max_rows
        self.max_seconds = max_seconds
        self.max_buffered_rows = max_buffered_rows
        self._clock = clock
        self._batches: dict[_Key, _Batch] = {}
        self._buffered = 0
        self._retry_at: float | None = None
        self.rows_written: dict[str, int] = {}
        self.flush_failures = 0
        self.last_error: SinkError | None = None

    @classmethod
    def from_settings(
        cls, backend: Backend, settings: Settings, buffer_batches: int = 10, **kwargs: Any
    ) -> BatchingWriter:
        """Batch size and age from `settings`; the buffer holds `buffer_batches` batches."""
        size = settings.sink_batch_size
        return cls(backend, size, settings.sink_batch_seconds, size * buffer_batches, **kwargs)

    @property
    def buffered(self) -> int:
        """Rows accepted but not yet written, over all tables."""
        return self._buffered

    def buffered_rows(self, table: str) -> int:
        return sum(len(batch) for key, batch in self._batches.items() if key[0] == table)

    def add(self, table: str, columns: Sequence[str], row: Sequence[Any], source: Source | None = None) -> None:
        """Buffer `row` for `table`, or raise `SinkBackpressure` (the row is then NOT buffered).

        `source`: the Kafka (topic, partition, offset) the row came from; offsets of one
        partition must be added in order (as a consumer delivers them).
        """
        if self._buffered >= self.max_buffered_rows:
            raise SinkBackpressure(self._buffered, self.max_buffered_rows, self.max_seconds, self.last_error)
        cols = tuple(columns)
        if len(row) != len(cols):
            raise ValueError(f"table {table}: row has {len(row)} values for {len(cols)} columns")
        key: _Key = (table, source is not None)
        batch = self._batches.get(key)
        if batch is None:
            batch = self._batches[key] = _Batch(cols, self._clock())
        elif batch.columns != cols:
            raise ValueError(f"table {table}: columns {cols} differ from the buffered rows' {batch.columns}")
        if source is not None:
            topic, partition, offset = source
            batch.extend(topic, partition, offset, offset)
        if batch.blocks:
            batch.unblock()
        batch.rows.append(row if type(row) is tuple else tuple(row))
        self._buffered += 1

    def add_block(self, block: Block) -> None:
        """Buffer `block`'s rows, batched and tokened as if added one by one from its `spans`
        (in order), or raise `SinkBackpressure` (nothing buffered); the buffer may go past its
        limit by one block."""
        if self._buffered >= self.max_buffered_rows:
            raise SinkBackpressure(self._buffered, self.max_buffered_rows, self.max_seconds, self.last_error)
        if block.data.num_columns != len(block.columns):
            raise ValueError(f"table {block.table}: block has {block.data.num_columns} columns for "
                             f"{len(block.columns)}")
        key: _Key = (block.table, bool(block.spans))
        batch = self._batches.get(key)
        if batch is None:
            batch = self._batches[key] = _Batch(block.columns, self._clock())
        elif batch.columns != block.columns:
            raise ValueError(f"table {block.table}: columns {block.columns} differ from the buffered rows' "
                             f"{batch.columns}")
        for topic, partition, first, last in block.spans:
            batch.extend(topic, partition, first, last)
        if batch.rows:
            batch.rows.extend(arrow_rows(block.data))
        else:
            batch.blocks.append(block.data)
            batch.block_rows += block.num_rows
        self._buffered += block.num_rows

    def add_row(self, table_row: TableRow, source: Source | None = None) -> None:
        self.add(table_row.table, table_row.columns, table_row.row, source)

    def due(self) -> bool:
        """True when a table reached `max_rows` or a buffered row is `max_seconds` old.

        After a failed flush, false until `max_seconds` have passed (then true: retry).
        """
        if self._buffered == 0:
            return False
        now = self._clock()
        if self._retry_at is not None:
            return now >= self._retry_at
        return any(
            len(batch) >= self.max_rows or now - batch.since >= self.max_seconds
            for batch in self._batches.values()
            if len(batch)
        )

    def flush(self) -> dict[str, int]:
        """Insert each table's buffered rows (one insert per table); return rows written per table.

        A batch is cleared only after its insert succeeded. If any insert fails,
        the other tables are still attempted, then the first `SinkError` is raised with the
        failed tables' rows still buffered (the successful tables' rows are counted in
        `rows_written` and gone from the buffer).
        """
        written: dict[str, int] = {}
        first_error: SinkError | None = None
        for key, batch in list(self._batches.items()):
            if not len(batch):
                continue
            table = key[0]
            try:
                self._insert(table, batch)
            except SinkError as exc:
                if first_error is None:
                    first_error = exc
                continue
            count = len(batch)
            del self._batches[key]
            self._buffered -= count
            written[table] = written.get(table, 0) + count
            self.rows_written[table] = self.rows_written.get(table, 0) + count
        if first_error is not None:
            self.flush_failures += 1
            self.last_error = first_error
            self._retry_at = self._clock() + self.max_seconds
            raise first_error
        self._retry_at = None
        self.last_error = None
        return written

    def _insert(self, table: str, batch: _Batch) -> None:
        """One insert of the batch: its Arrow blocks as one Arrow table when the backend takes that."""
        token = batch.token()
        if batch.blocks and isinstance(self.backend, ArrowInserts):
            import pyarrow as pa

            data = batch.blocks[0] if len(batch.blocks) == 1 else pa.concat_tables(batch.blocks)
            self.backend.insert_arrow(table, batch.columns, data, dedup_token=token)
            return
        if batch.blocks:
            batch.unblock()
        if token is None:
            self.backend.insert(table, batch.columns, batch.rows)
        else:
            self.backend.insert(table, batch.columns, batch.rows, dedup_token=token)
