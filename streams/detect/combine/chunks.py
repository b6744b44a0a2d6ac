"""Column chunks on the internal partials topic: the decode stage's output, keyed by job.

The raw topics are keyed per rank, so one job's ranks are spread over partitions and
workers. Instead of re-keying every event (the old design: ~5 internal records per
event), the decode stage sends ONE chunk per (job, kind) per batch, keyed by job: a
10,240-rank job at 1 step/s becomes a handful of messages a second, and all of a job's
ranks meet in the one worker that owns the job's partition.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import numpy.typing as npt
import orjson

from schemas.columns import DOMAINS, PHASES

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]


MAX_CHUNK_BYTES = 1_000_000  # well under the partials topic's max.message.bytes (4 MB)


def dumps(chunk: dict[str, Any]) -> bytes:
    return orjson.dumps(chunk)


def _rows(chunk: dict[str, Any]) -> int:
    if chunk.get("kind") == "kernels":
        return len(chunk["rows"])
    if chunk.get("kind") in ("steps", "device"):
        return len(chunk["rank"])
    return 1


def _part(chunk: dict[str, Any], lo: int, hi: int) -> dict[str, Any]:
    n = _rows(chunk)
    return {k: (v[lo:hi] if isinstance(v, list) and len(v) == n else v) for k, v in chunk.items()}


def dumps_split(chunk: dict[str, Any], limit: int = MAX_CHUNK_BYTES) -> list[bytes]:
    """The chunk as one message, or as several (row ranges in order) when it would be too large."""
    raw = orjson.dumps(chunk)
    n = _rows(chunk)
    if len(raw) <= limit or n <= 1:
        return [raw]
    mid = n // 2
    return dumps_split(_part(chunk, 0, mid), limit) + dumps_split(_part(chunk, mid, n), limit)


def loads(raw: bytes | None) -> dict[str, Any]:
    """One chunk from the partials topic; ValueError for anything that is not a JSON object."""
    if not isinstance(raw, (bytes, bytearray, memoryview, str)):
        raise ValueError(f"a chunk must be JSON bytes, got {type(raw).__name__}")
    data = orjson.loads(raw)  # orjson.JSONDecodeError is a ValueError
    if not isinstance(data, dict):
        raise ValueError("a chunk must be a JSON object")
    return data


class StepColumns:
    """A step chunk as numpy columns (NaN = not measured)."""

    __slots__ = (
        "batch",
        "end_ns",
        "groups",
        "host",
        "job",
        "phases",
        "rank",
        "samples",
        "sizes",
        "stage",
        "start_ns",
        "step",
        "world",
    )

    def __init__(self, chunk: dict[str, Any]) -> None:
        self.job: str = chunk["job"]
        self.world: int = int(chunk["world"])
        self.rank: IntArray = np.asarray(chunk["rank"], dtype=np.int64)
        self.step: IntArray = np.asarray(chunk["step"], dtype=np.int64)
        self.host: list[str] = chunk["host"]
        self.start_ns: IntArray = np.asarray(chunk["start_ns"], dtype=np.int64)
        self.end_ns: IntArray = np.asarray(chunk["end_ns"], dtype=np.int64)
        self.samples: FloatArray = np.asarray(chunk["samples"], dtype=np.float64)
        self.batch: FloatArray = np.asarray(chunk["batch"], dtype=np.float64)
        self.phases: FloatArray = np.asarray([chunk[p] for p in PHASES], dtype=np.float64).reshape(len(PHASES), -1)
        self.groups: IntArray = np.asarray([chunk[f"g_{d}"] for d in DOMAINS], dtype=np.int64).reshape(
            len(DOMAINS), -1)
        self.sizes: IntArray = np.asarray([chunk[f"n_{d}"] for d in DOMAINS], dtype=np.int64).reshape(
            len(DOMAINS), -1)
        self.stage: IntArray = np.asarray(chunk["stage"], dtype=np.int64)

    def __len__(self) -> int:
        return int(self.rank.size)
