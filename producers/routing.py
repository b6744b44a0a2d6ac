"""Where an event goes: its encoded value, topic and key, or the reason it is not sent.

Why apart: this is the contract side of emitting (which topic, which key keeps a rank's events
ordered on one partition, the size limit), pure and the same for every emitter, while the queue,
spool and threads are the emitter's own business (producers/delivery.py, producers/emitter.py).
"""

from __future__ import annotations

from producers.delivery import ENCODE_ERROR, TOO_LARGE, UNROUTABLE
from producers.exporter import OutRecord
from schemas import DeviceSample, Event, JobEvent, KernelBatch, KernelSummary, ProfileReady, StepEvent, Topics, encode
from schemas.topics import job_key, rank_key


def route(event: Event, topics: Topics, *, pack: bool = False) -> tuple[str, bytes | None] | None:
    """Topic and key for an event, or None for types producers do not send.

    Per-rank events are keyed by rank so one rank's events stay ordered on one partition.
    Device samples are keyed per device, or per host when packing (one record per node per tick).
    """
    if isinstance(event, StepEvent):
        return topics.steps, rank_key(event.job, event.rank)
    if isinstance(event, KernelSummary):
        return topics.kernel_summaries, rank_key(event.job, event.rank)
    if isinstance(event, KernelBatch):
        return topics.kernels, rank_key(event.job, event.rank)
    if isinstance(event, DeviceSample):
        return topics.device, event.host.encode() if pack else f"{event.host}/{event.device}".encode()
    if isinstance(event, JobEvent):
        return topics.jobs, job_key(event.job)
    if isinstance(event, ProfileReady):
        return topics.profiles, rank_key(event.job, event.rank)
    return None


def to_record(event: Event, topics: Topics, *, pack: bool, max_event_bytes: int) -> OutRecord | str:
    """The encoded, routed record of `event`, or the drop reason (encode_error, too_large, unroutable)."""
    try:
        value = encode(event)
    except Exception:
        return ENCODE_ERROR
    if len(value) > max_event_bytes:
        return TOO_LARGE
    dest = route(event, topics, pack=pack)
    if dest is None:
        return UNROUTABLE
    return OutRecord(dest[0], dest[1], value)


__all__ = ["route", "to_record"]
