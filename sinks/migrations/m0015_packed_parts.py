"""Small parts stored packed: one ``data.packed`` file per part instead of about twelve.

Every insert writes one part into its table and one into each table a materialized view
feeds (a step block: steps, topology and four rollups, six parts), and merges keep
writing and deleting them. Each part of the compact kind is about twelve small files
(columns.txt, count.txt, checksums.txt, data.bin, marks, partition and min-max index...).
On the embedded store the land worker paid for those files itself: creating files on an
ext4 volume with many freshly deleted inodes (the parts merges drop) was a third of its
CPU (`perf` on `bench.land_split --kind step`), and the materialized views' parts were
most of an insert's fixed ~100 ms. Packed storage writes the same part as one archive.

Parts under 10 MiB uncompressed are packed: the size below which ClickHouse writes a
part compact (``min_bytes_for_wide_part``'s default), i.e. the fresh and lightly merged
parts that are written and merged away most often. Larger parts stay one file per
stream. Only engines from 26.7 on (the embedded chdb) store packed parts; the setting is
not sent to older servers, where it does nothing or is unknown. A table that a later
migration creates gets the same ALTER in that migration (a test checks every table has it).
"""

from __future__ import annotations

from sinks.backend import qualified
from sinks.features import FULL_PART_STORAGE_BYTES, Features

ID = "0015_packed_parts"
DESCRIPTION = "small parts (< 10 MiB) stored as one packed file on engines from 26.7 (embedded chdb)"

TABLES = (  # every MergeTree table of migrations 0001-0014
    "steps", "incidents", "jobs", "dead_letters", "kernel_summaries", "kernels", "device_samples",
    "profiles", "control_commands", "topology", "steps_by_minute", "steps_by_step", "steps_by_rank",
    "steps_by_day", "host_health", "profile_breakdowns", "profile_kernels",
)


def statements(db: str, features: Features) -> list[str]:
    if not features.packed_parts:
        return []
    return [
        f"ALTER TABLE {qualified(db, table)} MODIFY SETTING min_bytes_for_full_part_storage = {FULL_PART_STORAGE_BYTES}"
        for table in TABLES
    ]
