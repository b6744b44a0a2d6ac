"""The one source of value bounds: what the contract admits is what the sinks can store.

Every integer a steplens event carries lands in a ClickHouse column of a fixed width
(`sinks/migrations`). Decoding (`schemas.decoding`) checks each integer field against the
range below, and `sinks.rows` fits values into columns with the very same ranges, so an
event the contract accepts always fits its row: detect never analyses what land would
refuse (an `end_ns` of 2**64 - 1 is a contract error, not a row error).

Strings are bounded too: identifiers (jobs, hosts, ids, metric and dictionary keys) to
`MAX_ID_CHARS`, free text (summaries, kernel names, uris) to `MAX_TEXT_CHARS`, so one valid
event can never make a worker's own output (an incident that quotes a host) too large.
"""

from __future__ import annotations

from typing import Final

Range = tuple[int, int]

UINT16: Final[Range] = (0, 2**16 - 1)
UINT32: Final[Range] = (0, 2**32 - 1)
UINT64: Final[Range] = (0, 2**64 - 1)
INT16: Final[Range] = (-(2**15), 2**15 - 1)
INT32: Final[Range] = (-(2**31), 2**31 - 1)
INT64: Final[Range] = (-(2**63), 2**63 - 1)

# Any integer field not named below: Int64, the widest column steplens has (timestamps,
# step ranges, counters), and a range every numeric column type of the sinks can hold
# once the field's own non-negativity rule applies (UInt64 columns hold [0, 2**63 - 1]).
DEFAULT_INT: Final[Range] = INT64

# Integer fields (by field name, the same meaning in every event) with a narrower column.
INT_FIELDS: Final[dict[str, Range]] = {
    "rank": UINT32,  # steps.rank, incidents.ranks[] (list items take their field's range)
    "ranks": UINT32,
    "world": UINT32,
    "size": UINT32,  # a domain's size is at most world
    "device": UINT16,  # steps.device (UInt16); incidents.device is Int32, wider
    "group": INT32,  # *_group columns, incidents.group
    "stage": INT16,
    "attempt": UINT16,  # steps.attempt, kernel_summaries.attempt, jobs.attempt (UInt16)
}

# The pipeline stage (the `pp` domain's index) is stored as Int16 (`steps.pp_stage`).
PP_STAGE: Final[Range] = INT16

MAX_ID_CHARS: Final = 256
MAX_TEXT_CHARS: Final = 4096

# String fields that hold free text rather than an identifier.
TEXT_FIELDS: Final[frozenset[str]] = frozenset({
    "summary", "cause", "suggestion", "reason", "uri", "name",
})


def int_range(field: str) -> Range:
    """The range of integer field `field` (its column's, or Int64)."""
    return INT_FIELDS.get(field, DEFAULT_INT)


def max_chars(field: str) -> int:
    """The longest string field `field` may hold."""
    return MAX_TEXT_CHARS if field in TEXT_FIELDS else MAX_ID_CHARS
