"""Fetched record batches read in C: kafka-python's record reader without its per-record Python.

Why this exists. kafka-python 3.0.12 reads every fetched record in Python (`DefaultRecordBatch._read_msg`:
nine varints, four slices, a length check): 3.3 µs a record in process, against 0.69 here
(`bench/results/record-reader.json`). At 10,240 ranks the workers' input is ~3,840 packed records a second; live,
reading them in C took ~0.45 CPU-µs off each event of the detect worker's decode process (~6 µs) and about as
much off the land worker's (BENCHMARKS.md, issue #25). `infra/_kafka_records.c` reads a batch's
records with the same rules and builds the same `DefaultRecord` objects, so everything above the batch
(kafka-python's fetcher: CRC checks, offsets, skipping, transactions, `ConsumerRecord`s) is unchanged.

What it touches. kafka-python builds its batches from a module-level name (`memory_records.DefaultRecordBatch`);
`install` points that name at `CRecordBatch`, a subclass whose `__iter__` reads the rest of the batch in one C
call. That is process-wide, so it is called by the workers' own consumer loops (decode, land) and by nothing
a bench measures as the plain-consumer ceiling (`bench.throughput.ceiling` checks `installed()` is false).
Control batches (transaction markers) keep kafka-python's own reader. A malformed record raises kafka-python's
`CorruptRecordError` after the good records before it, as kafka-python does. `install` fails loudly when
kafka-python is not the version whose internals this was written against.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import kafka
from kafka.errors import CorruptRecordError
from kafka.record import memory_records
from kafka.record.default_records import DefaultRecord, DefaultRecordBatch

from infra import _kafka_records

KAFKA_PYTHON = "3.0.12"  # the version whose DefaultRecordBatch internals `CRecordBatch` relies on
_BATCH_ATTRIBUTES = ("_buffer", "_pos", "_num_records", "_next_record_index", "_maybe_uncompress")


class CRecordBatch(DefaultRecordBatch):  # type: ignore[misc]
    """A v2 record batch whose records are read in C when it is iterated (see the module docstring)."""

    __slots__ = ()
    _pos: int  # DefaultRecordBatch's slots (kafka-python is untyped)
    _next_record_index: int

    def __iter__(self) -> Iterator[Any]:
        self._maybe_uncompress()
        if self.is_control_batch:
            return self  # kafka-python's reader: ControlRecords
        log_append = self.timestamp_type == self.LOG_APPEND_TIME
        records, pos, error = _kafka_records.records(
            DefaultRecord, self._buffer, self._pos, self._num_records - self._next_record_index, self.base_offset,
            self.first_timestamp, self.max_timestamp, log_append, self.timestamp_type)
        self._pos = pos  # type: ignore[misc]  # DefaultRecordBatch's slots: mypy cannot see an untyped base's
        self._next_record_index += len(records)  # type: ignore[misc]
        unread = len(self._buffer) - pos
        if error is None and unread == 0:
            return iter(records)
        return self._then_raise(records, error, unread)

    @staticmethod
    def _then_raise(records: list[Any], error: str | None, unread: int) -> Iterator[Any]:
        """The good records, then the error kafka-python would raise where it would raise it."""
        yield from records
        if error is not None:
            raise CorruptRecordError(f"Found invalid record structure: {error}")
        raise CorruptRecordError(f"{unread} unconsumed bytes after all records consumed")


def installed() -> bool:
    """Whether this process's kafka-python reads fetched batches with `CRecordBatch`."""
    return memory_records.DefaultRecordBatch is CRecordBatch


def install() -> None:
    """Make this process's kafka-python consumers read fetched v2 batches in C. Idempotent.

    Raises RuntimeError when kafka-python is another version or lacks an attribute `CRecordBatch` uses."""
    if installed():
        return
    missing = [name for name in _BATCH_ATTRIBUTES
               if name not in getattr(DefaultRecordBatch, "__slots__", ()) and not hasattr(DefaultRecordBatch, name)]
    if kafka.__version__ != KAFKA_PYTHON or missing or memory_records.DefaultRecordBatch is not DefaultRecordBatch:
        raise RuntimeError(f"kafka-python {kafka.__version__} (missing {missing}): infra/kafka_records.py was "
                           f"written against {KAFKA_PYTHON}'s record batch and must be checked for this version")
    memory_records.DefaultRecordBatch = CRecordBatch
