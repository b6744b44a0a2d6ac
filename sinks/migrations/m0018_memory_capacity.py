"""The device's memory capacity per step report (contract 1.5, issue #44 item 4).

`steps` gains `mem_capacity_bytes`, Nullable(Int64): what a rank's `mem_peak_bytes` and
`mem_reserved_bytes` are a share of, so the history answers "how full was this device" and the OOM
forecast's figures can be checked after the fact; null where a rank reports none. One plain ADD COLUMN,
as migration 0017.
"""

from __future__ import annotations

from sinks.backend import qualified
from sinks.features import Features

ID = "0018_memory_capacity"
DESCRIPTION = "steps.mem_capacity_bytes (Nullable(Int64))"


def statements(db: str, features: Features) -> list[str]:
    return [f"ALTER TABLE {qualified(db, 'steps')} ADD COLUMN `mem_capacity_bytes` Nullable(Int64)"]
