"""Which optional ClickHouse features an engine version has, so one DDL runs on old and new.

The server steplens is tested against is Debian's ClickHouse 18.16.1 (December 2018); the
embedded engine (chdb-core 26.9) is seven years newer. The migrations ask `Features` instead
of hard-coding either:

- LowCardinality: experimental (behind ``allow_experimental_low_cardinality_type``) until the
  setting became obsolete in 19.3, so it is used from 19.3 on;
- per-column compression codecs (``CODEC(Delta, ZSTD)``): 19.1.6;
- table and column TTL: 19.6;
- DateTime64: 20.1;
- insert deduplication on a non-replicated MergeTree: the table setting
  ``non_replicated_deduplication_window`` (20.x) plus the per-insert
  ``insert_deduplication_token`` (22.2). 18.16 has neither: there a retried insert is
  collapsed only by the ReplacingMergeTree key (read with FINAL), and rollups fed by
  materialized views may count a replayed block twice.

- packed part storage (``min_bytes_for_full_part_storage``: a small part is one ``data.packed``
  archive instead of ~12 files): open source since 26.7; before that the setting exists but
  is ClickHouse Cloud's only. Parts written packed cannot be read by an older engine.

Map needs 21.x, so no table uses it: key/value data is stored as two parallel arrays.
"""

from __future__ import annotations

from dataclasses import dataclass

LOW_CARDINALITY_SINCE = (19, 3, 0)
CODECS_SINCE = (19, 1, 6)
TTL_SINCE = (19, 6, 0)
DATETIME64_SINCE = (20, 1, 0)
INSERT_DEDUP_TOKEN_SINCE = (22, 2, 0)

PACKED_PARTS_SINCE = (26, 7, 0)
FULL_PART_STORAGE_BYTES = 10 << 20  # parts smaller than this (uncompressed) are packed: see m0015
DEDUP_WINDOW = 10_000  # blocks remembered per table: hours of retries at one insert per second


@dataclass(frozen=True, slots=True)
class Features:
    low_cardinality: bool
    codecs: bool
    ttl: bool
    datetime64: bool
    dedup_token: bool = False
    packed_parts: bool = False

    @classmethod
    def for_version(cls, version: tuple[int, int, int]) -> Features:
        return cls(
            low_cardinality=version >= LOW_CARDINALITY_SINCE,
            codecs=version >= CODECS_SINCE,
            ttl=version >= TTL_SINCE,
            datetime64=version >= DATETIME64_SINCE,
            dedup_token=version >= INSERT_DEDUP_TOKEN_SINCE,
            packed_parts=version >= PACKED_PARTS_SINCE,
        )

    def dictionary(self, inner: str) -> str:
        """Type of a low-cardinality column (job, host, rule names): LowCardinality(inner) when supported."""
        return f"LowCardinality({inner})" if self.low_cardinality else inner

    def timestamp(self, inner: str = "Int64") -> str:
        """Type and codec of an epoch-nanosecond column: Delta then ZSTD when codecs exist."""
        return f"{inner} CODEC(Delta, ZSTD)" if self.codecs else inner

    def codec(self, ch_type: str, codec: str) -> str:
        """`ch_type CODEC(codec)` when codecs exist, else the plain type."""
        return f"{ch_type} CODEC({codec})" if self.codecs else ch_type

    def ttl_clause(self, expression: str) -> str:
        """A table TTL clause (leading newline) when the engine has TTL, else ''."""
        return f"\nTTL {expression}" if self.ttl else ""

    def dedup_settings(self) -> str:
        """Table SETTINGS that make a non-replicated MergeTree honour insert deduplication tokens."""
        return f"\nSETTINGS non_replicated_deduplication_window = {DEDUP_WINDOW}" if self.dedup_token else ""
