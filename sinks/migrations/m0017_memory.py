"""Device memory per step and the model's shape per job (contract 1.5, issue #44 item 4).

`steps` gains `mem_peak_bytes` (the step's peak allocated device memory) and `mem_reserved_bytes`
(the caching allocator's reserved bytes at its end), Nullable(Int64): null where a rank reports
none (CPU ranks, 1.4 producers). `jobs` gains `model_shape`, the start event's `ModelShape` as a
JSON object of its known fields ('' when the event has none): a handful of fields read together by
the memory model, never filtered on, so one String keeps the table's layout stable as the shape
grows. One ALTER per column: the runner skips an ADD COLUMN a crashed earlier run already made, and
an ALTER adding two would then skip the second too. Plain ADD COLUMN works on ClickHouse 18.16 and
chdb alike (migration 0014 does the same), and on a cluster (`cluster.py` alters the replicated
locals and remakes the Distributed tables over them).
"""

from __future__ import annotations

from sinks.backend import qualified
from sinks.features import Features

ID = "0017_memory"
DESCRIPTION = "steps.mem_peak_bytes, steps.mem_reserved_bytes (Nullable(Int64)), jobs.model_shape (JSON String)"

COLUMNS = (  # (table, column, type)
    ("steps", "mem_peak_bytes", "Nullable(Int64)"),
    ("steps", "mem_reserved_bytes", "Nullable(Int64)"),
    ("jobs", "model_shape", "String"),
)


def statements(db: str, features: Features) -> list[str]:
    return [f"ALTER TABLE {qualified(db, table)} ADD COLUMN `{column}` {kind}" for table, column, kind in COLUMNS]
