"""Types of the compiled record reader (infra/_kafka_records.c); `infra.kafka_records` is its Python face."""

from typing import Any

def records(record_cls: Any, buffer: bytes | bytearray | memoryview, pos: int, count: int, base_offset: int,
            first_timestamp: int, max_timestamp: int, log_append: bool, timestamp_type: int, /
            ) -> tuple[list[Any], int, str | None]: ...
