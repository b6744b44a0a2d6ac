"""Packing a round's encoded events into array records (contract 1.2, docs/events.md).

Why: kafka-python's per-record work (`send`, the record append, each record's future on the
network thread) dominates the rank hook's background CPU; one array record per (topic, key) per
export round pays it once for a whole round of a rank's steps. Pure: records in, records out.

The emitter keeps counting, spooling and replaying *events* (one OutRecord each); only the
records handed to the exporter are packed, so a spool written with packing on or off replays
the same way, and a failed packed record maps back to exactly its member events.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from dataclasses import dataclass

from producers.exporter import OutRecord
from schemas import MAX_PACKED_EVENTS

# A packed value stays well under the broker's 1 MB message.max.bytes (key and record headers
# ride on top); an event bigger than this alone goes out as a single object, as before.
MAX_PACKED_BYTES = 1_000_000


@dataclass(frozen=True, slots=True)
class Packed:
    """One record for the exporter and the events it carries (in emission order)."""

    record: OutRecord
    members: tuple[OutRecord, ...]


def pack_records(
    records: Sequence[OutRecord],
    packable: Collection[str],
    *,
    max_events: int = MAX_PACKED_EVENTS,
    max_bytes: int = MAX_PACKED_BYTES,
) -> list[Packed]:
    """Group `records` per (topic, key) into JSON arrays of at most `max_events` / `max_bytes`.

    Records of topics outside `packable` stay as they are, one each. Output order: groups in
    order of their first record, each group's chunks in order, so per key the emission order is
    kept (records of different keys have no order on the wire anyway). A chunk of one event
    stays a plain object.
    """
    groups: dict[tuple[str, bytes | None], list[list[OutRecord]]] = {}
    sizes: dict[tuple[str, bytes | None], int] = {}
    order: list[tuple[str, bytes | None] | int] = []
    singles: list[OutRecord] = []
    for rec in records:
        if rec.topic not in packable:
            order.append(len(singles))
            singles.append(rec)
            continue
        gk = (rec.topic, rec.key)
        chunks = groups.get(gk)
        n = len(rec.value) + 1  # its comma or closing bracket
        if chunks is None:
            groups[gk] = [[rec]]
            sizes[gk] = 1 + n
            order.append(gk)
            continue
        last = chunks[-1]
        if len(last) >= max_events or sizes[gk] + n > max_bytes:
            chunks.append([rec])
            sizes[gk] = 1 + n
        else:
            last.append(rec)
            sizes[gk] += n
    out: list[Packed] = []
    for item in order:
        if isinstance(item, int):
            rec = singles[item]
            out.append(Packed(rec, (rec,)))
            continue
        for chunk in groups[item]:
            out.append(_pack_chunk(chunk))
    return out


def _pack_chunk(chunk: list[OutRecord]) -> Packed:
    first = chunk[0]
    if len(chunk) == 1:
        return Packed(first, (first,))
    value = b"[" + b",".join([r.value for r in chunk]) + b"]"
    return Packed(OutRecord(first.topic, first.key, value), tuple(chunk))


__all__ = ["MAX_PACKED_BYTES", "MAX_PACKED_EVENTS", "Packed", "pack_records"]
